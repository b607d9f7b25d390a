# turbo-campaign: every target works from nothing on a fresh machine (Python 3.10+).
# Variables: OP, GRANULARITY, BACKEND, TARGET, SOURCE, ROUND, HYPOTHESIS, PATCH, LEVEL,
# CAMPAIGN, GPU_ARCHS, TURBO_SRC, BUNDLE.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CAMPAIGN_CMD := $(BIN)/campaign
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

OP ?= gemm_fp8
GRANULARITY ?= blockwise
BACKEND ?= TRITON
TARGET ?= example
SOURCE ?=
LEVEL ?= quick
CAMPAIGN ?=
CAMPAIGN_ARG := $(if $(CAMPAIGN),--campaign $(CAMPAIGN),)

.PHONY: install test lint format typecheck demo baseline validate status report accept \
        image image-workspace image-cpu reproduce mcp clean

install: $(STAMP)

$(STAMP): pyproject.toml examples/pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[dev]" -e examples
	touch $(STAMP)

test: install
	$(BIN)/python -m ruff check runner tests examples benchmarks
	$(BIN)/python -m ruff format --check runner tests examples benchmarks
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest tests examples/tests

lint: install
	$(BIN)/python -m ruff check runner tests examples benchmarks

format: install
	$(BIN)/python -m ruff format runner tests examples benchmarks
	$(BIN)/python -m ruff check --fix runner tests examples benchmarks

typecheck: install
	$(BIN)/python -m mypy

demo: install
	$(BIN)/python -m runner demo

baseline: install
	$(CAMPAIGN_CMD) baseline $(CAMPAIGN_ARG) --op $(OP) --granularity $(GRANULARITY) \
	  --backend $(BACKEND) --target $(TARGET) $(if $(SOURCE),--source $(SOURCE),)

validate: install
	@test -n "$(ROUND)" || { echo "make validate needs ROUND=N HYPOTHESIS='...'"; exit 2; }
	$(CAMPAIGN_CMD) validate $(CAMPAIGN_ARG) --round $(ROUND) --hypothesis "$(HYPOTHESIS)" \
	  --level $(LEVEL) $(if $(PATCH),--patch $(PATCH),)

status: install
	$(CAMPAIGN_CMD) status $(CAMPAIGN_ARG)

report: install
	$(CAMPAIGN_CMD) report $(CAMPAIGN_ARG)

accept: install
	$(CAMPAIGN_CMD) accept $(CAMPAIGN_ARG)

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .pytest_cache
