"""Shared rig fixtures: one materialised random:tiny checkpoint and one server per rig per test
session (per pytest-xdist worker; the modules that use the JAX rig share one xdist group)."""

from collections.abc import Iterator
from dataclasses import dataclass, field
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


# The JAX rig is asked for 4096 positions and must serve (and advertise) only the 1024 that
# random:tiny has; 4 slots so a few abandoned requests would fill it; 4 decode steps per call.
# Every prompt the tests send fits in 64 tokens but those that fill the context, one at a
# time: prompt buckets 64 and 1024, and only 64 prefills several at once. Each program the
# rig warms up costs CPU at every start (the 4 x 1024 prefill alone ~7 s at -O0).
JAX_BURST = 4
JAX_SETTINGS = (
    "max_model_len=4096",
    "max_slots=4",
    f"steps_per_call={JAX_BURST}",
    "prompt_buckets=64",
    "batched_prefill_max_len=64",
)
# The modules that use this session's JAX rig or serial torch rig share one pytest-xdist work
# unit: one worker starts each server once.
RIG_SERVERS_GROUP = pytest.mark.xdist_group("rig-servers")


@dataclass
class JaxRig:
    base: str
    health_codes: list[int] = field(default_factory=list)  # /health answers while starting


@pytest.fixture(scope="session")
def jax_rig_server(
    tiny: ModelSource, rig_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JaxRig]:
    """The JAX rig serving random:tiny with JAX_SETTINGS, started by `rigbench rig serve`;
    modules that use it are marked RIG_SERVERS_GROUP so one worker starts it once."""
    log = tmp_path_factory.mktemp("jax-rig") / "server.log"
    rig = JaxRig(base="")
    with rig_server(
        "jax", "random:tiny", cache=rig_cache, log=log, timeout_s=600,
        settings=JAX_SETTINGS, health_codes=rig.health_codes,
    ) as base:  # fmt: skip
        rig.base = base
        yield rig


@pytest.fixture(scope="session")
def jax_rig(jax_rig_server: JaxRig) -> str:
    return jax_rig_server.base
