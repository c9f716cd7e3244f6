"""How a run is kept and shown: the JSON report, per-request JSONL, a results table."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from rich.table import Table

from harness.metrics import percentile_key
from harness.schemas import (
    BenchmarkReport,
    CellReport,
    MetricSummary,
    MetricValidity,
    RequestRecord,
    cell_label,
)


def records_path(report_path: Path) -> Path:
    """Per-request records live next to the report: report.json -> report.requests.jsonl."""
    return report_path.with_name(report_path.stem + ".requests.jsonl")


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def write_report(
    report: BenchmarkReport, records: Iterable[RequestRecord], path: Path
) -> tuple[Path, Path]:
    """Write the report and its records (each file replaced whole, never half-written)."""
    jsonl = records_path(path)
    _atomic_write(jsonl, "".join(r.model_dump_json() + "\n" for r in records))
    _atomic_write(path, report.model_dump_json(indent=2) + "\n")
    return path, jsonl


def _value(summary: MetricSummary, figure: str) -> float | None:
    if figure in summary.percentiles:
        return summary.percentiles[figure]
    value = getattr(summary, figure, None)
    return None if value is None else float(value)


def _ms(summary: MetricSummary, figure: str = "p50") -> str:
    value = _value(summary, figure)
    return "-" if value is None else f"{value:.1f}"


BUNCHED_MARK = "*"
FAILURE_IN_ROW = 80  # characters of a cell's first failure shown in its row (all in a note)


def _checked(summary: MetricSummary, validity: MetricValidity, figure: str) -> str:
    """A figure; `invalid` where the client's error exceeds the tolerance; marked where the
    server or network bunched its tokens (shown as measured)."""
    if _value(summary, figure) is None:
        return "-"
    if not validity.valid(figure):
        return "invalid"
    if validity.cause == "server_or_network":
        return _ms(summary, figure) + BUNCHED_MARK
    return _ms(summary, figure)


def _load(cell: CellReport) -> tuple[str, str, str]:
    nominal = str(cell.concurrency if cell.concurrency is not None else cell.rate)
    achieved = "-" if cell.achieved_concurrency is None else f"{cell.achieved_concurrency:.1f}"
    rate = "-" if cell.achieved_request_rate is None else f"{cell.achieved_request_rate:.1f}"
    return nominal, achieved, rate


def _invalid_figures(summary: MetricSummary, validity: MetricValidity) -> list[str]:
    figures = ["mean", "p50", "p90", "p99", *summary.percentiles]
    return [f for f in figures if _value(summary, f) is not None and not validity.valid(f)]


def _notes(nominal: str, cell: CellReport) -> list[str]:
    notes: list[str] = []
    if cell.load_shortfall:
        notes.append(f"{nominal}: {cell.load_shortfall}")
    for name, summary, validity in (("TTFT", cell.ttft_ms, cell.ttft_validity),
                                    ("ITL", cell.itl_ms, cell.itl_validity)):  # fmt: skip
        if validity.cause == "server_or_network":
            notes.append(f"{nominal}: {name} {BUNCHED_MARK} as measured: {validity.reason}")
        elif validity.reason and (invalid := _invalid_figures(summary, validity)):
            notes.append(f"{nominal}: {name} {', '.join(invalid)} invalid: {validity.reason}")
    if cell.first_failure and len(cell.first_failure) > FAILURE_IN_ROW:
        notes.append(f"{nominal}: first failure: {cell.first_failure}")
    return notes


def _figures(report: BenchmarkReport) -> list[str]:
    """The percentiles the table shows: p50 and p99, or those the run asked for."""
    asked = [percentile_key(q) for q in report.config.percentiles]
    return asked or ["p50", "p99"]


def results_table(report: BenchmarkReport) -> Table:
    table = Table(title=f"rigbench bench: {report.model} at {report.url} ({report.endpoint})")
    load = {
        (True, False): "concurrency",
        (False, True): "rate (req/s)",
    }.get(
        (any(c.concurrency is not None for c in report.cells),
         any(c.rate is not None for c in report.cells)),
        "load",
    )  # fmt: skip
    figures = _figures(report)
    shown = [(m, f) for m in ("TTFT", "ITL", "TPOT") for f in figures] + [("E2E", "p50")]
    if not report.config.percentiles:  # the long-standing default columns
        shown = [("TTFT", "p50"), ("TTFT", "p99"), ("ITL", "p50"), ("ITL", "p99"),
                 ("TPOT", "p50"), ("E2E", "p50")]  # fmt: skip
    columns = [load, "in flight", "req/s", "ok", "failed", "out tok/s"]
    columns += [f"{m} {f}" for m, f in shown]
    slo = report.config.slo
    if slo is not None:
        columns.append("goodput req/s")
    columns += ["queue p50", "flags"]
    for column in columns:
        table.add_column(column, justify="right" if column != "flags" else "left")
    notes: list[str] = []
    for cell in report.cells:
        flags = [f"{k}={v}" for k, v in sorted(cell.failure_reasons.items())]
        if cell.length_mismatches:
            flags.append(f"length_mismatch={cell.length_mismatches}")
        if cell.multi_token_chunk_requests:
            flags.append(f"multi_token_chunks={cell.multi_token_chunk_requests}")
        if cell.shared_read_fraction > 0.01:
            flags.append(f"shared_reads={100 * cell.shared_read_fraction:.0f}%")
        if cell.delivery == "burst":
            flags.append("burst delivery (compare on TPOT)")
        if cell.load_shortfall:
            flags.append("SHORT OF LOAD")
        if not cell.complete:
            flags.append("INTERRUPTED")
        if cell.first_failure:
            first = cell.first_failure
            if len(first) > FAILURE_IN_ROW:
                first = first[: FAILURE_IN_ROW - 1] + "…"
            flags.append(f"first failure: {first}")
        nominal, achieved, rate = _load(cell)
        if load == "load" or cell.capacity_probe:
            nominal = cell_label(cell)
        notes += _notes(cell_label(cell), cell)
        metric = {
            "TTFT": (cell.ttft_ms, cell.ttft_validity),
            "ITL": (cell.itl_ms, cell.itl_validity),
            "TPOT": (cell.tpot_ms, None),
            "E2E": (cell.e2e_ms, None),
        }
        row = [nominal, achieved, rate, str(cell.requests_ok), str(cell.requests_failed),
               f"{cell.output_tok_s:.1f}"]  # fmt: skip
        for name, figure in shown:
            summary, validity = metric[name]
            row.append(_ms(summary, figure) if validity is None else
                       _checked(summary, validity, figure))  # fmt: skip
        if slo is not None:
            good = "-" if cell.goodput_req_s is None else f"{cell.goodput_req_s:.2f}"
            missed = "*" if cell.meets_slo is False else ""
            sent = cell.requests_ok + cell.requests_failed
            row.append(f"{good} ({cell.slo_met or 0}/{sent}){missed}")
        row += [_ms(cell.queue_wait_ms), " ".join(flags)]
        table.add_row(*row)
    caption = [
        "latencies in ms; in flight: requests in flight on average (achieved concurrency); "
        "req/s: requests completed per second",
        *(
            [
                f"goodput: requests per second that met every SLO ({slo.words()}); in "
                "brackets requests that met them of those sent, '*' where fewer than "
                f"{slo.percentile:g}% did"
            ]
            if slo is not None
            else []
        ),
        *notes,
        report.harness_ceiling_note,
    ]
    table.caption = "\n".join(caption)
    return table
