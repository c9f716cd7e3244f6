# Two entry points: `make sweep` (the main job) and `make test` (every check CI runs).
# `make check` is the developers' fast lane: lint and the tests not marked slow.
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: install sweep test check lint

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q 'torch==2.13.0'
	$(BIN)/python -m pip install -q -e '.[torch,jax,dev]'
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

sweep: $(STAMP)
	$(BIN)/rigbench demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Tests run on two workers (pytest-xdist); each module stays on one worker (--dist loadfile)
# so a module's emulation is deployed once.
PYTEST_WORKERS ?= 2

test: lint
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile

check: lint
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile -m "not slow" -q
