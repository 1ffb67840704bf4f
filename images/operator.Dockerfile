# edgetrain operator: `edgetrain operator` (kopf). No PyTorch: the operator only plans (numpy)
# and talks to the API server, so the package goes in without its `train` extra.
#   docker build -f images/operator.Dockerfile .                    (python:3.11-slim, PyPI)
#   scripts/build-images.sh operator        (podman, local Debian base, cached wheels)
ARG BASE=python:3.11-slim-bookworm
# The package stage's base, on the build machine's own architecture (build-images.sh passes the
# local Debian base of that architecture); Python 3.11, as BASE's.
ARG PACKAGE_BASE=python:3.11-slim-bookworm
# Set by BuildKit; podman 4 needs them as build args (build-images.sh passes both): without
# them, it builds every stage for the target platform.
ARG BUILDPLATFORM
ARG TARGETPLATFORM

# The package is pure Python: built and installed once, natively, for every architecture. Under
# arm64 emulation pip's own run cost more than a minute on every source change.
FROM --platform=$BUILDPLATFORM ${PACKAGE_BASE} AS package
ARG PIP_OPTIONS=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
RUN python3 -m venv /opt/build && /opt/build/bin/pip install $PIP_OPTIONS "setuptools>=77" wheel \
 && python3 -m venv --without-pip /opt/venv
COPY pyproject.toml README.md /src/
COPY edgetrain /src/edgetrain
# Into an empty venv at the image's path: its site-packages then holds the package alone
# (byte-compiled by the same Python version as the image's), its bin the `edgetrain` script.
RUN /opt/build/bin/pip wheel $PIP_OPTIONS --no-deps --no-build-isolation -w /dist /src \
 && /opt/build/bin/pip --python /opt/venv/bin/python install --no-compile --no-deps --no-index \
      /dist/*.whl \
 && /opt/venv/bin/python -m compileall -q -j 0 --invalidation-mode unchecked-hash \
      /opt/venv/lib/python3.11/site-packages

FROM --platform=$TARGETPLATFORM ${BASE} AS deps
# Options for every pip call, e.g. "--no-index --find-links /wheels" (build-images.sh).
ARG PIP_OPTIONS=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
# Pruned: the Kubernetes client's asyncio copy (66 MB; edgetrain uses the sync client, kopf its
# own aiohttp) and numpy's tests.
COPY pyproject.toml images/requirements.py /src/
RUN python3 -m venv /opt/venv \
 && python3 /src/requirements.py /src/pyproject.toml > /src/requirements.txt \
 && /opt/venv/bin/pip install $PIP_OPTIONS -r /src/requirements.txt \
 && rm -rf /opt/venv/lib/python3*/site-packages/kubernetes/aio \
           /opt/venv/lib/python3*/site-packages/numpy/*/tests \
 && /opt/venv/bin/python -m pip uninstall -q -y pip setuptools

# The dependencies' bytecode, made again here natively with hashes instead of timestamps (the
# .py files are the same on every architecture, and so is CPython 3.11's bytecode): it stays
# valid whatever a build or registry does to file times, and the pods' read-only root never
# compiles. Under arm64 emulation the same compileall took 53 s, natively 5 s (2026-11-27).
FROM --platform=$BUILDPLATFORM ${PACKAGE_BASE} AS bytecode
COPY --from=deps /opt/venv /opt/venv
RUN want="$(sed -n 's/^version *= *\([0-9]*\.[0-9]*\).*/\1/p' /opt/venv/pyvenv.cfg)" \
 && have="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
 && if [ "$want" != "$have" ]; then echo "bytecode: BASE has Python $want, PACKAGE_BASE $have:" \
      "pass a PACKAGE_BASE with Python $want" >&2; exit 1; fi \
 && python3 -m compileall -q -f -j 0 --invalidation-mode unchecked-hash \
      "/opt/venv/lib/python$want/site-packages"

FROM --platform=$TARGETPLATFORM ${BASE}
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# The dependencies' layer is reused until pyproject.toml changes; a source change adds only
# the package's own small layer.
COPY --from=bytecode /opt/venv /opt/venv
COPY --from=package /opt/venv/lib/python3.11/site-packages/ /opt/venv/lib/python3.11/site-packages/
COPY --from=package /opt/venv/bin/edgetrain /opt/venv/bin/edgetrain
USER 65532:65532
ENTRYPOINT ["edgetrain", "operator"]
