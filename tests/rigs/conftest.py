"""Shared rig fixtures: one materialised random:tiny checkpoint per test session."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from rigs.sources import ModelSource, resolve_model


@pytest.fixture(scope="session")
def rig_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A cache dir for the session, also handed to server subprocesses via RIGBENCH_CACHE."""
    path = tmp_path_factory.mktemp("rigbench-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RIGBENCH_CACHE", str(path))
        yield path


@pytest.fixture(scope="session")
def tiny(rig_cache: Path) -> ModelSource:
    return resolve_model("random:tiny", cache_dir=rig_cache)
