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
