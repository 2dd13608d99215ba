# Two commands do everything: `make demo` and `make test`. Each sets up .venv first if needed.
# `make test` runs in parallel (pytest-xdist, a process per core) and leaves out the tests marked
# `slow`, which `make test-all` runs; `make test-newest` is the support matrix's other column
# (CI runs all three, .ci/run).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
NEWEST ?= .venv-newest
# The oldest column: the CPU machines this project runs on take torch 2.13.0 and Triton 3.6.0
# (the Triton of the GPU image, whose torch is 2.11); elsewhere, pick your own, e.g.
# `make test TORCH=torch`. The newest column keeps this torch (a CUDA torch is gigabytes) and
# takes the newest of everything else from the index.
TORCH ?= torch==2.13.0
TRITON ?= triton==3.6.0

.PHONY: demo test test-all test-newest lint clean

# Python's default: modules compiled once and cached. A machine that sets this (some CI images
# do) recompiles krung's modules in every judge and worker, and hides what users' machines do.
unexport PYTHONDONTWRITEBYTECODE

$(BIN)/krung: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH)" "$(TRITON)" -e '.[dev]'
	touch $@

# The venv's bin is not on PATH: the last lines say how to call krung from the shell.
demo: $(BIN)/krung
	@$(BIN)/krung run softmax problems/softmax/solutions/triton_rowwise.py; status=$$?; \
	echo; \
	echo "krung is installed in $(VENV). To run it yourself: . $(BIN)/activate"; \
	echo "(then krung --help, krung problems, ...), or call $(CURDIR)/$(BIN)/krung directly."; \
	exit $$status

lint: $(BIN)/krung
	$(BIN)/ruff check src tests benchmarks problems

# A test process per core. Three on two cores saved 3% (536 to 520 s, stop 37) but slows the
# interpreter's calls enough that the CPU check budget shrinks cases further (issue 30's open
# bug: a wrong version passed on a loaded machine).
TEST_PROCESSES ?= $(shell $(PYTHON) -c 'import os; print(len(os.sched_getaffinity(0)))')
PYTEST := -m pytest -n $(TEST_PROCESSES)
# Tests that cannot share the machine with each other name one xdist_group: they run in turn
# (in make test-all). make test has none: an idle process takes tests queued for a busy one.
GROUPED := --dist loadgroup

test: lint
	$(BIN)/python $(PYTEST) --dist worksteal -m "not slow"

# What genuinely takes long: nvcc over torch's headers, whole problem sets and suites, soak runs.
test-all: $(BIN)/krung
	$(BIN)/python $(PYTEST) $(GROUPED) -m slow

$(NEWEST)/bin/krung: pyproject.toml
	$(PYTHON) -m venv $(NEWEST)
	$(NEWEST)/bin/python -m pip install --quiet --upgrade --upgrade-strategy eager \
	    "$(TORCH)" -e '.[dev]'
	$(NEWEST)/bin/python -m pip list 2>/dev/null | grep -iE '^(torch|triton|numpy|typer|click|mcp|ml.dtypes) '
	touch $@

# The newest packages on the tests where a toolchain can break krung on a CPU (marker
# `newest`: the ladder under Triton's interpreter, the interpreter's fixes, the CLI, MCP).
test-newest: $(NEWEST)/bin/krung
	$(NEWEST)/bin/python $(PYTEST) $(GROUPED) -m newest

clean:
	rm -rf $(VENV) $(NEWEST) .krung .pytest_cache .ruff_cache
