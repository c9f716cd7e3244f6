"""Shared rig fixtures: one materialised random:tiny checkpoint per test session."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from rigs.sources import ModelSource, resolve_model
from tests.rigs.rig_process import rig_server


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


@pytest.fixture(scope="session")
def torch_rig(
    tiny: ModelSource, rig_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The torch rig serving random:tiny, started by `rigbench rig serve` as on an instance."""
    log = tmp_path_factory.mktemp("torch-rig") / "server.log"
    with rig_server("torch", "random:tiny", cache=rig_cache, log=log) as base:
        yield base
