# loopbench — the front door.  `make demo` and `make test` work on a fresh machine with
# only Python 3.11 and make: they create .venv and install the project into it first.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint bench reproduce soak clean help

help:
	@echo "make demo       run scenarios/quickstart.yaml over http and ws against the embedded server"
	@echo "make test       run the whole test suite"
	@echo "make lint       ruff + mypy"

# Re-install whenever pyproject.toml changes (the stamp is older than it).
$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found (set PYTHON=...)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/loopbench run scenarios/quickstart.yaml --out results

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check harness reference_server tests
	$(BIN)/ruff format --check harness reference_server tests
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
