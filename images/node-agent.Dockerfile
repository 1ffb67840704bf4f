# edgetrain node agent: `edgetrain node-agent` (DaemonSet on Jetson nodes, privileged, /sys hostPath).
# Slim on purpose: the agent needs no PyTorch, so the package goes in without its heavy deps.
# Multi-arch: build for linux/arm64 (Jetson); amd64 works for twins and CI.
FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY edgetrain ./edgetrain
RUN pip install --no-deps . \
 && pip install "numpy>=1.26" "pydantic>=2.6" "typer>=0.12" "rich>=13.7" "httpx>=0.27" \
        "cryptography>=42" "pyyaml>=6" "prometheus-client>=0.20" \
 && python -c "import edgetrain.node_agent" \
 && rm -rf /src
WORKDIR /
# Root: writing devfreq min_freq/max_freq needs it (the chart runs the pod privileged).
EXPOSE 9400
ENTRYPOINT ["edgetrain", "node-agent"]
