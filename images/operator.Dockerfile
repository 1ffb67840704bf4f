# edgetrain operator: `edgetrain operator` (kopf). No PyTorch: the operator only plans (numpy)
# and talks to the API server, so the package goes in without its `train` extra.
#   docker build -f images/operator.Dockerfile .                    (python:3.11-slim, PyPI)
#   scripts/build-images.sh operator        (podman, local Debian base, cached wheels)
ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS build
# Options for every pip call, e.g. "--no-index --find-links /wheels" (build-images.sh).
ARG PIP_OPTIONS=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
RUN python3 -m venv /opt/venv
# Dependencies in their own layer: a source change reuses it. Pruned: the Kubernetes client's
# asyncio copy (66 MB; edgetrain uses the sync client, kopf its own aiohttp) and numpy's tests.
COPY pyproject.toml images/requirements.py /src/
RUN python3 /src/requirements.py /src/pyproject.toml > /src/requirements.txt \
 && /opt/venv/bin/pip install $PIP_OPTIONS -r /src/requirements.txt "setuptools>=77" wheel \
 && rm -rf /opt/venv/lib/python3*/site-packages/kubernetes/aio \
           /opt/venv/lib/python3*/site-packages/numpy/*/tests
COPY README.md /src/
COPY edgetrain /src/edgetrain
# The package's own build uses the setuptools installed above, not an isolated build env: under
# arm64 emulation, making that env on every source change cost minutes.
RUN /opt/venv/bin/pip install $PIP_OPTIONS --no-deps --no-build-isolation /src \
 && /opt/venv/bin/python -c "import edgetrain.operator.runner, edgetrain.operator.handlers, edgetrain.operator.budget_handlers" \
 && /opt/venv/bin/python -m pip uninstall -q -y pip setuptools wheel

FROM ${BASE}
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /opt/venv /opt/venv
USER 65532:65532
ENTRYPOINT ["edgetrain", "operator"]
