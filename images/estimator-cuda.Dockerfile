# GPU-server estimator (amd64): proxy-dataset estimation pods run
# `edgetrain worker -- edgetrain estimate …`. The default base is PyTorch's CUDA runtime image,
# whose torch the venv reuses (--system-site-packages: pip finds torch>=2.2 already there).
# On a base without torch, TORCH names the wheel to install, without its GPU compiler
# (scripts/build-images.sh estimator-cpu: the local Debian base, estimates on CPUs).
#   docker build -f images/estimator-cuda.Dockerfile .
#   scripts/build-images.sh estimator
ARG BASE=pytorch/pytorch:2.4.1-cuda12.1-cudnn9-runtime
FROM ${BASE}
# Options for every pip call, e.g. "--no-index --find-links /wheels" (build-images.sh).
ARG PIP_OPTIONS=""
# e.g. "torch==2.15.0", installed without triton (imported only to compile for a GPU; its CUDA
# libraries stay, libtorch links them). Where TORCH is empty the base's torch is used.
ARG TORCH=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN python3 -m venv --system-site-packages /opt/venv
# Dependencies (with the `train` extra) in their own layer: a source change reuses it.
COPY pyproject.toml images/requirements.py /src/
RUN python3 /src/requirements.py /src/pyproject.toml train > /src/requirements.txt \
 && if [ -n "$TORCH" ]; then /opt/venv/bin/pip install $PIP_OPTIONS --no-deps "$TORCH" \
      && sed -i '/^torch\([<>=!~ ;]\|$\)/d' /src/requirements.txt \
      && /opt/venv/bin/python /src/requirements.py --installed-deps torch --without-triton \
           >> /src/requirements.txt; fi \
 && /opt/venv/bin/pip install $PIP_OPTIONS -r /src/requirements.txt
COPY README.md /src/
COPY edgetrain /src/edgetrain
# The package's bytecode by hash, not file time (as trainer-jetson.Dockerfile's): the pods'
# read-only root never compiles it again.
RUN /opt/venv/bin/pip install $PIP_OPTIONS --no-compile --no-deps /src \
 && /opt/venv/bin/python -m compileall -q --invalidation-mode unchecked-hash \
      "$(/opt/venv/bin/python -c 'import edgetrain, os; print(os.path.dirname(edgetrain.__file__))')" \
 && /opt/venv/bin/python -c "import torch, edgetrain.workloads" \
 && rm -rf /src
ENV PATH=/opt/venv/bin:$PATH
ENTRYPOINT ["edgetrain"]
CMD ["--help"]
