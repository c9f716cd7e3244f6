"""The comparison `compare` builds from results rows: rows regrouped into per-boot reports,
verdicts from the comparison's test, in the table's words (two rigs, three boots each; one)."""

from typing import Any

from rigbench.mcp.tools import SweepTools, reports_from_rows, verdict_lines
from rigbench.stack import ResultRow


def cell(concurrency: int, ttft_ms: float, tok_s: float) -> dict[str, Any]:
    stat = {"p50": ttft_ms, "p90": ttft_ms, "p99": ttft_ms, "mean": ttft_ms}
    return {
        "concurrency": concurrency, "requests_ok": 4, "requests_failed": 0,
        "ttft_ms": stat, "itl_ms": stat, "tpot_ms": stat, "e2e_ms": stat,
        "output_tok_s": tok_s,
    }  # fmt: skip


def row(rig: str, boot: int, metrics: dict[str, Any]) -> ResultRow:
    return ResultRow(
        sweep_id="s", row_key=f"{rig}#{boot}#{metrics['concurrency']}", rig=rig, boot=boot,
        model="random:tiny", instance_type="g5g.2xlarge", cell=f"c{metrics['concurrency']:05d}",
        started_at="2026-12-02T00:00:00+00:00", metrics=metrics,
    )  # fmt: skip


ROWS = [
    # fast: 10 ms, 100 tok/s; slow: 50 ms, 20 tok/s, boot by boot, one cell each.
    *(row("fast", b, cell(1, 10.0 + b, 100.0 - b)) for b in (3, 1, 2)),
    *(row("slow", b, cell(1, 50.0 + b, 20.0 + b)) for b in (1, 2, 3)),
]


def test_rows_regroup_into_reports_in_boot_order() -> None:
    reports = reports_from_rows(ROWS)
    assert list(reports) == ["fast", "slow"]
    assert [r["cells"][0]["ttft_ms"]["p50"] for r in reports["fast"]] == [11.0, 12.0, 13.0]


class NoStack:
    """Only results() is called by compare; every other call would fail the test."""

    kind = "test"

    def results(self, query: Any) -> list[ResultRow]:
        assert query.sweep == "s"
        return ROWS


def test_compare_gives_verdicts_in_the_tables_words() -> None:
    tools = SweepTools(NoStack(), ceiling_usd=1.0)  # type: ignore[arg-type]
    found = tools.compare("s", baseline="slow", detail=True)
    assert found.comparison is not None
    assert found.baseline == found.comparison.baseline == "slow"
    assert found.flipped is False
    # Geometric means of boots: TTFT 12.0 vs 52.0 ms, output 98.0 vs 22.0 tok/s.
    assert "c=1 TTFT p50 (ms): fast against slow: 4.3x lower TTFT p50 (better)" in found.verdicts
    assert "c=1 output (tok/s): fast against slow: 4.5x higher throughput (better)" in (
        found.verdicts
    )
    assert len(found.verdicts) == 11  # TTFT, TPOT, E2E at p50/p90/p99; ITL p50; output
    assert verdict_lines(found.comparison) == found.verdicts
    assert found.summary == [
        "fast vs slow: fast better in 11, slow better in 0, no difference shown in 0 of 11 "
        "comparisons"
    ]
    assert found.comparison.emulated == ""  # not the local stack


class OneBoot(NoStack):
    kind = "local"

    def results(self, query: Any) -> list[ResultRow]:
        return [r for r in ROWS if r.boot == 1]


def test_one_boot_is_no_verdict_never_indistinguishable_nor_ranked() -> None:
    found = SweepTools(OneBoot(), ceiling_usd=1.0).compare("s", baseline="slow", detail=True)  # type: ignore[arg-type]
    text = found.model_dump_json()
    assert "indistinguishable" not in text
    # Boot 1: fast 11 ms against slow 51 ms.
    assert (
        "c=1 TTFT p50 (ms): fast against slow: 4.6x lower TTFT p50 (1 boot: no verdict possible)"
        in found.verdicts
    )
    rankings = {m.ranking for c in found.comparison.cells for m in c.metrics}
    assert rankings == {"no ranking: fast, slow have 1 boot"}
    assert found.summary == ["fast vs slow: no verdict possible in any of 11 comparisons"]
    assert found.comparison.emulated.startswith("local emulation on this machine's CPU")


def test_compare_opens_with_the_workload_and_each_rigs_capacity() -> None:
    slo = {"ttft_ms": 500.0, "percentile": 90.0}

    def with_capacity(found: ResultRow, value: int) -> ResultRow:
        capacity = {
            "by": "concurrency", "value": value, "max": 8, "stopped": "bracketed", "slo": slo,
            "probes": [], "output_tok_s": 10.0 * value,
        }  # fmt: skip
        workload = {"kind": "random", "endpoint": "chat", "words": "random prompts of 8 tokens"}
        return found.model_copy(update={"capacity": capacity, "workload": workload})

    rows = [with_capacity(r, 4 if r.rig == "fast" else 2) for r in ROWS]

    class Stack(NoStack):
        def results(self, query: Any) -> list[ResultRow]:
            return rows

    reports = reports_from_rows(rows)
    assert [r["capacity"]["value"] for r in reports["fast"]] == [4, 4, 4]
    found = SweepTools(Stack(), ceiling_usd=1.0).compare("s", baseline=None)  # type: ignore[arg-type]
    assert found.workload == "random prompts of 8 tokens, chat endpoint"
    assert found.capacity == [
        "fast: 4 users at once within the SLO (TTFT <= 500 ms, for 90% of requests; 3 equal "
        "boots); 40 output tok/s there",
        "slow: 2 users at once within the SLO (TTFT <= 500 ms, for 90% of requests; 3 equal "
        "boots); 20 output tok/s there",
    ]
