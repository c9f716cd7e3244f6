"""The harness's figures against the reference server's exact schedule, over loopback.

The reference server reports what it actually did (`observed_*` in /stats: when it wrote
each first token and the gaps between its writes). On a shared 2-core box the server itself
can miss its schedule when other processes take the CPU; then the measurement says nothing
about the harness, so it is repeated (at most three times) before the test gives up.
"""

import asyncio

import pytest

from harness.runner import run_benchmark
from harness.schemas import BenchmarkConfig, CellReport
from tests.harness.conftest import StartServer, server_stats

TTFT_MS, ITL_MS, OUTPUT_LEN, STREAMS = 200.0, 100.0, 8, 64
TTFT_TOL_MS, ITL_TOL_MS = 2.0, 0.5
SERVER_SLIP_MS = 1.0  # the yardstick is void when its own p50 is further than this off


def measure(url: str) -> CellReport:
    config = BenchmarkConfig(
        url=url, model="reference", concurrency=[STREAMS], requests=2 * STREAMS,
        warmup=STREAMS, input_len=32, output_len=OUTPUT_LEN,
    )  # fmt: skip
    return asyncio.run(run_benchmark(config)).cells[0]


def test_64_concurrent_streams_match_the_schedule(reference_server: StartServer) -> None:
    attempts = []
    for _ in range(3):
        url = reference_server("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS))
        cell = measure(url)
        stats = server_stats(url)
        server_ttft = stats["observed_ttft_ms"]["p50"]
        server_gap = stats["observed_chunk_gap_ms"]["p50"]
        attempts.append((cell.ttft_ms.p50, cell.itl_ms.p50, server_ttft, server_gap))
        if abs(server_ttft - TTFT_MS) <= SERVER_SLIP_MS and abs(server_gap - ITL_MS) <= 0.25:
            break
    else:
        pytest.fail(f"the reference server missed its own schedule every time: {attempts}")

    assert (cell.requests_ok, cell.requests_failed) == (2 * STREAMS, 0)
    assert cell.output_tokens == 2 * STREAMS * OUTPUT_LEN
    assert cell.length_mismatches == 0
    assert cell.prompt_length_mismatches == 0
    assert cell.itl_ms.count == 2 * STREAMS * (OUTPUT_LEN - 1)
    # Against the schedule (the tolerances) ...
    assert cell.ttft_ms.p50 == pytest.approx(TTFT_MS, abs=TTFT_TOL_MS), attempts
    assert cell.itl_ms.p50 == pytest.approx(ITL_MS, abs=ITL_TOL_MS), attempts
    assert cell.tpot_ms.p50 == pytest.approx(ITL_MS, abs=2 * ITL_TOL_MS), attempts
    # ... and against what the server saw itself do.
    assert cell.ttft_ms.p50 == pytest.approx(server_ttft, abs=TTFT_TOL_MS), attempts
    assert cell.itl_ms.p50 == pytest.approx(server_gap, abs=ITL_TOL_MS), attempts
