# Jetson trainer (arm64): profiling and fine-tuning pods run `edgetrain worker -- edgetrain …`.
# The default base is a JetPack 6 image with NVIDIA's Jetson CUDA build of torch (L4T r36,
# Ubuntu 22.04, Python 3.10); images/README.md gives the JetPack 6 and 7 choices. The venv sees
# the base's torch (--system-site-packages) and pip never replaces it. On a base without torch,
# TORCH names the wheel to install: scripts/build-images.sh trainer-cpu builds this file on the
# local Debian base with PyPI's last aarch64 CPU wheel, to run the entry points under emulation.
#   docker buildx build --platform linux/arm64 -f images/trainer-jetson.Dockerfile .
#   docker buildx build --platform linux/arm64 --build-arg BASE=... -f images/trainer-jetson.Dockerfile .
ARG BASE=nvcr.io/nvidia/pytorch:24.12-py3-igpu
# The wheel's stage runs on the build machine's own architecture (build-images.sh passes its
# local Debian base): the package is pure Python, so one wheel serves any Python >= 3.10.
ARG PACKAGE_BASE=python:3.11-slim-bookworm
# Set by BuildKit; podman 4 needs them as build args (build-images.sh passes both): without
# them, it builds every stage for the target platform.
ARG BUILDPLATFORM
ARG TARGETPLATFORM

# Built natively: under arm64 emulation, building it from source cost more than a minute.
FROM --platform=$BUILDPLATFORM ${PACKAGE_BASE} AS package
ARG PIP_OPTIONS=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
RUN python3 -m venv /opt/build && /opt/build/bin/pip install $PIP_OPTIONS "setuptools>=77" wheel
COPY pyproject.toml README.md /src/
COPY edgetrain /src/edgetrain
RUN /opt/build/bin/pip wheel $PIP_OPTIONS --no-deps --no-build-isolation -w /dist /src

FROM --platform=$TARGETPLATFORM ${BASE}
# Options for every pip call, e.g. "--no-index --find-links /wheels" (build-images.sh).
ARG PIP_OPTIONS=""
# A torch requirement for bases without torch, e.g. "torch==2.9.1" (CPU only on aarch64).
ARG TORCH=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN python3 -m venv --system-site-packages /opt/venv
# Dependencies (with the `train` extra) in their own layer. Once a torch is importable (the
# base's Jetson build, or TORCH), it leaves the list, so pip cannot swap in a CPU or SBSA wheel.
COPY pyproject.toml images/requirements.py /src/
RUN python3 /src/requirements.py /src/pyproject.toml train > /src/requirements.txt \
 && if [ -n "$TORCH" ]; then /opt/venv/bin/pip install $PIP_OPTIONS "$TORCH"; fi \
 && if /opt/venv/bin/python -c "import torch" 2>/dev/null; then \
      sed -i '/^torch\([<>=!~ ;]\|$\)/d' /src/requirements.txt; fi \
 && /opt/venv/bin/pip install $PIP_OPTIONS -r /src/requirements.txt
# Byte-compiled here, by the image's own Python (3.10 on JetPack 6, 3.12 on 7): the pods' root
# file system is read-only, so nothing compiles later. The package's bytecode is hash-based and
# unchecked: it stays valid whatever a build or registry does to file times. The dependencies keep
# pip's timestamp bytecode (valid, as the image tests check): making it again under arm64
# emulation took 168 s, natively it would be a second copy of 240 MB of .pyc.
COPY --from=package /dist /dist
RUN /opt/venv/bin/pip install $PIP_OPTIONS --no-compile --no-deps --no-index /dist/*.whl \
 && /opt/venv/bin/python -m compileall -q --invalidation-mode unchecked-hash \
      "$(/opt/venv/bin/python -c 'import edgetrain, os; print(os.path.dirname(edgetrain.__file__))')" \
 && rm -rf /src /dist
ENV PATH=/opt/venv/bin:$PATH
ENTRYPOINT ["edgetrain"]
CMD ["--help"]
