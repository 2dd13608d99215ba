# Two commands do everything: `make demo` and `make test`. Each sets up .venv first if needed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU machines this project runs on take torch 2.13.0 and Triton 3.6.0 (the Triton of the
# GPU image); elsewhere, pick your own, e.g. `make test TORCH=torch`.
TORCH ?= torch==2.13.0
TRITON ?= triton==3.6.0

.PHONY: demo test lint clean

$(BIN)/krung: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH)" "$(TRITON)" -e '.[dev]'
	touch $@

demo: $(BIN)/krung
	$(BIN)/krung run softmax problems/softmax/solutions/triton_rowwise.py

lint: $(BIN)/krung
	$(BIN)/ruff check src tests benchmarks problems

test: lint
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .krung .pytest_cache .ruff_cache
