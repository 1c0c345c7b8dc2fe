# Single entry point. Both targets build their own virtual environment from nothing:
# the CPU wheel of torch 2.13.0 first (so no CUDA build is ever pulled), then the package.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH := torch==2.13.0

.PHONY: demo test lint typecheck unit docs bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q $(TORCH)

$(VENV)/.report-installed: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e ".[report]"
	touch $@

$(VENV)/.dev-installed: $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e ".[dev,report]"
	touch $@

## The main job: `embedmetrics report` on the built-in example (every metric family, one table).
demo: $(VENV)/.report-installed
	$(BIN)/embedmetrics report

## Everything CI checks: lint, format, types, tests (with doctests), docs (warnings are errors).
test: $(VENV)/.dev-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy src
	$(BIN)/python -m pytest -q
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $(VENV)/site

bench: $(VENV)/.dev-installed
	for f in benchmarks/bench_*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) site .mypy_cache .ruff_cache
