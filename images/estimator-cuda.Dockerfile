# GPU-server estimator (amd64): proxy-dataset estimation pods run
# `edgetrain worker -- edgetrain estimate …` on the CUDA PyTorch base.
ARG CUDA_BASE=pytorch/pytorch:2.4.1-cuda12.1-cudnn9-runtime
FROM ${CUDA_BASE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY edgetrain ./edgetrain
RUN pip install --no-deps . \
 && pip install "numpy>=1.26" "pydantic>=2.6" "typer>=0.12" "rich>=13.7" "httpx>=0.27" \
        "cryptography>=42" "pyyaml>=6" "matplotlib>=3.8" \
 && python -c "import torch, edgetrain.workloads" \
 && rm -rf /src
WORKDIR /
ENTRYPOINT ["edgetrain"]
CMD ["--help"]
