# edgetrain: every target installs what it needs; nothing is installed by hand.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
CACHE_DIR ?= $(HOME)/.cache/edgetrain

.PHONY: setup test lint unit demo bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@mkdir -p $(CACHE_DIR)
	@touch $@

setup: $(STAMP)

lint: setup
	$(BIN)/ruff check edgetrain tests
	$(BIN)/mypy --strict edgetrain

unit: setup
	$(BIN)/pytest -q

test: lint unit

demo: setup
	@echo "make demo: the standalone pipeline (edgetrain run) has not landed yet; try:"
	$(BIN)/edgetrain plan --profile examples/nano-resnet18-profile.csv \
		--efficiency examples/resnet18-efficiency.json --power-limit 5

bench: setup
	$(BIN)/edgetrain bench planner

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
