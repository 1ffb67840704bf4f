# GPU-server estimator (amd64): proxy-dataset estimation pods run
# `edgetrain worker -- edgetrain estimate …`. The default base is PyTorch's CUDA runtime image,
# whose torch the venv reuses (--system-site-packages: pip finds torch>=2.2 already there).
# On a base without torch (scripts/build-images.sh: the local Debian base) pip installs PyPI's
# x86-64 torch wheel, which brings the CUDA libraries itself (several GB).
#   docker build -f images/estimator-cuda.Dockerfile .
#   scripts/build-images.sh estimator
ARG BASE=pytorch/pytorch:2.4.1-cuda12.1-cudnn9-runtime
FROM ${BASE}
# Options for every pip call, e.g. "--no-index --find-links /wheels" (build-images.sh).
ARG PIP_OPTIONS=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN python3 -m venv --system-site-packages /opt/venv
# Dependencies (with the `train` extra) in their own layer: a source change reuses it.
COPY pyproject.toml images/requirements.py /src/
RUN python3 /src/requirements.py /src/pyproject.toml train > /src/requirements.txt \
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
