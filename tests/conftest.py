"""Session-wide settings every test shares."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def shared_rig_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One RIGBENCH_CACHE for the whole run, shared by pytest-xdist's workers (their base
    temporary folders share a parent) and every rig process they start: random weights are
    materialised once and the JAX rig's persistent compilation cache is warm after its first
    start. Never the user's own ~/.cache/rigbench."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    path = root / "rigbench-cache"
    path.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RIGBENCH_CACHE", str(path))
        yield path
