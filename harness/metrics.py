"""Figures derived from raw request records, after the run (definitions from DESIGN.md).

- TTFT: send to the first content chunk.
- E2E: send to the end of the stream.
- TPOT: (E2E - TTFT) / (output tokens - 1); undefined for a single token.
- ITL: the gaps between consecutive content chunks, pooled over the cell's requests. When a
  request's chunks carried several tokens (its token count, from usage, exceeds its content
  chunks), each gap is spread evenly over the tokens it delivered: the gaps are scaled by
  (chunks - 1) / (tokens - 1) and each is counted once per token it carried. Their sum
  still spans first to last content chunk, so ITL agrees with TPOT instead of reporting one
  inflated gap per chunk; such requests are counted in `multi_token_chunk_requests`. When
  the server sends no usage, tokens are counted as chunks, so this cannot be seen: the
  count then differs from the requested length and is flagged as a length mismatch.
- Output tokens/s: the successful requests' output tokens over the cell's duration (first
  send to last completion).
Failed requests never enter a latency figure; they are counted by reason. Queue wait (due
time to send time) is summarised apart from every latency.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from harness.schemas import CellReport, MetricSummary, RequestRecord


def summarize(samples_s: Sequence[float] | np.ndarray) -> MetricSummary:
    """mean, p50, p90, p99 of samples in seconds, reported in milliseconds."""
    values = np.asarray(samples_s, dtype=float) * 1e3
    if values.size == 0:
        return MetricSummary()
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return MetricSummary(
        mean=float(values.mean()),
        p50=float(p50),
        p90=float(p90),
        p99=float(p99),
        count=int(values.size),
    )


def itl_samples(record: RequestRecord) -> np.ndarray:
    """Per-token inter-token gaps of one successful request, in seconds."""
    times = np.asarray(record.content_times, dtype=float)
    if times.size < 2:
        return np.empty(0)
    gaps = np.diff(times)
    chunks, tokens = times.size, record.output_tokens
    if tokens > chunks:
        # One sample per token interval: each scaled gap repeated for the tokens it carried
        # (as evenly as integers allow), so pooled percentiles weigh every token once.
        per_gap = np.diff(np.rint(np.linspace(0, tokens - 1, chunks)).astype(int))
        gaps = np.repeat(gaps * ((chunks - 1) / (tokens - 1)), per_gap)
    return gaps


def cell_report(
    records: Sequence[RequestRecord],
    *,
    concurrency: int | None = None,
    rate: float | None = None,
    loop_lag_s: Sequence[float] = (),
    complete: bool = True,
) -> CellReport:
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    failed = [r for r in measured if r.error is not None and r.error != "interrupted"]
    interrupted = sum(r.error == "interrupted" for r in measured)

    ttft, e2e, tpot, itl = [], [], [], []
    for r in ok:
        assert r.first_content_time is not None
        assert r.end_time is not None
        first = r.first_content_time - r.send_time
        total = r.end_time - r.send_time
        ttft.append(first)
        e2e.append(total)
        if r.output_tokens > 1:
            tpot.append((total - first) / (r.output_tokens - 1))
        itl.append(itl_samples(r))

    output_tokens = sum(r.output_tokens for r in ok)
    sent = [r for r in measured if r.error != "interrupted"]
    duration = 0.0
    if sent:
        start = min(r.send_time for r in sent)
        end = max((r.end_time or r.send_time) for r in sent)
        duration = max(end - start, 0.0)

    return CellReport(
        concurrency=concurrency,
        rate=rate,
        requests_ok=len(ok),
        requests_failed=len(failed),
        output_tokens=output_tokens,
        duration_s=duration,
        output_tok_s=output_tokens / duration if duration > 0 else 0.0,
        ttft_ms=summarize(ttft),
        itl_ms=summarize(np.concatenate(itl) if itl else []),
        tpot_ms=summarize(tpot),
        e2e_ms=summarize(e2e),
        queue_wait_ms=summarize([r.queue_wait for r in sent]),
        failure_reasons=dict(Counter(str(r.error) for r in failed)),
        length_mismatches=sum(r.output_tokens != r.output_len for r in ok),
        prompt_length_mismatches=sum(
            r.usage_prompt_tokens is not None and r.usage_prompt_tokens != r.input_len for r in sent
        ),
        requests_without_usage=sum(r.usage_output_tokens is None for r in ok),
        multi_token_chunk_requests=sum(r.output_tokens > r.content_chunks for r in ok),
        requests_interrupted=interrupted,
        shared_read_fraction=(
            sum(r.shared_read_chunks for r in ok) / max(sum(r.content_chunks for r in ok), 1)
        ),
        event_loop_lag_ms=summarize(loop_lag_s),
        complete=complete,
    )
