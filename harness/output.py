"""How a run is kept and shown: the JSON report, per-request JSONL, a results table."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from rich.table import Table

from harness.schemas import (
    BenchmarkReport,
    CellReport,
    MetricSummary,
    MetricValidity,
    RequestRecord,
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


def _ms(summary: MetricSummary, field: str = "p50") -> str:
    value = getattr(summary, field)
    return "-" if value is None else f"{value:.1f}"


def _checked(summary: MetricSummary, validity: MetricValidity, field: str) -> str:
    """A figure, or `invalid` where its predicted error exceeds the tolerance."""
    if not validity.valid(field) and getattr(summary, field) is not None:
        return "invalid"
    return _ms(summary, field)


def _load(cell: CellReport) -> tuple[str, str, str]:
    nominal = str(cell.concurrency if cell.concurrency is not None else cell.rate)
    achieved = "-" if cell.achieved_concurrency is None else f"{cell.achieved_concurrency:.1f}"
    rate = "-" if cell.achieved_request_rate is None else f"{cell.achieved_request_rate:.1f}"
    return nominal, achieved, rate


def results_table(report: BenchmarkReport) -> Table:
    table = Table(title=f"rigbench bench: {report.model} at {report.url} ({report.endpoint})")
    load = "concurrency" if report.config.concurrency is not None else "rate (req/s)"
    for column in (load, "in flight", "req/s", "ok", "failed", "out tok/s", "TTFT p50",
                   "TTFT p99", "ITL p50", "ITL p99", "TPOT p50", "E2E p50", "queue p50",
                   "flags"):  # fmt: skip
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
        nominal, achieved, rate = _load(cell)
        if cell.load_shortfall:
            notes.append(f"{nominal}: {cell.load_shortfall}")
        for name, validity in (("TTFT", cell.ttft_validity), ("ITL", cell.itl_validity)):
            if validity.reason:
                notes.append(f"{nominal}: {name} invalid where marked: {validity.reason}")
        table.add_row(
            nominal,
            achieved,
            rate,
            str(cell.requests_ok),
            str(cell.requests_failed),
            f"{cell.output_tok_s:.1f}",
            _checked(cell.ttft_ms, cell.ttft_validity, "p50"),
            _checked(cell.ttft_ms, cell.ttft_validity, "p99"),
            _checked(cell.itl_ms, cell.itl_validity, "p50"),
            _checked(cell.itl_ms, cell.itl_validity, "p99"),
            _ms(cell.tpot_ms),
            _ms(cell.e2e_ms),
            _ms(cell.queue_wait_ms),
            " ".join(flags),
        )
    caption = [
        "latencies in ms; in flight: requests in flight on average (achieved concurrency); "
        "req/s: requests completed per second",
        *notes,
        report.harness_ceiling_note,
    ]
    table.caption = "\n".join(caption)
    return table
