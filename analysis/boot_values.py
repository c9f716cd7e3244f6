"""Each boot's values, read from what it recorded: `values[rig][cell][metric]`, the list of
that metric's per-boot values (index = boot; None where the boot produced no value), which
`analysis.compare.compare` takes. Which metrics are read, and where, is `analysis.metrics`'s
table: a load cell's fields (`values_from_reports`), the boot's capacity search (the cell
`capacity`), its start (`values_from_timings`, the cell `start-up`). Beside them, what the
comparison says of a boot's cells: burst delivery and a load not reached.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from analysis.metrics import (
    Source,
    capacity_metric,
    default_metrics,
    metric_spec,
    optional_metrics,
    specs,
)
from harness.boot_phases import BootTiming
from harness.schemas import cell_label

BootValues = Mapping[str, Mapping[str, Mapping[str, Sequence[float | None]]]]
# The cell that holds each boot's capacity (BenchmarkReport.capacity), beside the load cells.
CAPACITY_CELL = "capacity"
# The cell that holds each boot's start: launch to ready, its cost, the warm restarts' ready.
START_CELL = "start-up"


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
    metrics: Sequence[str] | None = None,
) -> dict[str, dict[str, dict[str, list[float | None]]]]:
    """`reports[rig]` lists that rig's run reports (parsed JSON), one per boot, in boot order.

    A cell with no successful request (`requests_ok` 0) contributes None for its boot, and so
    does a cell that a boot's report lacks. Capacity probes are not load cells (their loads
    are each boot's own) and are left out; a boot's capacity (`capacity.value`) is the metric
    `capacity.concurrency` or `capacity.rate` of the cell `capacity`. `metrics` defaults to
    the table's metrics compared always; those compared where recorded (goodput, the GPU's
    energy per token) are added where some report recorded them.
    """
    asked = default_metrics() if metrics is None else tuple(metrics)
    for key in asked:
        if metric_spec(key).source is not Source.CELL:
            raise ValueError(f"metric {key!r} is not a load cell's: it is not read from a cell")
    optional = optional_metrics()
    recorded = {
        key
        for boot_reports in reports.values()
        for report in boot_reports
        for cell in report.get("cells", [])
        for key in optional
        if metric_spec(key).of_cell(cell) is not None
    }
    keys = [*asked, *(k for k in optional if k in recorded and k not in asked)]
    values: dict[str, dict[str, dict[str, list[float | None]]]] = {}
    for rig, boot_reports in reports.items():
        by_cell: dict[str, dict[str, list[float | None]]] = {}
        for boot, report in enumerate(boot_reports):
            if "cells" not in report:
                raise ValueError(f"rig {rig!r} boot {boot}: report has no 'cells'")
            for cell in report["cells"]:
                if cell.get("capacity_probe"):
                    continue
                row = by_cell.setdefault(cell_label(cell), {key: [] for key in keys})
                ok = cell.get("requests_ok", 1) > 0
                for key in keys:
                    series = row[key]
                    series.extend([None] * (boot - len(series)))  # boots lacking this cell
                    spec = metric_spec(key)
                    if not ok:
                        series.append(None)
                    elif key in optional:  # None where this boot did not record it
                        series.append(spec.of_cell(cell))
                    else:
                        series.append(_read_metric(cell, spec.where))
            capacity = report.get("capacity")
            if isinstance(capacity, Mapping) and capacity.get("value") is not None:
                key = capacity_metric(str(capacity["by"])).key
                series = by_cell.setdefault(CAPACITY_CELL, {}).setdefault(key, [])
                series.extend([None] * (boot - len(series)))
                series.append(float(capacity["value"]))
        for row in by_cell.values():
            for series in row.values():
                series.extend([None] * (len(boot_reports) - len(series)))
        values[rig] = by_cell
    return values


def values_from_timings(
    timings: Mapping[str, Sequence[BootTiming | None]],
) -> dict[str, dict[str, dict[str, list[float | None]]]]:
    """Each boot's start (harness.boot_phases: the table's START metrics, ready_s, startup_usd,
    warm_ready_s) as the metrics of the cell START_CELL, in the boot order given; a metric no
    boot of any rig recorded is left out (a sweep without restarts has no warm_ready_s)."""

    def value(timing: BootTiming | None, field: str) -> float | None:
        found = getattr(timing, field, None) if timing is not None else None
        return None if found is None else float(found)

    fields = {
        spec.key: spec.where
        for spec in specs(source=Source.START)
        if any(value(t, spec.where) is not None for boots in timings.values() for t in boots)
    }
    return {
        rig: {START_CELL: {key: [value(t, f) for t in boots] for key, f in fields.items()}}
        for rig, boots in timings.items()
        if fields
    }


def merge_values(*sources: BootValues) -> dict[str, dict[str, dict[str, list[float | None]]]]:
    """Several `values[rig][cell][metric]` into one (cells of later sources added)."""
    merged: dict[str, dict[str, dict[str, list[float | None]]]] = {}
    for source in sources:
        for rig, by_cell in source.items():
            for cell, by_metric in by_cell.items():
                target = merged.setdefault(rig, {}).setdefault(cell, {})
                target.update({k: list(v) for k, v in by_metric.items()})
    return merged


DECLARED = "declares burst delivery"


def bursts_from_reports(
    reports: Mapping[str, Sequence[Mapping[str, Any]]],
) -> dict[str, dict[str, str]]:
    """Per rig and cell, in words, what shows that its tokens came in groups: the rig's own
    declaration (`token_delivery: burst` on /v1/models, in the report) and the boots whose
    share of token intervals under 0.2 ms was over one half (`delivery: burst`). Cells with
    neither are absent."""
    found: dict[str, dict[str, str]] = {}
    for rig, boot_reports in reports.items():
        declared = any(r.get("token_delivery") == "burst" for r in boot_reports)
        shown: dict[str, list[tuple[int, float | None]]] = {}
        for boot, report in enumerate(boot_reports, start=1):
            for cell in report.get("cells", []):
                boots = shown.setdefault(cell_label(cell), [])
                if cell.get("delivery") == "burst":
                    share = cell.get("burst_share")
                    boots.append((boot, share if isinstance(share, float) else None))
        for label, boots in shown.items():
            evidence = [DECLARED] if declared else []
            if boots:
                most = max((share for _, share in boots if share is not None), default=None)
                what = (
                    "in bursts" if most is None else f"{most:.0%} of token intervals under 0.2 ms"
                )
                which = ", ".join(str(boot) for boot, _ in boots)
                evidence.append(f"delivered {what} (boot{'s' if len(boots) > 1 else ''} {which})")
            if evidence:
                found.setdefault(rig, {})[label] = " and ".join(evidence)
    return found


def shortfalls_from_reports(
    reports: Mapping[str, Sequence[Mapping[str, Any]]],
) -> dict[str, list[str]]:
    """Per cell, the boots whose harness did not load the server as asked (`load_shortfall`),
    in words; cells where every boot did are absent."""
    found: dict[str, list[str]] = {}
    for rig, boot_reports in reports.items():
        for boot, report in enumerate(boot_reports, start=1):
            for cell in report.get("cells", []):
                if not cell.get("load_shortfall"):
                    continue
                achieved, nominal = cell.get("achieved_concurrency"), cell.get("concurrency")
                words = (
                    f"{achieved:.1f} of {nominal} requests in flight ({achieved / nominal:.0%})"
                    if isinstance(achieved, float) and isinstance(nominal, int) and nominal
                    else "sends fell behind the rate's schedule"
                )
                found.setdefault(cell_label(cell), []).append(f"{rig} boot {boot}: {words}")
    return found
