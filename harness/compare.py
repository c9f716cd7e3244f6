"""Compare rigs across boots: medians, confidence intervals and verdicts, as a model and a table.

Input is plain: `values[rig][cell][metric]` is the list of that metric's per-boot values (index =
boot; None where the boot produced no value). `values_from_reports` builds it from run reports
(the `rigbench bench` JSON contract), `compare` turns it into a `Comparison`, and `render`
shows that as a rich table.
"""

from __future__ import annotations

import io
import itertools
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from pydantic import BaseModel, ConfigDict
from rich.console import Console
from rich.table import Table
from rich.text import Text

from harness.stats import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    BootAggregate,
    Direction,
    RankingFlips,
    Verdict,
    aggregate_boots,
    ranking_flips,
    verdict_from_aggregates,
)

BootValues = Mapping[str, Mapping[str, Mapping[str, Sequence[float | None]]]]


class MetricSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: str  # path into a report cell: "ttft_ms.p50" or "output_tok_s"
    label: str
    unit: str
    direction: Direction
    noun: str = ""  # what a verdict calls it ("throughput"); the label when empty

    @property
    def name(self) -> str:
        return self.noun or self.label


def _metric_table() -> dict[str, MetricSpec]:
    specs: dict[str, MetricSpec] = {}
    for field, name in (
        ("ttft_ms", "TTFT"),
        ("itl_ms", "ITL"),
        ("tpot_ms", "TPOT"),
        ("e2e_ms", "E2E"),
    ):
        for stat in ("p50", "p90", "p99", "mean"):
            key = f"{field}.{stat}"
            specs[key] = MetricSpec(
                key=key, label=f"{name} {stat}", unit="ms", direction=Direction.LOWER_IS_BETTER
            )
    specs["output_tok_s"] = MetricSpec(
        key="output_tok_s",
        label="output",
        unit="tok/s",
        direction=Direction.HIGHER_IS_BETTER,
        noun="throughput",
    )
    return specs


METRICS: dict[str, MetricSpec] = _metric_table()
DEFAULT_METRICS: tuple[str, ...] = (
    "ttft_ms.p50",
    "itl_ms.p50",
    "tpot_ms.p50",
    "e2e_ms.p50",
    "output_tok_s",
)


def metric_spec(key: str) -> MetricSpec:
    try:
        return METRICS[key]
    except KeyError:
        raise ValueError(f"unknown metric {key!r}; known metrics: {', '.join(METRICS)}") from None


class RigResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    rig: str
    boots: list[float | None]  # the per-boot values the aggregate was built from
    aggregate: BootAggregate | None  # None: no boot produced a value
    verdict: Verdict | None  # against the baseline; None for the baseline or without data
    change_vs_baseline: float | None  # (median - baseline median) / baseline median
    words: str = ""  # the verdict as people read it: "2.3x higher throughput (better)"


class MetricComparison(BaseModel):
    model_config = ConfigDict(frozen=True)

    metric: MetricSpec
    results: list[RigResult]
    flips: RankingFlips | None  # None when fewer than two rigs have data
    ranking: str = ""  # best first: "jax > torch" (intervals apart), "jax ≈ torch" (overlap)
    flip_words: str = ""  # "order flipped between boots: jax/torch (boots 1,2)"
    withheld: str = ""  # why this metric gets no verdicts in this cell (burst delivery)


class CellComparison(BaseModel):
    model_config = ConfigDict(frozen=True)

    cell: str
    metrics: list[MetricComparison]
    burst_rigs: list[str] = []  # rigs that delivered tokens in bursts in this cell


class Comparison(BaseModel):
    model_config = ConfigDict(frozen=True)

    baseline: str
    rigs: list[str]
    confidence: float
    seed: int
    n_resamples: int
    cells: list[CellComparison]

    @property
    def any_flip(self) -> bool:
        return any(m.flips is not None and m.flips.flipped for c in self.cells for m in c.metrics)


def cell_label(cell: Mapping[str, Any]) -> str:
    """`c=4` for a fixed-concurrency cell, `rate=2.5/s` for a Poisson-rate cell."""
    if cell.get("concurrency") is not None:
        return f"c={cell['concurrency']}"
    if cell.get("rate") is not None:
        return f"rate={cell['rate']}/s"
    raise ValueError(f"report cell has neither 'concurrency' nor 'rate': keys {sorted(cell)}")


def _read_metric(cell: Mapping[str, Any], key: str) -> float | None:
    node: Any = cell
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise ValueError(f"report cell {cell_label(cell)} has no {key!r}")
        node = node[part]
    if node is None:
        return None
    if isinstance(node, bool) or not isinstance(node, int | float):
        raise ValueError(f"report cell {cell_label(cell)}: {key!r} is not a number: {node!r}")
    return float(node)


def values_from_reports(
    reports: Mapping[str, Sequence[Mapping[str, Any]]],
    metrics: Sequence[str] = DEFAULT_METRICS,
) -> dict[str, dict[str, dict[str, list[float | None]]]]:
    """`reports[rig]` lists that rig's run reports (parsed JSON), one per boot, in boot order.

    A cell with no successful request (`requests_ok` 0) contributes None for its boot, and so
    does a cell that a boot's report lacks.
    """
    for key in metrics:
        metric_spec(key)
    values: dict[str, dict[str, dict[str, list[float | None]]]] = {}
    for rig, boot_reports in reports.items():
        by_cell: dict[str, dict[str, list[float | None]]] = {}
        for boot, report in enumerate(boot_reports):
            if "cells" not in report:
                raise ValueError(f"rig {rig!r} boot {boot}: report has no 'cells'")
            for cell in report["cells"]:
                row = by_cell.setdefault(cell_label(cell), {key: [] for key in metrics})
                ok = cell.get("requests_ok", 1) > 0
                for key in metrics:
                    series = row[key]
                    series.extend([None] * (boot - len(series)))  # boots lacking this cell
                    series.append(_read_metric(cell, key) if ok else None)
        for row in by_cell.values():
            for series in row.values():
                series.extend([None] * (len(boot_reports) - len(series)))
        values[rig] = by_cell
    return values


# A rig that sends several tokens in quick succession and then pauses (a JAX engine stepping
# many tokens per host round trip) shows an ITL p50 near zero while its TPOT is not: its ITL
# measures the socket, not the decode, and only TPOT compares it fairly with other rigs.
BURST_ITL_TO_TPOT = 0.1


def delivers_in_bursts(itl_p50_ms: float | None, tpot_p50_ms: float | None) -> bool:
    """Whether a cell's tokens came in bursts, judged from its ITL and TPOT medians.

    Judged from the medians because results rows and reports written before the harness
    recorded its per-cell `delivery` flag do not carry it.
    """
    if itl_p50_ms is None or tpot_p50_ms is None or tpot_p50_ms <= 0:
        return False
    return itl_p50_ms < BURST_ITL_TO_TPOT * tpot_p50_ms


def ratio_words(ratio: float, noun: str) -> str:
    """A ratio of medians as people say it: "2.3x higher TTFT", "41% lower throughput",
    "6.9x lower throughput" (a ratio of 0.144: "86% lower" would hide how far apart)."""
    if not math.isfinite(ratio) or ratio < 0:
        raise ValueError(f"ratio must be a finite number >= 0, got {ratio!r}")
    if ratio >= 2:
        return f"{ratio:.1f}x higher {noun}" if ratio < 10 else f"{ratio:.0f}x higher {noun}"
    if ratio > 1:
        return f"{ratio - 1:.0%} higher {noun}"
    if ratio == 0:
        return f"no {noun}"
    if ratio <= 0.5:
        return ratio_words(1 / ratio, noun).replace("higher", "lower")
    if ratio < 1:
        return f"{1 - ratio:.0%} lower {noun}"
    return f"same {noun}"


def verdict_words(
    agg: BootAggregate | None, base: BootAggregate | None, judged: Verdict | None, noun: str
) -> str:
    """A rig's result against the baseline's, in the words the table and the report share."""
    if agg is None:
        return "no data"
    if base is None:
        return "baseline has no data"
    if judged is None:
        return ""
    if base.value == 0:
        return f"baseline {noun} is 0: no ratio"
    words = ratio_words(agg.value / base.value, noun)
    if judged is Verdict.FASTER:
        return f"{words} (better)"
    if judged is Verdict.SLOWER:
        return f"{words} (worse)"
    if not (agg.has_interval and base.has_interval):
        return f"{words} (one boot: no verdict)"
    return f"{words} (within noise)"


def _ranking(aggregates: Mapping[str, BootAggregate | None], direction: Direction) -> str:
    """Rigs best first; ">" where the intervals separate, "≈" where they overlap."""
    present = [(rig, agg) for rig, agg in aggregates.items() if agg is not None]
    if len(present) < 2:
        return ""
    sign = 1.0 if direction is Direction.LOWER_IS_BETTER else -1.0
    present.sort(key=lambda item: sign * item[1].value)
    text = present[0][0]
    for (_, ahead), (rig, agg) in itertools.pairwise(present):
        apart = verdict_from_aggregates(ahead, agg, direction) is Verdict.FASTER
        text += f" {'>' if apart else '≈'} {rig}"
    return text


def _flip_words(flips: RankingFlips | None) -> str:
    if flips is None or not flips.flipped:
        return ""
    pairs = ", ".join(f"{p.rig_a}/{p.rig_b}" for p in flips.pairs)
    boots = ",".join(str(b + 1) for b in flips.boots)
    return f"order flipped between boots: {pairs} (boots {boots})"


def _median_of(series: Sequence[float | None]) -> float | None:
    present = [v for v in series if v is not None]
    return float(np.median(present)) if present else None


def burst_rigs(values: BootValues, cell: str) -> dict[str, tuple[float, float]]:
    """Rigs whose tokens came in bursts in `cell`, with their (ITL p50, TPOT p50) medians."""
    found: dict[str, tuple[float, float]] = {}
    for rig, by_cell in values.items():
        row = by_cell.get(cell, {})
        itl = _median_of(row.get("itl_ms.p50", []))
        tpot = _median_of(row.get("tpot_ms.p50", []))
        if itl is not None and tpot is not None and delivers_in_bursts(itl, tpot):
            found[rig] = (itl, tpot)
    return found


def _withheld(spec: MetricSpec, bursts: Mapping[str, tuple[float, float]]) -> str:
    if not spec.key.startswith("itl_ms.") or not bursts:
        return ""
    who = ", ".join(
        f"{rig} (ITL p50 {_fmt(itl)} ms, TPOT p50 {_fmt(tpot)} ms)"
        for rig, (itl, tpot) in bursts.items()
    )
    return f"no ITL verdict: {who} delivers tokens in bursts; compare TPOT"


def compare(
    values: BootValues,
    *,
    baseline: str | None = None,
    metrics: Sequence[str] | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
    n_resamples: int = DEFAULT_RESAMPLES,
) -> Comparison:
    """Aggregate every rig's boots per cell and metric and judge each rig against the baseline.

    `baseline` defaults to the first rig; `metrics` to every metric found in `values`, in the
    order of `METRICS`.
    """
    rigs = list(values)
    if not rigs:
        raise ValueError("compare: no rigs given")
    base = rigs[0] if baseline is None else baseline
    if base not in values:
        raise ValueError(f"baseline rig {base!r} is not among the rigs: {', '.join(rigs)}")

    cells: list[str] = []
    found: set[str] = set()
    for rig, by_cell in values.items():
        for cell, by_metric in by_cell.items():
            if cell not in cells:
                cells.append(cell)
            for key in by_metric:
                try:
                    metric_spec(key)
                except ValueError as exc:
                    raise ValueError(f"rig {rig!r} cell {cell!r}: {exc}") from None
                found.add(key)
    keys = [k for k in METRICS if k in found] if metrics is None else list(metrics)
    specs = [metric_spec(k) for k in keys]

    compared: list[CellComparison] = []
    for cell in cells:
        bursts = burst_rigs(values, cell)
        compared.append(
            CellComparison(
                cell=cell,
                metrics=[
                    _compare_metric(
                        values,
                        cell,
                        spec,
                        base,
                        confidence,
                        seed,
                        n_resamples,
                        _withheld(spec, bursts),
                    )
                    for spec in specs
                ],
                burst_rigs=list(bursts),
            )
        )
    return Comparison(
        baseline=base,
        rigs=rigs,
        confidence=confidence,
        seed=seed,
        n_resamples=n_resamples,
        cells=compared,
    )


def _compare_metric(
    values: BootValues,
    cell: str,
    spec: MetricSpec,
    baseline: str,
    confidence: float,
    seed: int,
    n_resamples: int,
    withheld: str = "",
) -> MetricComparison:
    per_boot: dict[str, list[float | None]] = {
        rig: list(by_cell.get(cell, {}).get(spec.key, [])) for rig, by_cell in values.items()
    }
    aggregates: dict[str, BootAggregate | None] = {}
    for rig, series in per_boot.items():
        present = [v for v in series if v is not None]
        try:
            aggregates[rig] = (
                aggregate_boots(present, confidence=confidence, seed=seed, n_resamples=n_resamples)
                if present
                else None
            )
        except ValueError as exc:
            raise ValueError(f"rig {rig!r} cell {cell!r} metric {spec.key!r}: {exc}") from None

    base = aggregates[baseline]
    results: list[RigResult] = []
    for rig, agg in aggregates.items():
        judged: Verdict | None = None
        change: float | None = None
        if rig != baseline and agg is not None and base is not None and not withheld:
            judged = verdict_from_aggregates(agg, base, spec.direction)
            if base.value != 0:
                change = (agg.value - base.value) / base.value
        words = "" if rig == baseline or withheld else verdict_words(agg, base, judged, spec.name)
        results.append(
            RigResult(
                rig=rig,
                boots=per_boot[rig],
                aggregate=agg,
                verdict=judged,
                change_vs_baseline=change,
                words=words,
            )
        )
    with_data = {rig: s for rig, s in per_boot.items() if aggregates[rig] is not None}
    flips = ranking_flips(with_data, spec.direction) if len(with_data) >= 2 else None
    return MetricComparison(
        metric=spec,
        results=results,
        flips=flips,
        ranking="" if withheld else _ranking(aggregates, spec.direction),
        flip_words="" if withheld else _flip_words(flips),
        withheld=withheld,
    )


def _fmt(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


_VERDICT_STYLE = {
    Verdict.FASTER: "bold green",
    Verdict.SLOWER: "bold red",
    Verdict.INDISTINGUISHABLE: "dim",
}


def max_boots(comparison: Comparison) -> int:
    """The most boots any rig's aggregate was built from."""
    return max(
        (
            r.aggregate.n_boots
            for c in comparison.cells
            for m in c.metrics
            for r in m.results
            if r.aggregate is not None
        ),
        default=0,
    )


def fmt_value(value: float) -> str:
    """A number as the table and the report print it."""
    return _fmt(value)


def _rig_cell(result: RigResult, baseline: str, max_boots: int, compared: bool = True) -> Text:
    agg = result.aggregate
    if agg is None:
        return Text("no data", style="dim")
    if agg.n_boots == 1:  # one value: no interval to show
        text = Text(_fmt(agg.value))
    else:
        text = Text(f"{_fmt(agg.value)} [{_fmt(agg.ci_low)}, {_fmt(agg.ci_high)}]")
    if agg.n_boots < max_boots:
        text.append(f" n={agg.n_boots}", style="yellow")
    if not compared:  # one rig: nothing is compared with a baseline
        return text
    if result.rig == baseline:
        text.append("\nbaseline", style="dim")
    elif result.words:
        style = _VERDICT_STYLE[result.verdict] if result.verdict is not None else "dim"
        text.append(f"\n{result.words}", style=style)
    return text


def _ranking_cell(metric: MetricComparison) -> Text:
    if metric.withheld:
        return Text(metric.withheld, style="yellow")
    text = Text(metric.ranking)
    if metric.flip_words:
        text.append(f"\n{metric.flip_words}", style="bold yellow")
    return text


CAPTION = (
    "median of {boots} boots [{level} bootstrap CI]; each rig against the baseline as a ratio "
    "of medians: (better)/(worse) only when the intervals separate, else (within noise); "
    "ranking best first, '>' intervals apart, '≈' overlapping; a flipped order between boots "
    "is called out; a rig delivering tokens in bursts gets TPOT, not ITL, verdicts"
)


ONE_BOOT_CAPTION = (
    "one boot per rig: each figure is that boot's median; no interval and no verdict (the "
    "boot is the unit of replication: run more boots to compare)"
)


def render(comparison: Comparison) -> Table:
    most = max_boots(comparison)
    level = f"{comparison.confidence:.0%}"
    compared = len(comparison.rigs) > 1
    table = Table(
        title=f"rigbench comparison (baseline {comparison.baseline})"
        if compared
        else f"rigbench comparison (one rig: {comparison.baseline})",
        caption=ONE_BOOT_CAPTION if most == 1 else CAPTION.format(boots=most, level=level),
        show_lines=True,
    )
    table.add_column("cell")
    table.add_column("metric")
    for rig in comparison.rigs:
        table.add_column(rig, justify="right")
    table.add_column("ranking")
    for cell in comparison.cells:
        for metric in cell.metrics:
            by_rig = {r.rig: r for r in metric.results}
            table.add_row(
                cell.cell,
                f"{metric.metric.label} ({metric.metric.unit})",
                *(
                    _rig_cell(by_rig[rig], comparison.baseline, most, compared)
                    for rig in comparison.rigs
                ),
                _ranking_cell(metric),
            )
    return table


def render_text(comparison: Comparison, width: int = 160) -> str:
    """The table as plain text (no colour codes), for logs and tests."""
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    console.print(render(comparison))
    return console.export_text()


def _parse_report_arg(arg: str) -> tuple[str, Path]:
    rig, sep, path = arg.partition("=")
    if not sep or not rig or not path:
        raise typer.BadParameter(f"expected RIG=REPORT.json, got {arg!r}")
    return rig, Path(path)


def main(
    reports: Annotated[
        list[str],
        typer.Argument(help="RIG=REPORT.json, once per boot, boots in order", show_default=False),
    ],
    baseline: Annotated[str | None, typer.Option(help="rig to judge the others against")] = None,
    confidence: Annotated[float, typer.Option(min=0.5, max=0.999)] = DEFAULT_CONFIDENCE,
    seed: Annotated[int, typer.Option()] = DEFAULT_SEED,
    json_out: Annotated[Path | None, typer.Option("--json", help="also write the model")] = None,
) -> None:
    """Print the comparison table for run reports of several rigs and boots."""
    by_rig: dict[str, list[Mapping[str, Any]]] = {}
    for arg in reports:
        rig, path = _parse_report_arg(arg)
        try:
            by_rig.setdefault(rig, []).append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise typer.BadParameter(f"cannot read report {path}: {exc}") from None
    try:
        comparison = compare(
            values_from_reports(by_rig), baseline=baseline, confidence=confidence, seed=seed
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    Console().print(render(comparison))
    if json_out is not None:
        json_out.write_text(comparison.model_dump_json(indent=2))


app = typer.Typer(add_completion=False)
app.command()(main)

if __name__ == "__main__":
    app()
