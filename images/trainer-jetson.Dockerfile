# Jetson trainer (arm64): profiling and fine-tuning pods run `edgetrain worker -- edgetrain …`.
# The default base is NVIDIA's L4T PyTorch image (the Jetson CUDA build of torch); match its tag
# to the fleet's L4T release. edgetrain needs Python >= 3.11: L4T r35 bases ship 3.8 and r36
# bases 3.10, so pass a base with Python 3.11 and a Jetson torch build (images/README.md).
# The venv reuses the base's torch (--system-site-packages); a base without torch gets PyPI's
# aarch64 wheel, which has no Jetson GPU support (CPU only).
#   docker buildx build --platform linux/arm64 --build-arg BASE=... -f images/trainer-jetson.Dockerfile .
ARG BASE=nvcr.io/nvidia/l4t-pytorch:r35.2.1-pth2.0-py3
FROM ${BASE}
# Options for every pip call, e.g. "--no-index --find-links /wheels" (build-images.sh).
ARG PIP_OPTIONS=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN python3 -m venv --system-site-packages /opt/venv
# Dependencies (with the `train` and `jetson` extras) in their own layer.
COPY pyproject.toml images/requirements.py /src/
RUN python3 /src/requirements.py /src/pyproject.toml train jetson > /src/requirements.txt \
 && /opt/venv/bin/pip install $PIP_OPTIONS -r /src/requirements.txt
COPY README.md /src/
COPY edgetrain /src/edgetrain
RUN /opt/venv/bin/pip install $PIP_OPTIONS --no-deps /src \
 && /opt/venv/bin/python -c "import torch, edgetrain.workloads" \
 && rm -rf /src
ENV PATH=/opt/venv/bin:$PATH
ENTRYPOINT ["edgetrain"]
CMD ["--help"]
