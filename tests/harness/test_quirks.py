"""Each quirk real servers show, served by the reference server, measured right."""

import asyncio

import pytest

from harness.runner import PreflightError, run_benchmark
from harness.schemas import BenchmarkConfig, CellReport, Endpoint
from tests.harness.conftest import (
    StartServer,
    assert_itl_matches_server,
    assert_ttft_matches_server,
    server_stats,
)

# Gaps wide enough that a loaded box's loopback and event-loop lag (a few to ~10 ms) stays well
# inside the tolerances (half a gap for TTFT, a quarter for ITL), while a miscounted chunk is a
# whole gap off.
TTFT_MS, ITL_MS = 150.0, 60.0
pytestmark = pytest.mark.slow

SCHEDULE = ("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS))


def bench(
    url: str, *, endpoint: Endpoint = "completions", requests: int = 8, warmup: int = 4
) -> CellReport:
    config = BenchmarkConfig(
        url=url, model="reference", endpoint=endpoint, concurrency=[4], requests=requests,
        warmup=warmup, input_len=16, output_len=10,
    )  # fmt: skip
    return asyncio.run(run_benchmark(config)).cells[0]


def assert_on_schedule(cell: CellReport, url: str, tokens_per_chunk: int = 1) -> None:
    """The harness agrees with what the server saw itself do (the tight tolerances against the
    schedule itself are measured by benchmarks/harness_ceiling.py, not asserted here: on a
    shared box other processes may delay the server)."""
    assert_ttft_matches_server(cell.ttft_ms.p50, url, ITL_MS)
    assert_itl_matches_server(cell, url, ITL_MS, tokens_per_chunk)


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_role_only_first_chunk_does_not_start_ttft(
    reference_server: StartServer, endpoint: Endpoint
) -> None:
    url = reference_server(*SCHEDULE, "--quirk", "role-chunk")
    cell = bench(url, endpoint=endpoint)
    assert cell.requests_ok == 8
    assert_on_schedule(cell, url)
    assert cell.itl_ms.count == 8 * 9  # the empty chunk is no token and opens no gap


def test_sse_comments_are_ignored(reference_server: StartServer) -> None:
    url = reference_server(*SCHEDULE, "--quirk", "comments")
    cell = bench(url)
    assert cell.requests_ok == 8
    assert cell.output_tokens == 80
    assert_on_schedule(cell, url)
    assert cell.itl_ms.count == 8 * 9


def test_usage_only_final_chunk_gives_the_count(reference_server: StartServer) -> None:
    cell = bench(reference_server(*SCHEDULE, "--quirk", "usage-only-final"))
    assert cell.requests_ok == 8
    assert cell.output_tokens == 80
    assert cell.requests_without_usage == 0
    assert cell.length_mismatches == 0


def test_without_usage_tokens_are_counted(reference_server: StartServer) -> None:
    cell = bench(reference_server(*SCHEDULE, "--quirk", "no-usage"))
    assert cell.output_tokens == 80
    assert cell.requests_without_usage == 8
    assert cell.length_mismatches == 0


def test_several_tokens_per_chunk_are_counted_exactly(reference_server: StartServer) -> None:
    # First token alone, then 3 per chunk: 1 + 3 + 3 + 3 = 10 tokens in 4 chunks.
    url = reference_server(*SCHEDULE, "--tokens-per-chunk", "3")
    cell = bench(url)
    assert cell.requests_ok == 8
    assert cell.output_tokens == 80
    assert cell.multi_token_chunk_requests == 8
    assert cell.length_mismatches == 0
    assert_on_schedule(cell, url, tokens_per_chunk=3)  # per-token ITL, not 60 ms per chunk
    assert cell.itl_ms.count == 8 * 9
    assert cell.tpot_ms.p50 == pytest.approx(cell.itl_ms.mean, abs=ITL_MS / 4)


def test_multi_token_chunks_without_usage_are_flagged(reference_server: StartServer) -> None:
    cell = bench(reference_server(*SCHEDULE, "--tokens-per-chunk", "3", "--quirk", "no-usage"))
    # Without usage only chunks can be counted: 4 per request, flagged as a length mismatch.
    assert cell.output_tokens == 8 * 4
    assert cell.length_mismatches == 8


def test_http_500s_are_failures_with_reason_and_kept_out(reference_server: StartServer) -> None:
    # Seed 5: the pre-flight request (the first) is not one of the failures.
    url = reference_server(*SCHEDULE, "--error-rate", "0.3", "--seed", "5")
    cell = bench(url, requests=40, warmup=0)  # so every injected failure is in the cell
    injected = server_stats(url)["errors_500"]
    assert 0 < injected < 40
    assert cell.requests_failed == injected
    assert cell.failure_reasons == {"http_error": injected}
    assert cell.requests_ok == 40 - injected
    assert cell.ttft_ms.count == cell.requests_ok
    assert cell.output_tokens == cell.requests_ok * 10
    assert_itl_matches_server(cell, url, ITL_MS)


def test_cut_streams_are_failures(reference_server: StartServer) -> None:
    url = reference_server(*SCHEDULE, "--cut-rate", "0.25", "--seed", "2")  # pre-flight kept
    cell = bench(url, requests=24, warmup=0)
    cut = server_stats(url)["cut"]
    assert 0 < cut < 24
    assert cell.failure_reasons == {"stream_dropped": cut}
    assert cell.requests_ok == 24 - cut
    assert cell.output_tokens == cell.requests_ok * 10
    assert_itl_matches_server(cell, url, ITL_MS)


def test_malformed_sse_stops_the_run_at_the_pre_flight(reference_server: StartServer) -> None:
    with pytest.raises(PreflightError, match=r"\(malformed_sse\): not JSON: '\{not json'"):
        bench(reference_server(*SCHEDULE, "--quirk", "malformed"), requests=4, warmup=0)


def test_unknown_model_stops_the_run_naming_the_served_one(reference_server: StartServer) -> None:
    url = reference_server(*SCHEDULE, "--model", "other")
    with pytest.raises(PreflightError) as caught:
        bench(url, requests=2, warmup=0)
    assert "HTTP 404: model 'reference' does not exist; this server serves 'other'" in str(
        caught.value
    )
    assert "--model 'reference' is not one the server lists ('other')" in str(caught.value)
    assert server_stats(url)["requests"] == 1  # the pre-flight, and nothing after it


def test_chunks_read_together_are_counted(reference_server: StartServer) -> None:
    # Each request's 10 tokens leave the server in one socket write, so they reach the client
    # in one read however fast it reads (separate writes with no gap between them pile up
    # only when the client is slower than the server: 45% of chunks shared a read when a
    # loaded machine let it keep up).
    url = reference_server("--ttft-ms", "20", "--itl-ms", "0", "--coalesce", "10")
    cell = bench(url, requests=4)
    assert cell.requests_ok == 4
    assert cell.shared_read_fraction > 0.5
    assert cell.burst_share == 1.0  # each request's 10 tokens in one write
    assert cell.delivery == "burst"
