"""A hub model's revision is pinned once per sweep and every boot loads it: local sweeps of two
torch boots of a hub-style model served by a hub on loopback (tests/fake_hub.py), whose main
branch moves as soon as the first boot downloads (a push during the sweep). Rows record what the
rig says it loaded; boots that loaded different commits get no verdicts."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from analysis.stats import Verdict
from rigbench.commands.local import local_stack, run_local
from rigbench.report.comparison import revision_refusal, sweep_comparison
from rigbench.stack.models import ResultsQuery
from rigs.sources import materialize_random
from tests.fake_hub import FakeHub, serve_hub
from tests.local.conftest import FAST, TINY_CELLS

REPO_ID = "rigbench/tiny"
FIRST, SECOND, THIRD = ("1" * 40, "2" * 40, "3" * 40)


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    cache = tmp_path / "cache"
    tiny = materialize_random("tiny", cache_dir=cache)  # a real checkpoint, served as the repo's
    served = FakeHub(REPO_ID, tiny.path, [FIRST, SECOND, THIRD], push=True)
    with serve_hub(served) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)  # the Validate handler here, the rigs' processes
        monkeypatch.setenv("RIGBENCH_CACHE", str(cache))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        yield served


def _sweep(tmp_path: Path, sweep_id: str, **overrides: Any) -> list[tuple[int, str, Any]]:
    """Run two torch boots of the hub model; each row's (boot, served, requested) revision."""
    body = {
        "sweep_id": sweep_id, "rigs": ["torch"], "model": REPO_ID, "boots_per_rig": 2,
        "budget_usd": 1, "cells": TINY_CELLS, **FAST, **overrides,
    }  # fmt: skip
    home = tmp_path / "home"
    console = Console(record=True, width=200)
    # one boot at a time (8 vCPU, one g5g.2xlarge): the second boot starts after the first has
    # downloaded, when main has moved
    code = run_local(body, home=home, console=console, quota_vcpus=8)
    assert code == 0, console.export_text()
    with local_stack(home) as stack:
        rows = stack.results(ResultsQuery(sweep=sweep_id))
    return sorted(
        {
            (int(r.boot), r.provenance["model_revision"], r.provenance["model_revision_requested"])
            for r in rows
        }
    )


@pytest.mark.slow
def test_a_pinned_revision_is_what_every_boot_loads(tmp_path: Path, hub: FakeHub) -> None:
    served = _sweep(tmp_path, "pinned", model_revision=THIRD)
    assert served == [(1, THIRD, THIRD), (2, THIRD, THIRD)]
    assert set(hub.downloads) == {THIRD}
    assert hub.main == SECOND  # main moved meanwhile; nobody followed it


@pytest.mark.slow
def test_an_unpinned_hub_model_is_resolved_once_and_every_boot_loads_that(
    tmp_path: Path, hub: FakeHub
) -> None:
    served = _sweep(tmp_path, "unpinned")
    # Validate asked the hub once for main (FIRST) and pinned it; the first download then moved
    # main to SECOND, which a boot resolving main for itself would have loaded.
    assert served == [(1, FIRST, FIRST), (2, FIRST, FIRST)]
    assert hub.main == SECOND
    assert set(hub.downloads) == {FIRST}


def test_boots_that_served_different_revisions_get_no_verdicts() -> None:
    cell = {
        "concurrency": 1, "requests_ok": 4, "output_tok_s": 100.0,
        **{m: {"mean": 1.0, "p50": 1.0, "p90": 1.0, "p99": 1.0}
           for m in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")},
    }  # fmt: skip
    reports = {
        rig: [{"cells": [{**cell, "output_tok_s": tok_s}]} for tok_s in boots]
        for rig, boots in (("a", (100.0, 104.0)), ("b", (300.0, 309.0)))
    }
    boots = [("a", {"model_revision": FIRST}), ("b", {"model_revision": SECOND})]
    refused = revision_refusal(boots)
    assert refused.startswith("no verdicts: the boots served different model revisions")
    assert f"a served {FIRST}; b served {SECOND}" in refused
    comparison = sweep_comparison(reports, {}, local=True, refused=refused)
    results = [r for c in comparison.cells for m in c.metrics for r in m.results]
    assert all(r.verdict is None for r in results)
    assert comparison.refused == refused
    # One revision (and rigs that do not say, as vLLM's server does not): verdicts as usual.
    same = [("a", {"model_revision": FIRST}), ("b", {"model_revision": FIRST}), ("c", {})]
    assert revision_refusal(same) == ""
    compared = sweep_comparison(reports, {}, local=True, refused=revision_refusal(same))
    throughput = next(m for m in compared.cells[0].metrics if m.metric.key == "output_tok_s")
    assert throughput.results[1].verdict is Verdict.FASTER
