"""How a run is kept and shown: the JSON report, per-request JSONL, a results table."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from rich.table import Table

from harness.schemas import BenchmarkReport, MetricSummary, RequestRecord


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


def results_table(report: BenchmarkReport) -> Table:
    table = Table(title=f"rigbench bench: {report.model} at {report.url} ({report.endpoint})")
    load = "concurrency" if report.config.concurrency is not None else "rate (req/s)"
    for column in (load, "ok", "failed", "out tok/s", "TTFT p50", "TTFT p99", "ITL p50",
                   "ITL p99", "TPOT p50", "E2E p50", "queue p50", "flags"):  # fmt: skip
        table.add_column(column, justify="right" if column != "flags" else "left")
    for cell in report.cells:
        flags = [f"{k}={v}" for k, v in sorted(cell.failure_reasons.items())]
        if cell.length_mismatches:
            flags.append(f"length_mismatch={cell.length_mismatches}")
        if cell.multi_token_chunk_requests:
            flags.append(f"multi_token_chunks={cell.multi_token_chunk_requests}")
        if cell.shared_read_fraction > 0.01:
            flags.append(f"shared_reads={100 * cell.shared_read_fraction:.0f}%")
        if not cell.complete:
            flags.append("INTERRUPTED")
        table.add_row(
            str(cell.concurrency if cell.concurrency is not None else cell.rate),
            str(cell.requests_ok),
            str(cell.requests_failed),
            f"{cell.output_tok_s:.1f}",
            _ms(cell.ttft_ms),
            _ms(cell.ttft_ms, "p99"),
            _ms(cell.itl_ms),
            _ms(cell.itl_ms, "p99"),
            _ms(cell.tpot_ms),
            _ms(cell.e2e_ms),
            _ms(cell.queue_wait_ms),
            " ".join(flags),
        )
    table.caption = "latencies in ms; " + report.harness_ceiling_note
    return table
