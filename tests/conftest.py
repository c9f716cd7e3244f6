"""Session-wide settings every test shares."""

import gc
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rigs.sources import cache_root
from tests.shared_sweep import SHARED_SWEEP_GROUP, FinishedSweep, run_once

pytest_plugins = ["tests.fast_lane"]

# The rig processes tests start, and the workers' own torch, run with one OpenMP thread, as a
# local instance does (rigbench/local/fleet.py says why). Read when torch first loads.
os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[1]
# Kept between runs and between clones, in the project's cache dir but apart from what the
# user's own runs keep there: random weights (named by their config's digest), the JAX rig's
# compiled programs (rigs/jax/executables.py: keyed by its source, versions and shapes, so
# changed code compiles anew) and the Lambda packages (keyed by a digest of their sources).
TEST_CACHE = Path(os.environ.get("RIGBENCH_TEST_CACHE", cache_root() / "tests"))


def pytest_configure(config: pytest.Config) -> None:
    # The filter functions/observability.py installs when imported: pytest restores the
    # warning filters after collection and after each test, so a handler first imported there
    # would lose it.
    config.addinivalue_line("filterwarnings", "ignore:No application metrics to publish")
    # The emulation's API calls allocate in bursts: at Python's default threshold (700) the
    # collector ran 2,600 times in tests/orchestrator/test_faults.py (3.0 CPU-s of 30); at
    # 50,000, 1,000 times (1.7 CPU-s), for 7% more peak memory.
    gc.set_threshold(50_000, 20, 10)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish() -> None:
    """Once the tests are done, pytest collects garbage twice more (its unraisable-exception
    checks) and the interpreter once more at exit, each time over every object a worker built
    (the emulations', torch's, JAX's), 1-3 s each on two cores. One collection here, with the
    session's fixtures all torn down, finds the garbage they would; what survives it is
    frozen, so they walk only what pytest makes or drops after."""
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def shared_rig_cache() -> Iterator[Path]:
    """One RIGBENCH_CACHE for every test, pytest-xdist worker and rig process they start:
    random weights are materialised once (under a file lock) and the JAX rig's compilation
    cache is warm after its first start."""
    TEST_CACHE.mkdir(parents=True, exist_ok=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RIGBENCH_CACHE", str(TEST_CACHE))
        yield TEST_CACHE


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


# pytest-xdist's work units (`--dist loadgroup`): a module is one unit, so its module-scoped
# fixtures (an emulation, a rig) are built once, unless it is marked into a group spanning
# modules (the shared sweep, the rig servers). Units are handed out longest first, so no worker
# is left with a long one at the end: these are those over 15 s on three workers, slowest first
# (their wall time in a full run: `pytest -n 3 --durations=0`, summed per unit).
LONGEST_FIRST = (
    SHARED_SWEEP_GROUP,
    "rig-servers",
    "tests/mcp/test_stdio.py",
    "tests/test_installed_wheel.py",
    "tests/orchestrator/test_fault_matrix.py",
    "tests/orchestrator/test_template.py",
    "tests/orchestrator/test_faults.py",
    "tests/local/test_local_runs.py",
    "tests/harness/test_quirks.py",
    "tests/mcp/test_server.py",
    "tests/orchestrator/test_rounds.py",
    "tests/orchestrator/test_regressions.py",
    "tests/bake/test_bake.py",
    "tests/rigs/jax/test_engine.py",
    "tests/orchestrator/test_cli.py",
    "tests/orchestrator/test_steps.py",
    "tests/orchestrator/test_sweep.py",
    "tests/mcp/test_http.py",
    "tests/harness/test_edge.py",
)


def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """Stop the run where xdist's groups silently stopped grouping: every module would build
    its fixtures on both workers and one worker would wait out the shared sweep (pytest 9.2
    with pytest-xdist 3.8 loses the group suffix xdist writes into each node id: #1386)."""
    if node.config.option.dist == "loadgroup" and ids and not any("@" in i for i in ids):
        pytest.exit(
            "pytest-xdist's --dist loadgroup did not group the tests (no node id carries its "
            "group: pytest-xdist#1386); install the versions pyproject.toml pins",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    groups: dict[str, str] = {}
    for item in items:
        marker = item.get_closest_marker("xdist_group")
        if marker is None:
            name = item.nodeid.split("::", 1)[0]
            item.add_marker(pytest.mark.xdist_group(name))
        else:
            name = str(marker.args[0])
        groups[item.nodeid] = name
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(groups[item.nodeid], len(rank)))
