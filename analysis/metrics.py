"""The one metric table: every figure rigbench compares across boots, watches or shows, one
`MetricSpec` row each, read by every consumer at the time it runs: the comparison and its
verdicts (analysis.compare), the regression alerts and an adaptive sweep's looks
(functions.regressions, functions.rounds: the `watched` rows), the trend page, the results
table and its CSV (rigbench.cloud), the report and MCP (which show the comparison's rows).

A new metric is one row in `TABLE` plus the code that measures it (a field of the
harness report's cell, a boot's start or its capacity search): nothing else names it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from harness.schemas import metric_value


class Direction(StrEnum):
    """Which way is better for a metric."""

    LOWER_IS_BETTER = "lower_is_better"  # latencies: TTFT, ITL, TPOT, E2E
    HIGHER_IS_BETTER = "higher_is_better"  # throughput: output tokens/s


class Source(StrEnum):
    """Where a boot's value of a metric is read."""

    CELL = "cell"  # a load cell of the boot's report (a results row's `metrics`): `path` into it
    CAPACITY = "capacity"  # the boot's capacity search (report `capacity`), searched by `path`
    START = "start"  # the boot's start (harness.boot_phases.BootTiming): its field `path`


class Compared(StrEnum):
    """Which comparisons hold a metric."""

    ALWAYS = "always"  # every comparison; a report cell without it is an error
    WHERE_RECORDED = "where_recorded"  # where some boot recorded it (an SLO's goodput, NVML)
    ON_REQUEST = "on_request"  # only when a caller names it (`compare(metrics=...)`)


class MetricSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: str  # "ttft_ms.p50", "output_tok_s", "capacity.concurrency", "ready_s"
    label: str
    unit: str
    direction: Direction
    noun: str = ""  # what a verdict calls it ("throughput"); the label when empty
    # How a verdict says a ratio: "2.3x higher TTFT"; or, noun first with its own words, "ready
    # 1.9x later".
    higher: str = "higher"
    lower: str = "lower"
    noun_first: bool = False
    source: Source = Source.CELL
    path: str = ""  # where the value is in its source (dotted for a cell); the key when empty
    compared: Compared = Compared.ON_REQUEST
    # Regression alerts, the trend page and an adaptive sweep's looks test these.
    watched: bool = False
    # `rigbench results`: a column of its table (and of its CSV), or of its CSV alone.
    results: Literal["table", "csv", ""] = ""

    @property
    def name(self) -> str:
        return self.noun or self.label

    @property
    def heading(self) -> str:
        """The metric as a comparison row or a plot names it: "TTFT p50 (ms)"."""
        return f"{self.label} ({self.unit})"

    @property
    def where(self) -> str:
        return self.path or self.key

    def of_cell(self, cell: Mapping[str, Any]) -> float | None:
        """A CELL metric's value in a report cell or a results row's `metrics`; None where it
        is missing or not a finite number."""
        return metric_value(cell, self.where)

    def of_row(self, row: Mapping[str, Any]) -> float | None:
        """Its value on a stored results row: the row's cell, the boot's start (`timing`) or
        its capacity search (`capacity`)."""
        if self.source is Source.START:
            return metric_value(row.get("timing") or {}, self.where)
        if self.source is Source.CELL:
            return self.of_cell(row.get("metrics") or {})
        capacity = row.get("capacity") or {}  # a search by `path`, or none
        return metric_value(capacity, "value") if capacity.get("by") == self.where else None


LATENCY = Direction.LOWER_IS_BETTER
THROUGHPUT = Direction.HIGHER_IS_BETTER
ALWAYS, WHERE_RECORDED = Compared.ALWAYS, Compared.WHERE_RECORDED


def _ms(key: str, label: str, **more: Any) -> MetricSpec:
    return MetricSpec(key=key, label=label, unit="ms", direction=LATENCY, **more)


def _ready(key: str, label: str, noun: str) -> MetricSpec:
    return MetricSpec(
        key=key, label=label, unit="s", direction=LATENCY, noun=noun, higher="later",
        lower="sooner", noun_first=True, source=Source.START, results="csv",
    )  # fmt: skip


# Every comparison holds the medians, and the tails of TTFT, TPOT and E2E beside them: one
# family of verdicts, the same in the terminal table, the report, `rigbench compare` and MCP.
TABLE: tuple[MetricSpec, ...] = (
    _ms("ttft_ms.p50", "TTFT p50", compared=ALWAYS, watched=True, results="table"),
    _ms("ttft_ms.p90", "TTFT p90", compared=ALWAYS),
    _ms("ttft_ms.p99", "TTFT p99", compared=ALWAYS),
    _ms("ttft_ms.mean", "TTFT mean"),
    _ms("itl_ms.p50", "ITL p50", compared=ALWAYS, results="table"),
    _ms("itl_ms.p90", "ITL p90"),
    _ms("itl_ms.p99", "ITL p99"),
    _ms("itl_ms.mean", "ITL mean"),
    _ms("tpot_ms.p50", "TPOT p50", compared=ALWAYS, watched=True, results="table"),
    _ms("tpot_ms.p90", "TPOT p90", compared=ALWAYS),
    _ms("tpot_ms.p99", "TPOT p99", compared=ALWAYS),
    _ms("tpot_ms.mean", "TPOT mean"),
    _ms("e2e_ms.p50", "E2E p50", compared=ALWAYS, results="table"),
    _ms("e2e_ms.p90", "E2E p90", compared=ALWAYS),
    _ms("e2e_ms.p99", "E2E p99", compared=ALWAYS),
    _ms("e2e_ms.mean", "E2E mean"),
    MetricSpec(key="output_tok_s", label="output", unit="tok/s", direction=THROUGHPUT,
               noun="throughput", compared=ALWAYS, watched=True, results="table"),
    # an SLO's requests per second that met it: recorded where the sweep gave an SLO
    MetricSpec(key="goodput_req_s", label="goodput", unit="req/s", direction=THROUGHPUT,
               noun="goodput", compared=WHERE_RECORDED),
    # each boot's capacity search, by concurrency or by rate: the cell `capacity`
    MetricSpec(key="capacity.concurrency", label="capacity", unit="users", direction=THROUGHPUT,
               noun="capacity within the SLO", source=Source.CAPACITY, path="concurrency"),
    MetricSpec(key="capacity.rate", label="capacity", unit="req/s", direction=THROUGHPUT,
               noun="capacity within the SLO", source=Source.CAPACITY, path="rate"),
    # each boot's start: the cell `start-up`
    _ready("ready_s", "time to ready", "ready"),
    _ready("warm_ready_s", "warm restart to ready", "warm ready"),
    # The GPU's mean power is shown, not judged: more watts may buy more tokens.
    MetricSpec(key="gpu.mean_power_w", label="GPU power", unit="W", direction=LATENCY,
               results="csv"),
    MetricSpec(key="gpu.j_per_output_token", label="GPU energy", unit="J/token",
               direction=LATENCY, noun="energy per token", compared=WHERE_RECORDED,
               results="csv"),
    MetricSpec(key="startup_usd", label="start-up cost", unit="$", direction=LATENCY,
               noun="start-up cost", source=Source.START, results="csv"),
)  # fmt: skip
METRICS: dict[str, MetricSpec] = {spec.key: spec for spec in TABLE}


def metric_spec(key: str) -> MetricSpec:
    try:
        return METRICS[key]
    except KeyError:
        raise ValueError(f"unknown metric {key!r}; known metrics: {', '.join(METRICS)}") from None


def heading_of(key: str) -> str:
    """A metric as a table or a plot names it ("TTFT p50 (ms)"); a key the table no longer
    holds (a stored alert or look) as it is."""
    spec = METRICS.get(key)
    return spec.heading if spec is not None else key


def specs(
    *,
    source: Source | None = None,
    compared: Compared | None = None,
    watched: bool | None = None,
    results: tuple[str, ...] = (),
) -> list[MetricSpec]:
    """The table's rows that match every criterion given, in table order, as it is now."""
    return [
        spec
        for spec in METRICS.values()
        if (source is None or spec.source is source)
        and (compared is None or spec.compared is compared)
        and (watched is None or spec.watched is watched)
        and (not results or spec.results in results)
    ]


def default_metrics() -> tuple[str, ...]:
    """What every comparison compares in each load cell."""
    return tuple(s.key for s in specs(source=Source.CELL, compared=Compared.ALWAYS))


def optional_metrics() -> tuple[str, ...]:
    """Figures only some runs record: compared where some boot has them, else left out."""
    return tuple(s.key for s in specs(source=Source.CELL, compared=Compared.WHERE_RECORDED))


def capacity_metric(by: str) -> MetricSpec:
    """The capacity row of a search by concurrency or by rate."""
    found = [s for s in specs(source=Source.CAPACITY) if s.where == by]
    if not found:
        raise ValueError(f"no capacity metric for a search by {by!r}")
    return found[0]


class _WatchedDirections(Mapping[str, Direction]):
    """The watched metrics, each with the direction that is better, read from METRICS at
    each use (so a row added to the table is watched at once)."""

    def __getitem__(self, key: str) -> Direction:
        spec = METRICS.get(key)
        if spec is None or not spec.watched:
            raise KeyError(key)
        return spec.direction

    def __iter__(self) -> Iterator[str]:
        return iter([s.key for s in specs(watched=True)])

    def __len__(self) -> int:
        return len(specs(watched=True))


# What the regression alerts and an adaptive sweep's looks test, per cell and rig pair.
HEADLINE: Mapping[str, Direction] = _WatchedDirections()
