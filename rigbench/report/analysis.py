"""The figures a report plots, computed from a sweep's boots: per-boot values per rig and cell,
their geometric means with intervals (analysis.stats), cost per million output tokens, request
latencies."""

from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from analysis.capacity import usd_per_million_tokens
from analysis.stats import BootAggregate, aggregate_boots
from harness.schemas import cell_label, metric_value
from rigbench.report.data import BootData, SweepData


class Point(BaseModel):
    """One rig at one cell: every boot's value and their geometric mean with its interval."""

    model_config = ConfigDict(frozen=True)

    cell: str
    x: float  # the load: concurrency, or the Poisson rate in requests/s
    boots: list[tuple[int, float]]  # (boot number, value)
    aggregate: BootAggregate


def cell_x(cell: dict[str, Any]) -> float:
    if cell.get("concurrency") is not None:
        return float(cell["concurrency"])
    return float(cell["rate"])


LOAD_TITLES = {"concurrency": "concurrency", "rate": "rate (requests/s)"}


def load_kind(data: SweepData) -> str:
    """What the x axis of a load plot is: "concurrency" or "rate (requests/s)"."""
    kinds = load_kinds(data)
    return LOAD_TITLES[kinds[0]] if kinds else "concurrency"


def load_kinds(data: SweepData) -> list[str]:
    """The kinds of load cell the sweep measured, concurrency first: each gets its own axis."""
    found = {
        "concurrency" if cell.get("concurrency") is not None else "rate"
        for boot in data.boots
        for cell in _measured_cells(boot)
    }
    return [k for k in LOAD_TITLES if k in found]


def _measured_cells(boot: BootData) -> Iterable[dict[str, Any]]:
    """The load cells the sweep asked for that served a request (capacity probes, whose loads
    are each boot's own, are drawn only in the Pareto view)."""
    for cell in (boot.report or {}).get("cells", []):
        if (cell.get("requests_ok") or 0) > 0 and not cell.get("capacity_probe"):
            yield cell


class ParetoPoint(BaseModel):
    """One boot's cell (a capacity probe too) in the Pareto view."""

    model_config = ConfigDict(frozen=True)

    cell: str
    boot: int
    per_user: float  # output tok/s each request saw while decoding: 1000 / TPOT p50 (ms)
    per_gpu: float  # the cell's output tok/s: every boot runs on an instance of one GPU


def pareto_points(data: SweepData) -> dict[str, list[ParetoPoint]]:
    """Per rig, every boot's cells (capacity probes too) with a TPOT and an output rate."""
    found: dict[str, list[ParetoPoint]] = {}
    for boot in data.boots:
        for cell in (boot.report or {}).get("cells", []):
            tpot = metric_value(cell, "tpot_ms.p50")
            tok_s = metric_value(cell, "output_tok_s")
            if not (cell.get("requests_ok") or 0) or not tpot or not tok_s:
                continue
            found.setdefault(boot.rig, []).append(
                ParetoPoint(
                    cell=cell_label(cell), boot=boot.boot, per_user=1e3 / tpot, per_gpu=tok_s
                )
            )
    return {rig: found[rig] for rig in data.rigs if rig in found}


def pareto_frontier(points: Sequence[ParetoPoint]) -> list[ParetoPoint]:
    """The points no other point beats on both axes, by per-user speed (each further one
    trades per-user speed for output per GPU)."""
    frontier: list[ParetoPoint] = []
    for point in sorted(points, key=lambda p: (-p.per_user, -p.per_gpu)):
        if not frontier or point.per_gpu > frontier[-1].per_gpu:
            frontier.append(point)
    return frontier


def series(data: SweepData, value_of: Any, kind: str | None = None) -> dict[str, list[Point]]:
    """Per rig, one Point per cell (in load order), of one `kind` of load when given;
    `value_of(boot, cell)` gives a boot's value or None. Cells where no boot has a value are
    left out."""
    found: dict[str, dict[str, tuple[float, list[tuple[int, float]]]]] = {}
    for boot in data.boots:
        for cell in _measured_cells(boot):
            if kind is not None and cell.get(kind) is None:
                continue
            value = value_of(boot, cell)
            if value is None:
                continue
            by_cell = found.setdefault(boot.rig, {})
            label = cell_label(cell)
            by_cell.setdefault(label, (cell_x(cell), []))[1].append((boot.boot, value))
    out: dict[str, list[Point]] = {}
    for rig in data.rigs:
        points = []
        for label, (x, boots) in sorted(found.get(rig, {}).items(), key=lambda kv: kv[1][0]):
            agg = aggregate_boots([v for _, v in boots])
            points.append(Point(cell=label, x=x, boots=boots, aggregate=agg))
        if points:
            out[rig] = points
    return out


def metric_series(data: SweepData, key: str, kind: str | None = None) -> dict[str, list[Point]]:
    return series(data, lambda boot, cell: metric_value(cell, key), kind)


def cost_series(data: SweepData) -> dict[str, list[Point]]:
    """$ per million output tokens per rig and cell, from the price each boot paid."""

    def value(boot: BootData, cell: dict[str, Any]) -> float | None:
        tok_s = metric_value(cell, "output_tok_s")
        if boot.price_paid is None or tok_s is None:
            return None
        return usd_per_million_tokens(boot.price_paid, tok_s)

    return series(data, value)


class Latencies(BaseModel):
    ttft_ms: list[float]
    tpot_ms: list[float]
    e2e_ms: list[float]


def request_latencies(boots: Sequence[BootData], cell: str) -> Latencies | None:
    """Every successful measured request of `cell` over the boots; None without records."""
    out = Latencies(ttft_ms=[], tpot_ms=[], e2e_ms=[])
    any_records = False
    for boot in boots:
        if boot.records is None or boot.report is None:
            continue
        labels = [cell_label(c) for c in boot.report.get("cells", [])]
        if cell not in labels:
            continue
        any_records = True
        index = labels.index(cell)
        for rec in boot.records:
            if rec.get("cell") != index or rec.get("warmup") or rec.get("error") is not None:
                continue
            first, end, sent = rec.get("first_content_time"), rec.get("end_time"), rec["send_time"]
            if first is None or end is None:
                continue
            out.ttft_ms.append((first - sent) * 1e3)
            out.e2e_ms.append((end - sent) * 1e3)
            usage = rec.get("usage_output_tokens")
            tokens = usage if usage is not None else rec.get("content_chunks", 0)
            if tokens > 1:
                out.tpot_ms.append((end - first) * 1e3 / (tokens - 1))
    return out if any_records else None


def chosen_cell(data: SweepData, wanted: str | None = None) -> str | None:
    """The cell the latency CDF shows: `wanted`, else the highest load every rig measured."""
    cells: dict[str, tuple[float, set[str]]] = {}
    for boot in data.boots:
        for cell in _measured_cells(boot):
            cells.setdefault(cell_label(cell), (cell_x(cell), set()))[1].add(boot.rig)
    if wanted is not None:
        if wanted not in cells:
            known = ", ".join(cells) or "none"
            raise ValueError(f"no cell {wanted!r} in this sweep (cells: {known})")
        return wanted
    if not cells:
        return None
    rigs = {b.rig for b in data.boots if b.report is not None}
    everywhere = [(x, label) for label, (x, seen) in cells.items() if seen >= rigs]
    pool = everywhere or [(x, label) for label, (x, _) in cells.items()]
    return max(pool)[1]
