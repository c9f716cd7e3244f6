"""Load shapes: warm-up kept out of cells, queueing kept out of latency, seeded arrivals."""

import asyncio
import itertools
import time

import numpy as np
import pytest

from harness.backend import OpenAIBackend
from harness.load import LoopLagMonitor, poisson_arrivals
from harness.runner import run_benchmark
from harness.schemas import BenchmarkConfig, RequestRecord
from tests.harness.conftest import (
    StartServer,
    assert_itl_matches_server,
    assert_ttft_matches_server,
    server_stats,
)

TTFT_MS, ITL_MS = 100.0, 40.0  # gaps wide enough for a loaded box's loopback lag
SCHEDULE = ("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS))


def run(config: BenchmarkConfig) -> tuple[list[RequestRecord], list]:  # type: ignore[type-arg]
    records: list[RequestRecord] = []

    def keep(_: object, so_far: list[RequestRecord]) -> None:
        records[:] = so_far

    report = asyncio.run(run_benchmark(config, on_cell=keep))
    return records, report.cells


@pytest.mark.slow
def test_warmup_requests_never_enter_a_cell(reference_server: StartServer) -> None:
    url = reference_server(*SCHEDULE)
    config = BenchmarkConfig(
        url=url, model="reference", concurrency=[2, 3], requests=5, warmup=3, output_len=4,
    )  # fmt: skip
    records, cells = run(config)
    assert server_stats(url)["requests"] == 1 + 3 + 5 + 5  # the pre-flight first
    assert [r.cell for r in records].count(-1) == 3
    assert all(r.warmup for r in records if r.cell == -1)
    assert [(c.concurrency, c.requests_ok) for c in cells] == [(2, 5), (3, 5)]
    assert [c.ttft_ms.count for c in cells] == [5, 5]


@pytest.mark.slow
def test_concurrency_cell_keeps_exactly_c_in_flight(reference_server: StartServer) -> None:
    url = reference_server(*SCHEDULE)
    config = BenchmarkConfig(url=url, model="reference", concurrency=[4], requests=12,
                             warmup=0, output_len=4)  # fmt: skip
    records, _ = run(config)
    spans = [(r.send_time, r.end_time) for r in records]
    for t, _end in spans:
        in_flight = sum(s <= t < e for s, e in spans if e is not None)
        assert 1 <= in_flight <= 4


@pytest.mark.slow
def test_queue_wait_is_reported_apart_from_latency(reference_server: StartServer) -> None:
    # 40 req/s into one slot that each request holds for ~70 ms: requests queue, but TTFT
    # and E2E still start when a request is sent.
    url = reference_server(*SCHEDULE)
    config = BenchmarkConfig(
        url=url, model="reference", rate=[40.0], max_concurrency=1, requests=12, warmup=1,
        output_len=4,
    )  # fmt: skip
    _, cells = run(config)
    cell = cells[0]
    assert cell.rate == 40.0
    assert cell.requests_ok == 12
    assert cell.queue_wait_ms.p90 is not None
    assert cell.queue_wait_ms.p90 > 100
    # Queueing (p90 over 100 ms) would show here if it leaked into latency.
    server_ttft = assert_ttft_matches_server(cell.ttft_ms.p50, url, ITL_MS)
    # E2E is the server's time to first token and three gaps, not a queue wait more.
    gaps = server_stats(url)["observed_chunk_gap_ms"]["mean"]
    assert cell.e2e_ms.p50 == pytest.approx(server_ttft + 3 * gaps, abs=ITL_MS)


def test_the_lag_monitor_says_when_the_loop_was_stalled() -> None:
    # On the records' clock (the backend's, from its origin), the stall's interval: from
    # when the monitor's sleep fell due to when the blocked loop woke it.
    async def stalled() -> tuple[LoopLagMonitor, float, float]:
        backend = OpenAIBackend("http://127.0.0.1:9", "completions",
                                clock_origin=time.perf_counter() - 100.0)  # fmt: skip
        with LoopLagMonitor(backend) as lag:
            await asyncio.sleep(0.015)
            began = backend.now()
            time.sleep(0.05)  # noqa: ASYNC251  (the stall is the point)
            ended = backend.now()
            await asyncio.sleep(0.015)
        return lag, began, ended

    lag, began, ended = asyncio.run(stalled())
    ((due, woke),) = [(due, woke) for due, woke in lag.stalls if due < ended <= woke]
    assert due <= began + 0.0101  # it fell due at most one sleep after the loop last ran
    assert woke - due in lag.samples
    assert len(lag.stalls) == sum(x > 0 for x in lag.samples)


def test_poisson_arrivals_are_seeded_with_the_right_mean() -> None:
    a = poisson_arrivals(20_000, rate=5.0, seed=7)
    assert a[0] == 0.0
    assert np.array_equal(a, poisson_arrivals(20_000, rate=5.0, seed=7))
    assert not np.array_equal(a, poisson_arrivals(20_000, rate=5.0, seed=8))
    assert np.mean(np.diff(a)) == pytest.approx(0.2, rel=0.03)


@pytest.mark.slow
def test_rate_cell_sends_on_its_schedule(reference_server: StartServer) -> None:
    # Slow streams (about 0.6 s each at 20 requests/s): most requests fall due while the one
    # before still streams, by far more than an event loop on a loaded box lags.
    url = reference_server("--ttft-ms", "500", "--itl-ms", "100")
    config = BenchmarkConfig(url=url, model="reference", rate=[20.0], requests=10, warmup=0,
                             output_len=2, seed=4)  # fmt: skip
    records, _ = run(config)
    due = sorted(r.ready_time for r in records)
    offsets = np.array(due) - due[0]
    assert offsets == pytest.approx(poisson_arrivals(10, 20.0, seed=4), abs=1e-6)
    # No cap: a request due while an earlier one streams is sent before that one ends (a cap
    # of one slot would hold it until then, 0.3 s or more after it fell due).
    spans = sorted((r.ready_time, r.send_time, r.end_time) for r in records)
    overlapping = [
        (send, end_before)
        for (_, _, end_before), (due, send, _) in itertools.pairwise(spans)
        if end_before is not None and end_before - due > 0.3
    ]
    assert len(overlapping) >= 5
    assert all(send < end_before for send, end_before in overlapping)


@pytest.mark.slow
def test_cell_shared_by_worker_processes(reference_server: StartServer) -> None:
    url = reference_server(*SCHEDULE)
    config = BenchmarkConfig(url=url, model="reference", concurrency=[6], requests=18,
                             warmup=2, output_len=6, workers=2)  # fmt: skip
    records, cells = run(config)
    cell = cells[0]
    assert (cell.requests_ok, cell.requests_failed, cell.output_tokens) == (18, 0, 18 * 6)
    assert sorted(r.request_id for r in records) == list(range(1, 2 + 18 + 1))
    spans = [(r.send_time, r.end_time) for r in records if r.cell == 0]
    peak = max(sum(s <= t < e for s, e in spans if e is not None) for t, _ in spans)
    assert peak == 6  # both processes' streams overlap on the one clock
    assert_ttft_matches_server(cell.ttft_ms.p50, url, ITL_MS)
    assert_itl_matches_server(cell, url, ITL_MS)


@pytest.mark.slow
def test_rate_cell_shared_by_worker_processes(reference_server: StartServer) -> None:
    url = reference_server(*SCHEDULE)
    config = BenchmarkConfig(url=url, model="reference", rate=[30.0], requests=12, warmup=0,
                             output_len=3, workers=3, seed=2)  # fmt: skip
    records, cells = run(config)
    assert cells[0].requests_ok == 12
    due = np.array(sorted(r.ready_time for r in records))
    assert due - due[0] == pytest.approx(poisson_arrivals(12, 30.0, seed=2), abs=2e-3)
