# edgetrain operator: `edgetrain operator` (kopf). CPU-only PyTorch keeps the planner's predictor
# importable without CUDA libraries.
FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY edgetrain ./edgetrain
RUN pip install --index-url https://download.pytorch.org/whl/cpu "torch>=2.2" \
 && pip install . \
 && python -c "import edgetrain.operator" \
 && rm -rf /src
WORKDIR /
USER 65532:65532
ENTRYPOINT ["edgetrain", "operator"]
