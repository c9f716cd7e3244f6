"""One benchmark run: reachability check, pre-flight, warm-up, the cells in order, the report.

`run_benchmark` is the in-process API; the CLI is a thin shell around it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable, Mapping
from typing import Any

from harness.agreement import AgreementProbe
from harness.agreement_probe import run_probe
from harness.backend import OpenAIBackend, ServerInfo
from harness.capacity import search_capacity
from harness.dataset import DatasetEntry
from harness.gpu_sampler import GpuSampler
from harness.load import LoopLagMonitor, arrivals, cancel_on, run_concurrency, run_rate
from harness.metrics import Stall, cell_report
from harness.planning import Planned, Prompts
from harness.schemas import (
    BenchmarkConfig,
    BenchmarkReport,
    CellReport,
    DatasetProvenance,
    RequestRecord,
    cell_label,
)
from harness.version import harness_version
from harness.workers import Share, WorkerPool, split

OnCell = Callable[[BenchmarkReport, list[RequestRecord]], None]


def _now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class PreflightError(Exception):
    """The one request sent before any cell failed; the message says how and, where it can,
    what to change."""


async def preflight(backend: OpenAIBackend, config: BenchmarkConfig, server: ServerInfo,
                    body: bytes) -> None:  # fmt: skip
    """Send one request of the first cell's shape; raise PreflightError unless it streamed."""
    record = RequestRecord(
        request_id=0, cell=-2, warmup=True, input_len=None, output_len=0, ready_time=0.0,
        send_time=0.0,
    )  # fmt: skip
    await backend.generate(body, record)
    if record.ok:
        return
    hints: list[str] = []
    if server.models and config.model not in server.models:
        listed = ", ".join(repr(m) for m in server.models)
        hints.append(f"--model {config.model!r} is not one the server lists ({listed})")
    if record.http_status in (401, 403):
        hints.append("give the endpoint's key with --api-key (or OPENAI_API_KEY) or --header")
    if record.error == "missing_done" and not record.content_times:
        hints.append("no SSE data: event arrived: the server may have ignored stream: true")
    message = f"the pre-flight request failed ({record.error}): {record.error_detail}"
    raise PreflightError("; ".join([message, *hints]))


def strained_figures(cell: CellReport) -> list[str]:
    """The headline figures (TTFT and ITL p50) whose predicted error exceeds the tolerance.

    This is the strain warning: calibrated against the reference server, whose schedule is
    known, in benchmarks/harness_ceiling.py.
    """
    return [
        f"{name} p50 off by about {validity.predicted_error_ms.p50 or 0:+.1f} ms"
        for name, validity in (("TTFT", cell.ttft_validity), ("ITL", cell.itl_validity))
        if not validity.p50
    ]


def failed_cells(report: BenchmarkReport) -> list[str]:
    """One line per cell that fails the run: none of its requests succeeded, or more than
    config.max_failed_share of them failed. Each names the first failure."""
    lines = []
    for cell in report.cells:
        sent = cell.requests_ok + cell.requests_failed
        if sent == 0:
            continue  # interrupted before any request went out
        if cell.requests_ok and cell.requests_failed <= report.config.max_failed_share * sent:
            continue
        lines.append(
            f"{cell_label(cell)}: {cell.requests_failed} of {sent} requests failed "
            f"(first: {cell.first_failure})"
        )
    return lines


def ceiling_note(cells: list[CellReport]) -> str:
    """The run's verdict on the client itself, with the cells that fell short of their load."""
    worst = max((c.event_loop_lag_ms.p99 or 0.0 for c in cells), default=0.0)
    strained = [f"{cell_label(c)}: {', '.join(s)}" for c in cells if (s := strained_figures(c))]
    short = [cell_label(c) for c in cells if c.load_shortfall]
    parts: list[str] = []
    if strained:
        parts.append(
            "WARNING: the client was past its own ceiling (" + "; ".join(strained) + "): it "
            "read chunks late, together with later ones, so those figures are shown as "
            "invalid. Fewer streams per client process or more cores move this edge; see "
            "benchmarks/harness_ceiling.py."
        )
    else:
        parts.append(
            "the client measured TTFT and ITL p50 within tolerance (2 ms, 0.5 ms) in every "
            f"cell (event-loop lag p99 up to {worst:.1f} ms)."
        )
    if short:
        parts.append(
            f"Load not reached in {', '.join(short)}: the server saw fewer requests in flight "
            "than asked for (see 'in flight')."
        )
    return " ".join(parts)


async def run_benchmark(
    config: BenchmarkConfig,
    *,
    stop: asyncio.Event | None = None,
    on_cell: OnCell | None = None,
    headers: Mapping[str, str] | None = None,
    dataset: list[DatasetEntry] | None = None,
    dataset_provenance: DatasetProvenance | None = None,
) -> BenchmarkReport:
    """Run every cell of `config`, then its capacity search; when `stop` is set, finish with a
    partial report.

    Raises `ServerUnreachableError` when the server does not answer within 10 s, and
    `PreflightError` when one request of the first cell's shape fails, before any cell.
    `on_cell` is called after the warm-up and after each cell with the report so far and all
    records so far (the CLI writes files there, so a killed run leaves its finished cells).
    `headers` go with every request and stay out of the report (they may hold a key);
    `dataset` (harness.dataset) is the entries of a dataset workload, `dataset_provenance`
    what it was (the report records it, with the lines used).
    """
    stop = stop or asyncio.Event()
    origin = time.perf_counter()
    loads: list[tuple[int | None, float | None]] = [(c, None) for c in config.concurrency or []] + [
        (None, r) for r in config.rate or []
    ]
    max_in_flight = max(config.concurrency or [config.max_concurrency or 1024])
    report = BenchmarkReport(
        harness_version=harness_version(),
        url=config.url,
        model=config.model,
        started_at=_now_iso(),
        endpoint=config.endpoint,
        config=config,
        cells=[],
        harness_ceiling_note="",
    )
    records: list[RequestRecord] = []
    next_id = 0

    def record_factory(cell: int, planned: Planned) -> Callable[[int, float], RequestRecord]:
        def make(index: int, ready: float) -> RequestRecord:
            nonlocal next_id
            next_id += 1
            return RequestRecord(
                request_id=next_id,
                cell=cell,
                warmup=cell < 0,
                input_len=planned.input_lens[index],
                output_len=planned.output_lens[index],
                ready_time=ready,
                send_time=ready,
            )

        return make

    async with OpenAIBackend(
        config.url,
        config.endpoint,
        request_timeout_s=config.request_timeout_s,
        connect_timeout_s=config.connect_timeout_s,
        clock_origin=origin,
        headers=headers,
    ) as backend:
        server: ServerInfo = await backend.check_reachable()
        report.token_delivery = server.token_delivery
        prompts = Prompts(config, server.vocab_size, dataset, dataset_provenance)
        warm_plan = prompts.plan(config.warmup, config.seed + 10_000)
        cell_plans = [prompts.plan(config.requests, config.seed + i) for i in range(len(loads))]
        await preflight(backend, config, server, cell_plans[0].bodies[0])

        if config.agreement_probe:
            report.agreement = await _probe(config, stop)
            report.interrupted = stop.is_set()
            if on_cell:
                on_cell(report, records)

        async def warm_up(plan: Planned, streams: int) -> None:
            warm = asyncio.ensure_future(
                run_concurrency(backend, plan.bodies, streams, record_factory(-1, plan), records)
            )
            report.interrupted = await cancel_on(stop, warm)

        if config.warmup:
            await warm_up(warm_plan, min(config.warmup, max_in_flight))
            if on_cell:
                on_cell(report, records)

        pool = WorkerPool(config.workers) if config.workers > 1 else None

        async def measure(
            index: int, concurrency: int | None, rate: float | None, planned: Planned,
            probe: bool = False,
        ) -> CellReport:  # fmt: skip
            nonlocal next_id
            if config.warmup and config.warmup_each_cell and index > 0:
                streams = concurrency or config.max_concurrency or config.warmup
                await warm_up(
                    prompts.plan(config.warmup, config.seed + 10_000 + index),
                    min(config.warmup, streams),
                )
            sampler = GpuSampler()
            sampler.start()
            if pool is not None:
                shares = _shares(
                    config, index, concurrency, rate, planned, origin, next_id + 1, headers
                )
                next_id += len(planned.bodies)
                cell_records, lag_samples, stalls, report.interrupted = await pool.run(shares, stop)
            else:
                cell_records, lag_samples, stalls = await _run_cell_here(
                    config, index, concurrency, rate, planned.bodies, backend,
                    record_factory(index, planned), stop,
                )  # fmt: skip
                report.interrupted = stop.is_set()
            records.extend(cell_records)
            gpu = sampler.stop()
            cell = cell_report(
                cell_records,
                concurrency=concurrency,
                rate=rate,
                loop_lag_s=lag_samples,
                loop_stalls=stalls,
                complete=not report.interrupted,
                slo=config.slo,
                percentiles=config.percentiles,
                capacity_probe=probe,
            )
            cell = cell.model_copy(update={"gpu": gpu.per_token(cell.output_tokens)})
            report.cells.append(cell)
            report.dataset = prompts.provenance
            report.harness_ceiling_note = ceiling_note(report.cells)
            if on_cell:
                on_cell(report, records)
            return cell

        async def probe(load: float, requests: int) -> tuple[int, CellReport] | None:
            if report.interrupted:
                return None
            index = len(report.cells)
            planned = prompts.plan(requests, config.seed + index)
            by_concurrency = config.capacity is not None and config.capacity.by == "concurrency"
            cell = await measure(
                index,
                int(load) if by_concurrency else None,
                None if by_concurrency else load,
                planned,
                probe=True,
            )
            return None if report.interrupted else (index, cell)

        def time_left() -> float | None:
            if config.deadline_s is None:
                return None
            return config.deadline_s - (time.perf_counter() - origin)

        try:
            if pool is not None:
                await pool.start()
            for index, (concurrency, rate) in enumerate(loads):
                if report.interrupted:
                    break
                await measure(index, concurrency, rate, cell_plans[index])
            if config.capacity is not None and config.slo is not None and not report.interrupted:
                report.capacity = await search_capacity(
                    config.capacity, config.slo, config.requests, probe, time_left
                )
                if on_cell:
                    on_cell(report, records)
        finally:
            if pool is not None:
                pool.close()  # every worker process ends here, whatever happened

    report.finished_at = _now_iso()
    report.dataset = prompts.provenance
    report.harness_ceiling_note = ceiling_note(report.cells)
    return report


async def _probe(config: BenchmarkConfig, stop: asyncio.Event) -> AgreementProbe | None:
    """The agreement probe (harness.agreement_probe), before any load; None if stopped."""
    result: list[AgreementProbe] = []

    async def probe() -> None:
        result.append(await run_probe(config.url, config.model, timeout_s=config.request_timeout_s))

    await cancel_on(stop, asyncio.ensure_future(probe()))
    return result[0] if result else None


async def _run_cell_here(
    config: BenchmarkConfig,
    index: int,
    concurrency: int | None,
    rate: float | None,
    bodies: list[bytes],
    backend: OpenAIBackend,
    make_record: Callable[[int, float], RequestRecord],
    stop: asyncio.Event,
) -> tuple[list[RequestRecord], list[float], list[Stall]]:
    """One cell on this process's event loop: its records, lag samples and loop stalls."""
    cell_records: list[RequestRecord] = []
    if concurrency is not None:
        work = run_concurrency(backend, bodies, concurrency, make_record, cell_records)
    else:
        assert rate is not None
        offsets = arrivals(len(bodies), rate, config.seed + index, config.arrival)
        work = run_rate(backend, bodies, offsets, make_record, cell_records, config.max_concurrency)
    with LoopLagMonitor(backend) as lag:
        await cancel_on(stop, asyncio.ensure_future(work))
    return cell_records, lag.samples, lag.stalls


def _shares(
    config: BenchmarkConfig,
    index: int,
    concurrency: int | None,
    rate: float | None,
    planned: Planned,
    origin: float,
    first_id: int,
    headers: Mapping[str, str] | None = None,
) -> list[Share]:
    """Divide one cell among the worker processes, to start together half a second on."""
    bodies = planned.bodies
    common: dict[str, Any] = {
        "headers": dict(headers or {}),
        "url": config.url,
        "endpoint": config.endpoint,
        "request_timeout_s": config.request_timeout_s,
        "connect_timeout_s": config.connect_timeout_s,
        "origin": origin,
        "start_at": time.perf_counter() - origin + 0.5,
        "cell": index,
    }
    shares: list[Share] = []
    if concurrency is not None:
        streams = split(concurrency, config.workers)
        counts = split(len(bodies), config.workers)
        taken = 0
        for streams_w, count in zip(streams, counts, strict=True):
            if streams_w and count:
                span = slice(taken, taken + count)
                shares.append(
                    Share(
                        **common,
                        first_id=first_id + taken,
                        bodies=bodies[span],
                        input_lens=planned.input_lens[span],
                        output_lens=planned.output_lens[span],
                        concurrency=streams_w,
                    )
                )
                taken += count
        return shares
    assert rate is not None
    offsets = arrivals(len(bodies), rate, config.seed + index, config.arrival).tolist()
    caps = split(config.max_concurrency, config.workers) if config.max_concurrency else None
    taken = 0
    for w in range(config.workers):
        part = bodies[w :: config.workers]
        if part:
            shares.append(
                Share(
                    **common,
                    first_id=first_id + taken,
                    bodies=part,
                    input_lens=planned.input_lens[w :: config.workers],
                    output_lens=planned.output_lens[w :: config.workers],
                    arrivals=offsets[w :: config.workers],
                    max_concurrency=max(caps[w], 1) if caps else None,
                )
            )
            taken += len(part)
    return shares
