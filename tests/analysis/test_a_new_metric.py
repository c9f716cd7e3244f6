"""Adding a metric is one `MetricSpec` row (issue 47): a row registered here, and nothing else
changed, reaches the comparison and its verdict, the terminal table, the report page, MCP's
verdict lines, the regression check, the trend page and `rigbench results`. Without the row,
none of them shows it (so each check can fail)."""

import csv
import io
from typing import Any

import pytest
from rich.console import Console

from analysis.boot_values import values_from_reports
from analysis.compare import Comparison, compare
from analysis.metrics import METRICS, Compared, Direction, MetricSpec
from analysis.stats import Verdict
from functions.regressions import find_regressions
from rigbench.cloud import render_results
from rigbench.mcp.tools import verdict_lines
from rigbench.report.html import render_page
from rigbench.report.sweep import comparison_table
from rigbench.report.terminal import render_text
from rigbench.report.trend import trend_page
from rigbench.stack import ResultRow

# The time a request waited for a concurrency slot: recorded in every cell (CellReport's
# queue_wait_ms), compared nowhere until this row.
KEY = "queue_wait_ms.p50"
ROW = MetricSpec(
    key=KEY,
    label="queue wait p50",
    unit="ms",
    direction=Direction.LOWER_IS_BETTER,
    compared=Compared.ALWAYS,
    watched=True,
    results="table",
)
SPREAD = (1.0, 1.03, 0.97, 1.01)  # four boots a rig, as real boots vary


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> MetricSpec:
    """The table with the new row, for this test only."""
    monkeypatch.setitem(METRICS, KEY, ROW)
    return ROW


def summary(p50: float) -> dict[str, float]:
    return {"mean": p50, "p50": p50, "p90": p50 * 1.2, "p99": p50 * 1.5}


def cell(wait_ms: float) -> dict[str, Any]:
    """A report cell where only the queue wait differs between rigs."""
    return {
        "concurrency": 4, "requests_ok": 16, "requests_failed": 0, "output_tokens": 256,
        "output_tok_s": 40.0, "ttft_ms": summary(50.0), "itl_ms": summary(10.0),
        "tpot_ms": summary(10.0), "e2e_ms": summary(200.0), "queue_wait_ms": summary(wait_ms),
    }  # fmt: skip


def comparison() -> Comparison:
    reports = {
        "fast": [{"cells": [cell(5.0 * f)]} for f in SPREAD],
        "slow": [{"cells": [cell(15.0 * f)]} for f in SPREAD],
    }
    return compare(values_from_reports(reports), baseline="fast")


def row(sweep_id: str, boot: int, wait_ms: float, day: int) -> dict[str, Any]:
    """A results row as functions/store.py writes it."""
    return {
        "sweep_id": sweep_id, "row_key": f"torch#{boot:02d}#c00004", "rig": "torch",
        "boot": boot, "model": "m", "instance_type": "g5g.2xlarge", "cell": "c00004",
        "started_at": f"2026-11-{day:02d}T00:00:{boot:02d}+00:00",
        "provenance": {"boot_plan": {"dtype": "float16"}}, "metrics": cell(wait_ms),
    }  # fmt: skip


def sweeps() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A sweep whose queue wait doubled against the one before; nothing else moved."""
    before = [row("before", b, 5.0 * f, day=1) for b, f in enumerate(SPREAD)]
    now = [row("now", b, 10.0 * f, day=2) for b, f in enumerate(SPREAD)]
    return before, now


def shown_by_every_view() -> dict[str, bool]:
    """Whether each consumer of the table shows the metric."""
    compared = comparison()
    metrics = [m for c in compared.cells for m in c.metrics if m.metric.key == KEY]
    before, now = sweeps()
    check = find_regressions(
        now, {"torch": before + now}, sweep_id="now", started_at=now[0]["started_at"],
        regression_ratio=1.05,
    )  # fmt: skip
    trend = render_page(trend_page(before + now, "torch", "m", None, check.regressions))
    table = io.StringIO()
    rows = [ResultRow.model_validate(r) for r in now]
    Console(file=table, width=300).print(render_results(rows, "table"))
    columns = next(csv.reader(io.StringIO(str(render_results(rows, "csv")))))
    return {
        "comparison": bool(metrics),
        "terminal table": "queue wait p50 (ms)" in render_text(compared, width=300),
        "report page": "queue wait p50 (ms)" in comparison_table(compared),
        "MCP": any("queue wait p50 (ms)" in line for line in verdict_lines(compared)),
        "regression check": any(r.metric == KEY for r in check.regressions),
        "trend page": "queue wait p50 (ms)" in trend,
        "results table": "queue wait p50 ms" in table.getvalue(),
        "results CSV": KEY in columns,
    }


def test_one_row_reaches_every_view_and_check(registered: MetricSpec) -> None:
    shown = shown_by_every_view()
    assert shown == dict.fromkeys(shown, True)
    slow = next(
        r
        for c in comparison().cells
        for m in c.metrics
        if m.metric.key == KEY
        for r in m.results
        if r.rig == "slow"
    )
    assert slow.verdict is Verdict.SLOWER
    assert slow.words == "3.0x higher queue wait p50 (worse)"
    before, now = sweeps()
    check = find_regressions(
        now, {"torch": before + now}, sweep_id="now", started_at=now[0]["started_at"],
        regression_ratio=1.05,
    )  # fmt: skip
    (alert,) = check.regressions  # the only metric that moved
    assert alert.headline.startswith("torch c=4 queue wait p50: 2.00x worse than its history")


def test_without_the_row_no_view_shows_it() -> None:
    assert KEY not in METRICS
    shown = shown_by_every_view()
    assert shown == dict.fromkeys(shown, False)
