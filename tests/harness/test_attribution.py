"""Tokens that reach the client together: whose doing it was, said right.

A server that bunches its tokens (several SSE events in one write, or Nagle's algorithm
holding small writes for the client's delayed ACK) has a real latency its users see: it is
reported as measured, with the server or network named. A client whose own event loop is
stalled reads chunks late: those figures are its error and are marked invalid.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import re
import time
from collections.abc import Iterator

import numpy as np
import pytest
from rich.console import Console

from harness.metrics import Stall, _share, cell_report, stall_cover
from harness.output import results_table
from harness.runner import run_benchmark
from harness.schemas import BenchmarkConfig, BenchmarkReport, CellReport, RequestRecord
from tests.harness.conftest import (
    StartServer,
    assert_ttft_matches_server,
    server_stats,
    start_reference_server,
)
from tests.harness.test_metrics import read_late, restamped, streamed

SERVER_BUNCHED = "the server or network delivered these tokens together"
CLIENT_WARNING = "WARNING: the client was past its own ceiling"


@pytest.fixture(scope="module")
def coalescing_server() -> Iterator[str]:
    """First token due at 20 ms, then one every 10 ms; the first four leave in one write."""
    proc, url = start_reference_server("--ttft-ms", "20", "--itl-ms", "10", "--coalesce", "4")
    yield url
    proc.terminate()
    proc.wait(5)


def bench(url: str, concurrency: int, requests: int) -> BenchmarkReport:
    config = BenchmarkConfig(url=url, model="reference", concurrency=[concurrency],
                             requests=requests, warmup=2, input_len=16, output_len=12)  # fmt: skip
    return asyncio.run(run_benchmark(config))


def table_text(report: BenchmarkReport) -> str:
    console = Console(file=io.StringIO(), width=400)
    console.print(results_table(report))
    assert isinstance(console.file, io.StringIO)
    return " ".join(console.file.getvalue().split())


@pytest.mark.slow
def test_a_server_that_writes_tokens_together_is_named_and_measured(
    coalescing_server: str,
) -> None:
    report = bench(coalescing_server, concurrency=2, requests=8)
    cell = report.cells[0]
    assert cell.requests_ok == 8
    assert cell.first_token_shared_reads == 8  # every first token came with three more
    ttft = cell.ttft_validity
    assert ttft.cause == "server_or_network"
    assert ttft.p50
    assert ttft.p99
    # Measured is what the server did: its first write left with token 4, at about 50 ms.
    assert_ttft_matches_server(cell.ttft_ms.p50, coalescing_server, 10.0)
    assert ttft.predicted_error_ms.p50 == pytest.approx(30.0, abs=5.0)  # the bunching's cost
    text = table_text(report)
    assert "TTFT * as measured: 8 of 8 first tokens (100%) arrived together" in text
    assert SERVER_BUNCHED in text
    assert f"{cell.ttft_ms.p50:.1f}*" in text
    # Nothing calls TTFT invalid or blames the client for it (ITL's tail may be the loaded
    # box's: the client's own stalls are judged apart, per metric).
    assert not re.search(r"TTFT (mean|p[\d.]+)(, (mean|p[\d.]+))* invalid", text)
    assert "TTFT p50 off by" not in report.harness_ceiling_note


@pytest.mark.slow
def test_nagle_on_the_server_is_the_servers_latency(reference_server: StartServer) -> None:
    # Nagle's algorithm (Python's default for its own servers): the first small write goes
    # out, the next ones wait for the client's delayed ACK (about 40 ms on Linux) and leave
    # together. The harness reports the TTFT the server's users see, and says why.
    url = reference_server("--ttft-ms", "20", "--itl-ms", "5", "--nagle")
    report = bench(url, concurrency=1, requests=8)
    cell = report.cells[0]
    written = server_stats(url)["observed_ttft_ms"]["p50"]  # when the server wrote token 1
    assert cell.ttft_ms.p50 is not None
    assert cell.ttft_ms.p50 > written + 10.0  # held back on the wire, and reported so
    assert cell.ttft_validity.cause == "server_or_network"
    assert cell.ttft_validity.p50
    assert SERVER_BUNCHED in table_text(report)


@pytest.mark.slow
def test_a_client_whose_event_loop_is_stalled_is_called_out(
    reference_server: StartServer,
) -> None:
    url = reference_server("--ttft-ms", "20", "--itl-ms", "5")
    config = BenchmarkConfig(url=url, model="reference", concurrency=[4], requests=8,
                             warmup=0, input_len=16, output_len=32)  # fmt: skip

    async def stalled_run() -> BenchmarkReport:
        async def stall() -> None:  # the client's own loop blocked 30 ms in every 35
            while True:
                time.sleep(0.03)  # noqa: ASYNC251  (the stall is the point)
                await asyncio.sleep(0.005)

        staller = asyncio.create_task(stall())
        try:
            return await run_benchmark(config)
        finally:
            staller.cancel()

    report = asyncio.run(stalled_run())
    cell = report.cells[0]
    assert cell.requests_ok == 8
    assert cell.event_loop_lag_ms.p50 is not None
    assert cell.event_loop_lag_ms.p50 > 10
    assert cell.itl_validity.cause == "client"
    assert not cell.itl_validity.p50
    assert cell.ttft_validity.cause in (None, "client")
    text = table_text(report)
    assert CLIENT_WARNING in text
    assert "invalid" in text
    assert SERVER_BUNCHED not in text


def test_the_same_bunched_reads_are_blamed_by_the_clients_own_stalls() -> None:
    def cell(lag_s: list[float]) -> CellReport:
        records = [read_late(streamed(0.01 * k), 2) for k in range(10)]
        return cell_report(records, concurrency=10, loop_lag_s=lag_s)

    idle = cell([0.0005] * 100)  # never stalled for a token gap (5 ms)
    assert idle.ttft_validity.cause == idle.itl_validity.cause == "server_or_network"
    assert idle.ttft_validity.p50
    assert idle.itl_validity.p50
    busy = cell([0.03] * 100)  # stalled 30 ms after every 10 ms sleep
    assert busy.ttft_validity.cause == busy.itl_validity.cause == "client"
    assert not busy.ttft_validity.p50
    assert not busy.itl_validity.p50
    unknown = cell([])  # no word from the client's loop: the cautious reading
    assert unknown.ttft_validity.cause == "client"
    assert not unknown.ttft_validity.p50


def read_through(r: RequestRecord, blocked: list[Stall]) -> RequestRecord:
    """`r` as read by a client whose event loop is blocked over the `blocked` intervals: a
    chunk that arrives in one is read at its end, with every other that arrived in it, and
    all take the stamp of the last of them (the kernel's arrival time of the read)."""
    times = r.content_times
    read_at = [next((end for start, end in blocked if start <= t < end), t) for t in times]
    stamped = [
        max(t for t, at in zip(times, read_at, strict=True) if at == read) for read in read_at
    ]
    return restamped(r, stamped)


def test_a_client_stalled_longer_than_the_token_gap_is_not_excused_by_its_own_gaps() -> None:
    # The live case above, without a server: tokens every 5 ms, the client's loop blocked
    # from 0 to 31 ms of every 35. A stall's chunks are read together at its end, so most
    # gaps between reads are the stalls' own (30 to 35 ms), longer than the lag monitor sees
    # of them (it wakes 25 ms late: its sleep fell due 6 ms into each stall). Only two of
    # the four streams get a token in the loop's free 4 ms, read apart, 5 ms after the last.
    blocked = [(0.035 * k, 0.035 * k + 0.031) for k in range(12)]
    seen = [(start + 0.006, end) for start, end in blocked]  # the lag monitor's stalls
    lag = [end - start for start, end in seen]
    records = [read_through(streamed(send, tokens=64), blocked)
               for send in (0.00025, 0.00075, 0.00425, 0.00475)]  # fmt: skip
    gaps = [b - a for r in records for a, b in itertools.pairwise(r.content_times) if b > a]
    assert sum(g > 0.025 for g in gaps) > 1.5 * sum(g < 0.01 for g in gaps)  # mostly stalls
    # Every gap between reads counted: the stalls (25 ms) look shorter than a token gap.
    blind = cell_report(records, concurrency=4, loop_lag_s=lag)
    assert blind.itl_validity.cause == "server_or_network"
    # Told when the loop was stalled, the gaps it covers are the client's: the token gap is
    # 5 ms, and a client stalled 71% of the time is named.
    cell = cell_report(records, concurrency=4, loop_lag_s=lag, loop_stalls=seen)
    assert cell.itl_validity.cause == "client"
    assert not cell.itl_validity.p50
    assert "(5.0 ms) or more for 71% of the cell" in str(cell.itl_validity.reason)
    # Stalls over every gap leave none to say the token gap: the client is named.
    everything = [(0.0, 1.0)]
    assert cell_report(records, loop_lag_s=lag, loop_stalls=everything).itl_validity.cause == (
        "client"
    )


def test_a_server_that_holds_its_writes_stays_named_beside_small_stalls_of_the_client() -> None:
    # Nagle's algorithm on the server: tokens every 5 ms, but the server's writes wait for
    # the client's delayed ACK and leave together every 40 ms. The client, on a loaded box,
    # wakes 2.5 ms late from each 10 ms sleep: its stalls cover a small part of each gap.
    blocked = [(0.0125 * k, 0.0125 * k + 0.0025) for k in range(40)]
    held = [(0.04 * k, 0.04 * k + 0.0399) for k in range(12)]  # read as each write lands
    records = [read_through(streamed(send, tokens=32), held) for send in (0.0, 0.002)]
    lag = [end - start for start, end in blocked]
    for stalls in ([], blocked):
        cell = cell_report(records, concurrency=2, loop_lag_s=lag, loop_stalls=stalls)
        assert cell.ttft_validity.cause == cell.itl_validity.cause == "server_or_network"
        assert "token gap (40.0 ms)" in str(cell.itl_validity.reason)
        assert cell.itl_validity.p50


def test_the_stalls_of_several_client_processes_cover_a_gap_once() -> None:
    stalls = [(0.5, 1.5), (0.6, 0.8), (1.8, 3.0)]  # two workers' stalls overlap
    covered = stall_cover(np.array([0.0, 1.0, 3.5]), np.array([1.0, 2.0, 4.0]), stalls)
    assert covered == pytest.approx([0.5, 0.7, 0.0])
    assert list(stall_cover(np.array([0.0]), np.array([1.0]), [])) == [0.0]


def test_a_note_never_contradicts_itself() -> None:
    # One request of twenty read its chunks in pairs: ITL's tail spoiled by under 3% of the
    # chunks. The note names the figures it invalidates, and never says "0%".
    records = [*(streamed(0.01 * k) for k in range(19)), read_late(streamed(0.5), 2)]
    cell = cell_report(records, concurrency=4, loop_lag_s=[0.03] * 10)  # a report's cell has one
    report = BenchmarkReport(
        harness_version="test", url="http://x", model="m", started_at="now", endpoint="completions",
        config=BenchmarkConfig(url="http://x", model="m"), cells=[cell], harness_ceiling_note="",
    )  # fmt: skip
    text = table_text(report)
    assert "ITL p99 invalid: the client read 10 of 400 chunks (2%) late" in text
    assert "ITL p50" not in text.split("latencies in ms")[1]  # held: not in any note
    assert _share(3, 800, "chunks") == "3 of 800 chunks (0.4%)"  # never "(0%)"
    assert _share(799, 800, "chunks") == "799 of 800 chunks (99.9%)"  # nor "(100%)"
