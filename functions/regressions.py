"""Regression alerts: is a rig now worse than its own recent history?

Each rig of a finished sweep is compared, per load cell and headline metric (the metric
table's `watched` rows, analysis.metrics: `HEADLINE`), with the boots
of the same rig, model and instance type (the results table's `by_config` index) served with
the same setup (dtype, serve settings, forced output length) in the last `HISTORY_SWEEPS`
earlier sweeps within `HISTORY_DAYS`. A boot contributes one value per metric: its median
(TTFT p50, TPOT p50) or its throughput, as the verdicts use them.

The test is the verdicts' (`analysis.stats`): Welch's t-test on the logs of the boot values,
here against a shifted null. "Worse by more than `regression_ratio`" is what is tested, not
"different": the current boots are moved by the ratio toward better before the test (a
latency divided by 1.05, a throughput multiplied by it), so a rig exactly 5% worse sits on
the null and a significant "slower" means worse beyond 5%. Holm's correction runs over every
comparison the sweep tested (rigs x cells x metrics), so a sweep of rigs that are at most
`regression_ratio` worse raises any alert at most 5% of the time (two-sided Holm; an alert is
one direction of it, so at most 2.5% in the calibrated setting of the verdicts).
"""

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict

from analysis.metrics import HEADLINE, METRICS, Direction, metric_spec
from analysis.stats import (
    ALPHA,
    Difference,
    Verdict,
    aggregate_boots,
    decide,
    difference,
    holm,
)
from harness.schemas import cell_label

HISTORY_SWEEPS = 5
HISTORY_DAYS = 90
METHOD = (
    "Welch's t-test on log boot values (per boot its median, or its throughput) against the "
    "null 'worse by at most the ratio', Holm-corrected over every comparison of the sweep at "
    f"a family-wise {ALPHA:.0%}"
)


class Regression(BaseModel):
    """One rig, cell and metric significantly worse than its history by more than `threshold`."""

    model_config = ConfigDict(frozen=True)

    sweep_id: str
    sweep_started_at: str
    rig: str
    model: str
    instance_type: str
    cell: str  # the row's cell key (c00004)
    cell_label: str  # c=4
    metric: str
    direction: Direction
    now: float  # geometric mean of this sweep's boots
    history: float  # geometric mean of the history's boots
    worse_by: float  # the factor it is worse by (> threshold): now/history for a latency
    threshold: float
    p_value: float
    p_holm: float
    n_now: int
    n_history: int
    history_sweeps: list[str]
    family: int  # comparisons Holm corrected over
    report: str = ""  # where the sweep's report is

    @property
    def basis(self) -> str:
        """What the claim rests on, in words."""
        return (
            f"{self.n_now} boots now vs {self.n_history} boots in {len(self.history_sweeps)} "
            f"earlier sweep(s); Welch's t-test on log boot values against 'at most "
            f"{self.threshold:g}x worse', p={self.p_value:.2g}, Holm-adjusted over "
            f"{self.family} comparisons p={self.p_holm:.2g} (< {ALPHA:g})"
        )

    @property
    def headline(self) -> str:
        spec = METRICS.get(self.metric)  # an alert stored before its metric left the table
        what = spec.name if spec is not None else self.metric
        return (
            f"{self.rig} {self.cell_label} {what}: {self.worse_by:.2f}x worse than its history "
            f"({self.now:.4g} now vs {self.history:.4g})"
        )


class RegressionCheck(BaseModel):
    """What the check of one sweep found, and what it could not test and why."""

    regression_ratio: float
    family: int = 0
    regressions: list[Regression] = []
    untested: dict[str, int] = {}  # reason -> comparisons
    method: str = METHOD


def setup_of(row: dict[str, Any]) -> str:
    """What must match for a row to be history of another: its cell, how the boot served and
    what the requests asked for (rows written before they carried their workload match each
    other only: their prompt length is not on them, so a changed one shows as a change)."""
    plan = (row.get("provenance") or {}).get("boot_plan") or {}
    cell = row.get("metrics") or {}
    ok = int(cell.get("requests_ok") or 0)
    per_request = round(float(cell.get("output_tokens") or 0) / ok) if ok else None
    return json.dumps(
        {
            "cell": row.get("cell"),
            "dtype": plan.get("dtype"),
            "settings": plan.get("settings") or {},
            "output_tokens_per_request": per_request,
            "workload": {k: v for k, v in (row.get("workload") or {}).items() if k != "words"},
        },
        sort_keys=True,
    )


def _value(row: dict[str, Any], metric: str) -> float | None:
    cell = row.get("metrics") or {}
    if (cell.get("requests_ok") or 0) <= 0:
        return None
    value = metric_spec(metric).of_row(row)
    return value if value is not None and value > 0 else None


def recent_history(
    rows: Iterable[dict[str, Any]], sweep_id: str, setup: str, before: str
) -> list[dict[str, Any]]:
    """The rows of the last HISTORY_SWEEPS earlier sweeps (started before `before`) with this
    setup."""
    by_sweep: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["sweep_id"] != sweep_id and row["started_at"] <= before and setup_of(row) == setup:
            by_sweep[row["sweep_id"]].append(row)
    latest = sorted(by_sweep, key=lambda s: max(r["started_at"] for r in by_sweep[s]))
    return [r for s in latest[-HISTORY_SWEEPS:] for r in by_sweep[s]]


@dataclass(frozen=True)
class _Tested:
    row: dict[str, Any]  # one of the sweep's rows of this rig and setup
    metric: str
    found: Difference
    now: list[float]
    then: list[float]
    sweeps: list[str]


def _test(
    rows: list[dict[str, Any]], past: list[dict[str, Any]], metric: str, ratio: float
) -> _Tested | str:
    """The shifted test of one metric, or why there is none."""
    now = [v for v in (_value(r, metric) for r in rows) if v is not None]
    then = [v for v in (_value(r, metric) for r in past) if v is not None]
    if not then:
        return "no earlier sweep of the same rig, model, instance type and setup"
    if not now:
        return "no measured value in this sweep"
    # Moved toward better by the ratio: the null is "worse by at most the ratio".
    shift = ratio if HEADLINE[metric] is Direction.HIGHER_IS_BETTER else 1 / ratio
    found = difference([v * shift for v in now], then)
    if found.p_value is None:
        return f"no test possible: {found.reason}"
    sweeps = sorted({r["sweep_id"] for r in past})
    return _Tested(row=rows[0], metric=metric, found=found, now=now, then=then, sweeps=sweeps)


def _regression(
    tested: _Tested, p_holm: float, family: int, sweep_id: str, started_at: str, ratio: float
) -> Regression:
    direction = HEADLINE[tested.metric]
    now, then = aggregate_boots(tested.now).value, aggregate_boots(tested.then).value
    row = tested.row
    return Regression(
        sweep_id=sweep_id,
        sweep_started_at=started_at,
        rig=row["rig"],
        model=row["model"],
        instance_type=row["instance_type"],
        cell=row["cell"],
        cell_label=cell_label(row.get("metrics") or {}),
        metric=tested.metric,
        direction=direction,
        now=now,
        history=then,
        worse_by=then / now if direction is Direction.HIGHER_IS_BETTER else now / then,
        threshold=ratio,
        p_value=float(tested.found.p_value or 0.0),
        p_holm=p_holm,
        n_now=len(tested.now),
        n_history=len(tested.then),
        history_sweeps=tested.sweeps,
        family=family,
    )


def find_regressions(
    now_rows: list[dict[str, Any]],
    history_rows: dict[str, list[dict[str, Any]]],
    *,
    sweep_id: str,
    started_at: str,
    regression_ratio: float,
    alpha: float = ALPHA,
) -> RegressionCheck:
    """`now_rows`: the sweep's rows; `history_rows[rig]`: that rig's rows of the same model
    and instance type (any sweeps: this one and those of other setups are left out here)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in now_rows:
        groups[(row["rig"], setup_of(row))].append(row)
    tested: list[_Tested] = []
    untested: dict[str, int] = defaultdict(int)
    for (rig, setup), rows in sorted(groups.items()):
        before = min(r["started_at"] for r in rows)
        past = recent_history(history_rows.get(rig, []), sweep_id, setup, before)
        for metric in HEADLINE:
            outcome = _test(rows, past, metric, regression_ratio)
            if isinstance(outcome, str):
                untested[outcome] += 1
            else:
                tested.append(outcome)
    adjusted = holm([t.found.p_value or 1.0 for t in tested])
    regressions = [
        _regression(t, p_holm, len(tested), sweep_id, started_at, regression_ratio)
        for t, p_holm in zip(tested, adjusted, strict=True)
        if decide(t.found, HEADLINE[t.metric], p_holm < alpha) is Verdict.SLOWER
    ]
    return RegressionCheck(
        regression_ratio=regression_ratio,
        family=len(tested),
        regressions=regressions,
        untested=dict(untested),
    )


def history_since(started_at: str) -> datetime:
    """Where a sweep's history starts: HISTORY_DAYS before it."""
    return datetime.fromisoformat(started_at.replace("Z", "+00:00")) - timedelta(days=HISTORY_DAYS)
