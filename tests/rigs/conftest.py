"""Shared rig fixtures: one materialised random:tiny checkpoint per test session."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from rigs.sources import ModelSource, resolve_model
from tests.rigs.rig_process import rig_server


@pytest.fixture(scope="session")
def rig_cache(shared_rig_cache: Path) -> Path:
    """The run's cache dir (tests/conftest.py), handed to server subprocesses too."""
    return shared_rig_cache


@pytest.fixture(scope="session")
def tiny(rig_cache: Path) -> ModelSource:
    return resolve_model("random:tiny", cache_dir=rig_cache)


@pytest.fixture(scope="session")
def torch_rig(
    tiny: ModelSource, rig_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The torch rig serving random:tiny, started by `rigbench rig serve` as on an instance,
    one request at a time (`batching=serial`; the rig's default, continuous, has its own
    fixture below)."""
    log = tmp_path_factory.mktemp("torch-rig") / "server.log"
    with rig_server(
        "torch", "random:tiny", cache=rig_cache, log=log, settings=("batching=serial",)
    ) as base:
        yield base
