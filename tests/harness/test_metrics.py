import itertools

import pytest

from harness.metrics import cell_report, itl_samples, summarize
from harness.schemas import RequestRecord


def record(
    times: list[float],
    *,
    usage: int | None = None,
    error: str | None = None,
    send: float = 0.0,
    ready: float = 0.0,
    output_len: int = 4,
) -> RequestRecord:
    return RequestRecord.model_validate(
        {
            "request_id": 1,
            "cell": 0,
            "input_len": 8,
            "output_len": output_len,
            "ready_time": ready,
            "send_time": send,
            "first_content_time": times[0] if times else None,
            "content_times": times,
            "end_time": (times[-1] + 0.001) if times else send + 0.001,
            "usage_output_tokens": usage,
            "content_chunks": len(times),
            "error": error,
        }
    )


def test_definitions_on_a_known_record() -> None:
    # sent at 1.0, tokens at +0.100, +0.110, +0.120, +0.130; the stream ends 1 ms later.
    cell = cell_report([record([1.1, 1.11, 1.12, 1.13], usage=4, send=1.0, ready=0.99)])
    assert cell.ttft_ms.p50 == pytest.approx(100.0)
    assert cell.itl_ms.p50 == pytest.approx(10.0)
    assert cell.itl_ms.count == 3
    assert cell.e2e_ms.p50 == pytest.approx(131.0)
    assert cell.tpot_ms.p50 == pytest.approx(31.0 / 3)
    assert cell.queue_wait_ms.p50 == pytest.approx(10.0)
    assert cell.output_tokens == 4
    assert cell.length_mismatches == 0


def test_multi_token_chunks_spread_gaps_over_their_tokens() -> None:
    # 1 token, then two chunks of 3 tokens 30 ms apart: 7 tokens, per-token ITL 10 ms.
    r = record([0.1, 0.13, 0.16], usage=7, output_len=7)
    assert list(itl_samples(r)) == pytest.approx([0.01] * 6)
    cell = cell_report([r])
    assert cell.itl_ms.p50 == pytest.approx(10.0)
    assert cell.multi_token_chunk_requests == 1


def test_counted_tokens_without_usage_and_length_mismatch_flagged() -> None:
    cell = cell_report([record([0.1, 0.2, 0.3], usage=None, output_len=4)])
    assert cell.output_tokens == 3
    assert cell.requests_without_usage == 1
    assert cell.length_mismatches == 1


def test_failures_are_counted_by_reason_and_kept_out_of_latency() -> None:
    records = [
        record([0.1, 0.11], usage=2, output_len=2),
        record([], error="http_error"),
        record([5.0, 9.0], error="stream_dropped"),
        record([], error="interrupted"),
    ]
    cell = cell_report(records)
    assert (cell.requests_ok, cell.requests_failed, cell.requests_interrupted) == (1, 2, 1)
    assert cell.failure_reasons == {"http_error": 1, "stream_dropped": 1}
    assert cell.ttft_ms.count == 1
    assert cell.ttft_ms.p99 == pytest.approx(100.0)


def test_no_data_gives_none_not_zero() -> None:
    cell = cell_report([record([], error="timeout")])
    assert cell.ttft_ms.mean is None
    assert cell.itl_ms.p50 is None
    assert cell.ttft_ms.count == 0
    assert summarize([]).p99 is None


def test_chunks_read_together_are_reported() -> None:
    r = record([0.1, 0.12, 0.12, 0.16], usage=4)
    r.shared_read_chunks = 1
    assert cell_report([r]).shared_read_fraction == pytest.approx(0.25)


def streamed(send: float, *, ttft: float = 0.020, gap: float = 0.005, tokens: int = 20,
             ready: float | None = None) -> RequestRecord:  # fmt: skip
    times = [send + ttft + k * gap for k in range(tokens)]
    r = record(times, usage=tokens, send=send, ready=send if ready is None else ready,
               output_len=tokens)  # fmt: skip
    return r


def read_late(r: RequestRecord, every: int) -> RequestRecord:
    """Chunks read in groups of `every`: each takes the stamp of the last of its group."""
    times = r.content_times
    stamped = [times[min((i // every + 1) * every - 1, len(times) - 1)] for i in range(len(times))]
    return restamped(r, stamped)


def restamped(r: RequestRecord, stamped: list[float]) -> RequestRecord:
    """`r` with its chunks read at `stamped`: those sharing a stamp were read together."""
    r.content_times = stamped
    r.first_content_time = stamped[0]
    r.shared_read_chunks = sum(a == b for a, b in itertools.pairwise(stamped))
    r.first_token_shared_read = stamped[0] == stamped[1]
    return r


def test_achieved_concurrency_of_a_closed_loop_that_kept_its_slots() -> None:
    # Four slots, eight requests of 0.115 s back to back: four in flight until the fifth
    # completion, when fewer requests remain than slots.
    records = [streamed(slot * 0.001 + k * 0.116) for slot in range(4) for k in range(2)]
    cell = cell_report(records, concurrency=4)
    assert cell.achieved_concurrency == pytest.approx(4.0, rel=0.05)
    assert cell.load_shortfall is None
    assert cell.achieved_request_rate == pytest.approx(8 / cell.duration_s)


def test_a_closed_loop_whose_requests_left_late_says_it_fell_short() -> None:
    # Eight slots all due at 0, but the client sent them 0.1 s apart: never 8 in flight.
    records = [streamed(0.1 * k, ready=0.0) for k in range(8)]
    cell = cell_report(records, concurrency=8)
    assert cell.achieved_concurrency is not None
    assert cell.achieved_concurrency < 2.0
    assert cell.load_shortfall is not None
    assert "of 8 requests in flight" in cell.load_shortfall


def test_a_rate_cell_whose_sends_fell_behind_says_so() -> None:
    on_time = [streamed(0.5 * k) for k in range(5)]
    assert cell_report(on_time, rate=2.0).load_shortfall is None
    late = [streamed(0.7 * k, ready=0.5 * k) for k in range(5)]
    shortfall = cell_report(late, rate=2.0).load_shortfall
    assert shortfall is not None
    assert "fell short of its rate" in shortfall


def test_clean_reads_leave_every_figure_valid() -> None:
    cell = cell_report([streamed(0.0), streamed(0.01)])
    for validity in (cell.ttft_validity, cell.itl_validity):
        assert (validity.mean, validity.p50, validity.p90, validity.p99) == (True,) * 4
        assert validity.reason is None
    assert cell.first_token_shared_reads == 0
    assert cell.delivery == "streamed"
    assert cell.burst_share == 0.0


def test_chunks_read_in_pairs_invalidate_itl_p50_and_ttft_but_not_the_itl_mean() -> None:
    cell = cell_report([read_late(streamed(0.01 * k), 2) for k in range(10)])
    # Half the gaps read as zero, half as two gaps: the p50 cannot be trusted.
    assert cell.shared_read_fraction == pytest.approx(0.5)
    assert not cell.itl_validity.p50
    assert not cell.itl_validity.p99
    assert cell.itl_validity.mean  # the gaps still sum to the span
    assert cell.itl_ms.mean == pytest.approx(5.0, abs=0.3)
    # Every first token shared its read with the second: TTFT late by one gap (5 ms).
    assert cell.first_token_shared_reads == 10
    assert cell.ttft_ms.p50 == pytest.approx(25.0)
    assert not cell.ttft_validity.p50
    assert cell.ttft_validity.predicted_error_ms.p50 == pytest.approx(5.0, abs=0.1)
    assert cell.ttft_validity.reason is not None
    assert "10 of 10 first tokens" in cell.ttft_validity.reason


def test_a_few_late_reads_spoil_only_the_tail() -> None:
    clean = [streamed(0.01 * k) for k in range(18)]
    cell = cell_report([*clean, read_late(streamed(0.5), 2), read_late(streamed(0.6), 2)])
    assert cell.ttft_validity.p50
    assert cell.itl_validity.p50
    assert not cell.ttft_validity.p99
    assert not cell.itl_validity.p99


def test_back_to_back_chunks_are_burst_delivery() -> None:
    # Eight tokens per device call, written 0.05 ms apart, a call every 40 ms.
    times = [0.02 + (k // 8) * 0.04 + (k % 8) * 0.00005 for k in range(64)]
    cell = cell_report([record(times, usage=64, output_len=64)])
    assert cell.delivery == "burst"
    assert cell.burst_share == pytest.approx(56 / 63)  # 7 of each 8 intervals came together
    assert cell.shared_read_fraction == 0.0


def test_tokens_of_one_chunk_or_one_read_arrived_together() -> None:
    # Four tokens per chunk, a chunk every 5 ms: 3 of each 4 token intervals are 0.
    chunked = record([0.02 + 0.005 * k for k in range(5)], usage=20, output_len=20)
    assert cell_report([chunked]).burst_share == pytest.approx(15 / 19)
    assert cell_report([chunked]).delivery == "burst"
    # Read in threes (by a late client or a server's one write): 2 of each 3 are 0.
    cell = cell_report([read_late(streamed(0.01 * k, tokens=21), 3) for k in range(4)])
    assert cell.burst_share == pytest.approx(14 / 20)
    assert cell.delivery == "burst"
    assert cell_report([streamed(0.0)]).burst_share == 0.0
    assert cell_report([streamed(0.0, tokens=1)]).burst_share is None


def test_the_strain_warning_fires_exactly_when_a_p50_is_invalid() -> None:
    from harness.runner import ceiling_note, strained_figures

    clean = cell_report([streamed(0.01 * k) for k in range(10)], concurrency=10)
    assert strained_figures(clean) == []
    assert not ceiling_note([clean]).startswith("WARNING")
    # Only the tail spoiled: the figures say so, the run-level warning does not fire.
    tail = cell_report(
        [*(streamed(0.01 * k) for k in range(18)), read_late(streamed(0.5), 2)], concurrency=19
    )
    assert not tail.itl_validity.p99
    assert strained_figures(tail) == []
    late = cell_report([read_late(streamed(0.01 * k), 2) for k in range(10)], concurrency=10)
    assert [s.split(" p50")[0] for s in strained_figures(late)] == ["TTFT", "ITL"]
    note = ceiling_note([clean, late])
    assert note.startswith("WARNING")
    assert "c=10: TTFT p50 off by about +5.0 ms" in note
    short = cell_report([streamed(0.1 * k, ready=0.0) for k in range(8)], concurrency=8)
    assert "Load not reached in c=8" in ceiling_note([short])
