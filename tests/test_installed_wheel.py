"""rigbench as a user installs it: the built wheel in a fresh venv, run from an empty folder,
with nothing of the checkout on its path.

The fresh venv takes the versions this test runs with (pip freeze as constraints), from pip's
cache, so the wheel is checked against what the tests checked and nothing is downloaded twice.
"""

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rigbench import version

pytestmark = pytest.mark.slow

CHECKOUT = Path(__file__).resolve().parents[1]
NOT_SOURCES = (".git", ".venv", ".rigbench", ".aws-sam", "build", "*.egg-info", "__pycache__",
               ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis", "tests")  # fmt: skip
SWEEP = {
    "rigs": ["jax"],
    "model": "random:tiny",
    "boots_per_rig": 1,
    "budget_usd": 1,
    "cells": {
        "concurrency": [1],
        "requests_per_cell": 2,
        "prompt_tokens": 8,
        "output_tokens": 4,
        "warmup_requests": 0,
    },
    "deadlines": {"ready_s": 600, "bench_s": 600, "instance_s": 1500},
    "waits": {"agent_poll_s": 1, "ready_poll_s": 1, "command_poll_s": 1},
}


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Path, dict[str, str]]]:
    """A fresh venv holding the wheel built from this checkout, with the torch and jax extras;
    removed afterwards (it is over a gigabyte)."""
    root = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # built from a copy: setuptools writes build/ and egg-info beside the sources
    source = root / "source"
    shutil.copytree(CHECKOUT, source, ignore=shutil.ignore_patterns(*NOT_SOURCES))
    _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(root), str(source)],
        root,
        env,
        600,
    )
    (wheel,) = root.glob("rigbench-*.whl")
    constraints = root / "constraints.txt"
    constraints.write_text(
        _run([sys.executable, "-m", "pip", "freeze", "--exclude-editable"], root, env, 120)
    )
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], root, env, 300)
    _run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile",
         "-c", str(constraints), f"{wheel}[torch,jax]"],
        root,
        env,
        1200,
    )  # fmt: skip
    yield venv, env
    shutil.rmtree(venv, ignore_errors=True)


def test_the_installed_wheel_runs_a_local_sweep_from_an_empty_folder(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    venv, env = installed
    rigbench = str(venv / "bin" / "rigbench")
    empty = tmp_path / "elsewhere"
    empty.mkdir()

    assert _run([rigbench, "--version"], empty, env, 120) == f"rigbench {version()}\n"
    located = _run(
        [str(venv / "bin" / "python"), "-c", "import rigbench; print(rigbench.__file__)"],
        empty,
        env,
        60,
    )
    assert Path(located.strip()).is_relative_to(venv), located

    (empty / "sweep.json").write_text(json.dumps(SWEEP))
    out = _run([rigbench, "run", "--local", "sweep.json"], empty, env, 1500)
    assert "succeeded" in out, out
    (report,) = (empty / ".rigbench").glob("report-local-*.html")
    assert "jax" in report.read_text()
