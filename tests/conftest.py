"""Session-wide settings every test shares."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.shared_sweep import FinishedSweep, run_once


@pytest.fixture(scope="session", autouse=True)
def shared_rig_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One RIGBENCH_CACHE for the whole run, shared by pytest-xdist's workers (their base
    temporary folders share a parent) and every rig process they start: random weights are
    materialised once and the JAX rig's persistent compilation cache is warm after its first
    start. Never the user's own ~/.cache/rigbench."""
    path = run_root(tmp_path_factory) / "rigbench-cache"
    path.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RIGBENCH_CACHE", str(path))
        yield path


def run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder shared by every pytest-xdist worker of this run (their base temporary folders
    share a parent)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def finished_sweep(
    tmp_path_factory: pytest.TempPathFactory, shared_rig_cache: Path
) -> FinishedSweep:
    """The run's one real local sweep (tests/shared_sweep.py), finished; read it, or copy it
    (`FinishedSweep.copy_to`) before writing into it."""
    root = run_root(tmp_path_factory) / "shared-sweep"
    root.mkdir(exist_ok=True)
    return run_once(root)
