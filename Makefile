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
	# the contract suite again on the other CPU kernels: ATen's AVX2 and scalar paths, MKL's AVX2 and SSE4.2;
	# the two runs side by side, one thread each (a third setting the promises cover), the second's log after
	ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
	  $(BIN)/python -m pytest -q -p no:cacheprovider tests/contracts > $(VENV)/contracts-avx2.log 2>&1 & avx2=$$!; \
	ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 \
	  $(BIN)/python -m pytest -q -p no:cacheprovider tests/contracts; scalar=$$?; \
	wait $$avx2; vector=$$?; echo "--- contracts on AVX2 kernels:"; tail -n 40 $(VENV)/contracts-avx2.log; \
	test $$scalar -eq 0 && test $$vector -eq 0
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $(VENV)/site

$(VENV)/.bench-installed: $(VENV)/.dev-installed
	$(BIN)/python -m pip install -q -e ".[dev,report,bench]"
	$(BIN)/python -m pip install -q --no-deps nidl==0.0.2
	touch $@

## Every benchmark, one table of ratios (ours vs peer, ours vs bound); `make bench DEVICE=cuda` on a GPU.
DEVICE ?= cpu
bench: $(VENV)/.bench-installed
	$(BIN)/python benchmarks/run_all.py --device $(DEVICE) $(BENCH_ARGS)

## On a machine with a GPU, in at most 8 minutes, nothing installed (the system Python with CUDA torch):
## the CUDA tests, the contract suite on CUDA, the NCCL contracts (two GPUs), the quick benchmarks, one table.
.PHONY: gpu-check
gpu-check:
	PYTHONPATH=src $(PYTHON) benchmarks/gpu_check.py

clean:
	rm -rf $(VENV) site .mypy_cache .ruff_cache
