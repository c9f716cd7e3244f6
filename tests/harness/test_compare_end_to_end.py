"""The comparison of reports the real harness measured over loopback (analysis.compare on
harness reports): the measured difference is the verdict."""

import asyncio
from typing import Any

import pytest

from analysis.boot_values import values_from_reports
from analysis.compare import Comparison, compare
from analysis.stats import Verdict
from harness.runner import run_benchmark
from harness.schemas import BenchmarkConfig
from tests.harness.conftest import StartServer


def _by_key(comparison: Comparison, cell: str, metric: str) -> Any:
    cells = {c.cell: c for c in comparison.cells}
    return {m.metric.key: m for m in cells[cell].metrics}[metric]


END_TO_END_BOOTS = 4


@pytest.mark.slow
def test_end_to_end_from_harness_reports(reference_server: StartServer) -> None:
    # Two "rigs" that differ only in decode speed (ITL 5 ms vs 15 ms), four boots each, measured
    # by the real harness over loopback: the comparison must call the fast one faster on every
    # decode-bound metric. TTFT is the same schedule on both, so it is not asserted. Four boots:
    # at two, Welch's test can fall to ~1 degree of freedom when one rig's boots happen to agree,
    # and no 3x is decidable there under Holm over the comparison's 11 metrics.
    urls = {
        "fast": reference_server("--ttft-ms", "20", "--itl-ms", "5"),
        "slow": reference_server("--ttft-ms", "20", "--itl-ms", "15"),
    }
    reports: dict[str, list[dict[str, Any]]] = {rig: [] for rig in urls}
    for _boot in range(END_TO_END_BOOTS):
        for rig, url in urls.items():
            config = BenchmarkConfig(
                url=url,
                model="reference",
                concurrency=[2],
                input_len=16,
                output_len=16,
                requests=8,
                warmup=1,
            )
            reports[rig].append(asyncio.run(run_benchmark(config)).model_dump(mode="json"))
    comparison = compare(values_from_reports(reports), baseline="slow")
    assert [c.cell for c in comparison.cells] == ["c=2"]
    for key in ("itl_ms.p50", "tpot_ms.p50", "e2e_ms.p50", "output_tok_s"):
        fast = _by_key(comparison, "c=2", key).results[0]
        assert fast.rig == "fast"
        assert fast.aggregate.n_boots == END_TO_END_BOOTS
        assert fast.verdict is Verdict.FASTER, key
    itl = _by_key(comparison, "c=2", "itl_ms.p50").results
    assert itl[0].aggregate.value == pytest.approx(5.0, abs=1.0)
    assert itl[1].aggregate.value == pytest.approx(15.0, abs=1.0)
