# Two entry points: `make sweep` (the main job) and `make test` (every check CI runs).
# `make check` is the developers' fast lane: lint and the tests that start no process or server
# (the others are marked slow; tests/fast_lane.py fails one that is not).
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

.PHONY: install sweep test check lint

# The report test opens a real sweep report in Debian's headless Chromium (tests/report).
CHROMIUM := /usr/bin/chromium

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

# mypy's cache checks each file's hash, so every clone shares one, in the project's cache dir.
MYPY_CACHE ?= $(or $(RIGBENCH_CACHE),$(HOME)/.cache/rigbench)/mypy

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --cache-dir $(MYPY_CACHE)

$(CHROMIUM):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium

# Tests run on three workers (pytest-xdist), one more than this machine's two cores: a third of
# a worker's time is spent waiting on a server, a subprocess or a retry, and the third worker
# fills those waits (pytest 522 s on two workers, 476 s on three). A module, or a group of
# modules sharing one server or sweep, stays on one worker (tests/conftest.py), so their
# fixtures are built once; units are handed out in the conftest's longest-first order, not
# re-sorted by test count. `make check`'s tests wait on nothing: one worker per core.
PYTEST_WORKERS ?= 3
CHECK_WORKERS ?= 2
XDIST := --dist loadgroup --no-loadscope-reorder

# A run starts many Python processes (workers, rigs, CLIs): each reads the project's modules
# compiled once into __pycache__ (git ignores it) rather than compiling them again, which an
# environment's PYTHONDONTWRITEBYTECODE would make them do.
test check: export PYTHONDONTWRITEBYTECODE =

test: lint $(CHROMIUM)
	$(BIN)/pytest -n $(PYTEST_WORKERS) $(XDIST)

check: lint
	$(BIN)/pytest -n $(CHECK_WORKERS) $(XDIST) -m "not slow" -q
