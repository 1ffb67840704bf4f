# Jetson trainer (arm64): profiling and fine-tuning pods run `edgetrain worker -- edgetrain …`.
# NVIDIA's L4T PyTorch base brings the Jetson CUDA build of torch; match the tag to the
# fleet's L4T release (r35.x = JetPack 5, r36.x = JetPack 6). Build with
#   docker buildx build --platform linux/arm64 -f images/trainer-jetson.Dockerfile .
ARG L4T_BASE=nvcr.io/nvidia/l4t-pytorch:r35.2.1-pth2.0-py3
FROM ${L4T_BASE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY edgetrain ./edgetrain
# Keep the base image's torch: install the package without resolving torch again.
RUN python3 -m pip install --upgrade pip \
 && python3 -m pip install --no-deps . \
 && python3 -m pip install "numpy>=1.26" "pydantic>=2.6" "typer>=0.12" "rich>=13.7" \
        "httpx>=0.27" "cryptography>=42" "pyyaml>=6" "matplotlib>=3.8" "jetson-stats>=4.2" \
 && python3 -c "import torch, edgetrain.workloads" \
 && rm -rf /src
WORKDIR /
ENTRYPOINT ["edgetrain"]
CMD ["--help"]
