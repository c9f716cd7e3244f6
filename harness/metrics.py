"""Figures derived from raw request records, after the run (definitions: docs/design.md).

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

What was really measured, beside what was asked for:
- Achieved concurrency: requests in flight (send to completion), averaged over time; a cell
  under 95% of its nominal load, or a rate cell whose sends fell over 5% behind their
  schedule, says so in words (`load_shortfall`), and the comparison marks the cell.
- Validity: chunks the client read late, together with a later one, share the later one's
  kernel stamp: a first token read with k more chunks makes TTFT late by k gaps; within
  ITL, k chunks read together turn k gaps into zeros and the gap before them into k + 1
  gaps. Each figure is computed again with every such group spread evenly over the gap
  that ends in its stamp (`spread_times`); the difference is the figure's predicted error.
  Where it exceeds the tolerance (TTFT 2 ms, ITL 0.5 ms), the client's own event-loop lag
  says who bunched the chunks (`attribute`): its stalls of a token gap or more, the gap
  taken between reads that its stalls do not explain (`token_gap`). Either the client, and
  the figure is marked invalid; or the server or network (Nagle's algorithm, several
  tokens per write), and the figure stands as measured, with the cause.
- Delivery: the share of token intervals under 0.2 ms (`burst_share`: tokens that arrived
  together, in one chunk, one read or back-to-back writes); "burst" when it is over half. ITL
  then describes the groups, and the comparison gives no ITL verdict in that cell.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from harness.schemas import (
    SLO,
    CellReport,
    MetricSummary,
    MetricValidity,
    RequestRecord,
)

TTFT_TOLERANCE_MS = 2.0
ITL_TOLERANCE_MS = 0.5
BURST_GAP_S = 0.0002  # token intervals shorter than this arrived together
BURST_SHARE = 0.5  # a cell whose share of such intervals is above this was delivered in bursts
SHORTFALL = 0.95  # achieved / nominal load under which a cell says it fell short
LAG_INTERVAL_S = 0.01  # the lag monitor's sleep (harness.load.LoopLagMonitor)
# Shorter stalls than this are the event loop's timer granularity (epoll waits in whole ms).
STALL_FLOOR_S = 0.001
CLIENT_SHARE = 0.25  # stalled share / bunched share at which the client is named
# A gap between separate reads that the client's known stalls cover for this share or more
# is the client's own doing, and is left out of the estimate of the token gap (`validity`).
STALL_COVER = 0.5

Stall = tuple[float, float]  # (due, woke): an interval the client's event loop was blocked


def percentile_key(q: float) -> str:
    """The key of percentile `q` in MetricSummary.percentiles: p95, p99.9."""
    return f"p{q:g}"


def summarize(
    samples_s: Sequence[float] | np.ndarray, percentiles: Sequence[float] = ()
) -> MetricSummary:
    """mean, p50, p90, p99 (and `percentiles`) of samples in seconds, reported in ms."""
    values = np.asarray(samples_s, dtype=float) * 1e3
    if values.size == 0:
        return MetricSummary()
    percentiles = [q for q in percentiles if q not in (50, 90, 99)]  # fields of their own
    p50, p90, p99, *extra = np.percentile(values, [50, 90, 99, *percentiles])
    return MetricSummary(
        mean=float(values.mean()),
        p50=float(p50),
        p90=float(p90),
        p99=float(p99),
        count=int(values.size),
        percentiles={percentile_key(q): float(v) for q, v in zip(percentiles, extra, strict=True)},
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


def in_flight(records: Sequence[RequestRecord], start: float, end: float) -> float:
    """Time-weighted mean of requests in flight (send to end) over [start, end]."""
    if end <= start:
        return 0.0
    busy = sum(
        max(min(r.end_time, end) - max(r.send_time, start), 0.0)
        for r in records
        if r.end_time is not None
    )
    return busy / (end - start)


def achieved_concurrency(
    sent: Sequence[RequestRecord], concurrency: int | None
) -> tuple[float | None, int | None]:
    """(achieved, nominal) requests in flight; see CellReport.achieved_concurrency.

    A closed loop should hold min(concurrency, requests) in flight from the moment its first
    request was due until fewer requests remain than slots: that is, until the completion
    numbered requests - nominal + 1. A rate cell has no nominal figure.
    """
    ended = sorted(r.end_time for r in sent if r.end_time is not None)
    if not ended:
        return None, None
    if concurrency is None:
        return in_flight(sent, min(r.send_time for r in sent), ended[-1]), None
    nominal = min(concurrency, len(sent))
    start = min(r.ready_time for r in sent)
    end = ended[min(len(sent) - nominal, len(ended) - 1)]
    if end <= start:
        return None, nominal
    return in_flight(sent, start, end), nominal


def load_shortfall(
    sent: Sequence[RequestRecord],
    achieved: float | None,
    nominal: int | None,
    queue_wait_p50_ms: float | None,
) -> str | None:
    """In words, how the cell fell short of its nominal load; None when it did not."""
    if nominal is not None and achieved is not None and achieved < SHORTFALL * nominal:
        return (
            f"fell short of its load: {achieved:.1f} of {nominal} requests in flight on average "
            f"({100 * achieved / nominal:.0f}%); requests waited {queue_wait_p50_ms or 0:.1f} ms "
            "(p50) for the client before they left, so the server saw a lighter load"
        )
    if nominal is None and len(sent) >= 2:
        due = max(r.ready_time for r in sent) - min(r.ready_time for r in sent)
        went = max(r.send_time for r in sent) - min(r.send_time for r in sent)
        if due > 0 and went > due / SHORTFALL:
            return (
                f"fell short of its rate: requests due over {due:.2f} s left over {went:.2f} s "
                f"({100 * due / went:.0f}% of the rate; queue wait p50 "
                f"{queue_wait_p50_ms or 0:.1f} ms)"
            )
    return None


def spread_times(times: Sequence[float] | np.ndarray) -> np.ndarray:
    """Content times as they would have been stamped had every chunk been read on its own.

    Chunks read together share the stamp of the last; here each group is spread evenly
    over the gap that ends in that stamp. A group that holds the first chunk has no such
    gap: it is spread backwards at the request's mean gap between separate reads.
    """
    t = np.asarray(times, dtype=float)
    if t.size < 2:
        return t.copy()
    out = t.copy()
    distinct = np.flatnonzero(np.diff(t) != 0) + 1  # the first chunk of every read
    starts = np.concatenate(([0], distinct))
    ends = np.concatenate((distinct, [t.size]))
    span = t[-1] - t[ends[0] - 1]
    mean_gap = span / max(t.size - ends[0], 1)
    for first, stop in zip(starts, ends, strict=True):
        size = stop - first
        if size == 1:
            continue
        stamp = t[stop - 1]
        if first == 0:
            out[first:stop] = stamp - mean_gap * np.arange(size - 1, -1, -1)
        else:
            step = (stamp - t[first - 1]) / size
            out[first:stop] = t[first - 1] + step * np.arange(1, size + 1)
    return out


def _validity(
    measured: MetricSummary, spread: MetricSummary, tolerance_ms: float
) -> MetricValidity:
    figures = {f: getattr(measured, f) for f in ("mean", "p50", "p90", "p99")}
    figures.update(measured.percentiles)
    truths = {f: getattr(spread, f) for f in ("mean", "p50", "p90", "p99")}
    truths.update(spread.percentiles)
    errors = {
        f: None if m is None or truths.get(f) is None else m - truths[f] for f, m in figures.items()
    }
    checks = {f: e is None or abs(e) <= tolerance_ms for f, e in errors.items()}
    extra = set(measured.percentiles)
    return MetricValidity(
        **{f: ok for f, ok in checks.items() if f not in extra},
        percentiles={f: ok for f, ok in checks.items() if f in extra},
        predicted_error_ms=MetricSummary(
            **{f: e for f, e in errors.items() if f not in extra},
            count=measured.count,
            percentiles={f: e for f, e in errors.items() if f in extra and e is not None},
        ),
    )


def stalled_share(lag_s: Sequence[float], at_least_s: float) -> float | None:
    """Share of the cell's time the client's event loop spent in stalls of `at_least_s` or
    more, from the lag monitor's samples (each a sleep of LAG_INTERVAL_S that overran by the
    sample); None without samples."""
    lag = np.asarray(lag_s, dtype=float)
    if lag.size == 0:
        return None
    total = lag.size * LAG_INTERVAL_S + float(lag.sum())
    return float(lag[lag >= at_least_s].sum()) / total


def stall_cover(starts: np.ndarray, ends: np.ndarray, stalls: Sequence[Stall]) -> np.ndarray:
    """How much of each interval [starts[i], ends[i]] the stalls cover, in seconds.

    Stalls may overlap (several client processes each report their own): their union counts.
    """
    starts = np.asarray(starts, dtype=float)
    ends = np.asarray(ends, dtype=float)
    if not len(stalls) or starts.size == 0:
        return np.zeros(starts.size)
    windows = np.asarray(stalls, dtype=float).reshape(-1, 2)
    windows = windows[np.argsort(windows[:, 0], kind="stable")]
    # Merge overlapping windows: a window opens a new run where it starts after every
    # earlier one has ended.
    reach = np.maximum.accumulate(windows[:, 1])
    opens = np.concatenate(([True], windows[1:, 0] > reach[:-1]))
    run_start = windows[opens, 0]
    run_end = np.maximum.reduceat(windows[:, 1], np.flatnonzero(opens))
    before = np.concatenate(([0.0], np.cumsum(run_end - run_start)))  # stalled before run k

    def stalled_by(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(run_start, t, side="right") - 1
        inside = np.clip(t - run_start[k], 0.0, run_end[k] - run_start[k])
        return np.where(k >= 0, before[np.maximum(k, 0)] + inside, 0.0)

    return np.maximum(stalled_by(ends) - stalled_by(starts), 0.0)


def _share(part: int, whole: int, what: str) -> str:
    """`3 of 800 chunks (0.4%)`."""
    return f"{part} of {whole} {what} ({_percent(part / max(whole, 1))})"


def _percent(fraction: float) -> str:
    """Never a share that rounds to 0% or 100% when it is not (below 0.05%: "under 0.1%")."""
    percent = 100 * fraction
    if 0 < percent < 0.05:
        return "under 0.1%"
    digits = 1 if 0 < percent < 1 or 99 < percent < 100 else 0
    return f"{percent:.{digits}f}%"


def attribute(
    figure: MetricValidity, what: str, bunched: int, total: int, lag_s: Sequence[float],
    pace_s: float,
) -> MetricValidity:  # fmt: skip
    """Say who bunched the chunks behind a figure that bunching moved past its tolerance.

    The client can only have bunched a chunk by stalling from its arrival until the next
    chunk's, so the share of chunks it bunched cannot exceed the share of time it spent in
    stalls of a token gap or more (`pace_s`, at least STALL_FLOOR_S: the gap between reads
    that the client's own stalls do not explain, from `token_gap`). The lag monitor sees
    only the part of a stall past one of its wake-ups, so the client is named when its
    measured stalls reach a quarter of the bunched share; below that, the server or the
    network delivered the chunks together and the figure stands as measured. Without lag
    samples nothing is known of the client, and it is named (the old, cautious reading).
    """
    checks = [figure.mean, figure.p50, figure.p90, figure.p99, *figure.percentiles.values()]
    if all(checks):
        return figure
    gap_s = max(pace_s, STALL_FLOOR_S)
    stalled = stalled_share(lag_s, gap_s)
    bunched_part = _share(bunched, total, what)
    if stalled is None or stalled >= CLIENT_SHARE * bunched / max(total, 1):
        seen = "" if stalled is None else (
            f" while its event loop was stalled by a token gap ({1e3 * gap_s:.1f} ms) or more "
            f"for {100 * stalled:.0f}% of the cell"
        )  # fmt: skip
        return figure.model_copy(update={
            "cause": "client",
            "reason": f"the client read {bunched_part} late, together with a later "
            f"one{seen}, so they share its arrival time",
        })  # fmt: skip
    return figure.model_copy(update={
        "mean": True, "p50": True, "p90": True, "p99": True,
        "percentiles": dict.fromkeys(figure.percentiles, True),
        "cause": "server_or_network",
        "reason": f"{bunched_part} arrived together with a later one while the "
        f"client's event loop was stalled by a token gap ({1e3 * gap_s:.1f} ms) or more for "
        f"only {_percent(stalled)} of the cell: the server or network delivered these tokens "
        "together, and the figure is as measured (what the server's users see)",
    })  # fmt: skip


def token_gap(ok: Sequence[RequestRecord], loop_stalls: Sequence[Stall] = ()) -> float:
    """The gap at which tokens reached the client.

    The estimate is the median gap between a request's separate socket reads, over the gaps
    the client's own known stalls (`loop_stalls`) cover for less than STALL_COVER: a client
    stalled longer than the server's token gap reads once per stall, so its gaps between
    reads are its stalls' length, and counting them would make its stalls look no longer
    than the gap and excuse them (`attribute`). A server that writes in bursts (Nagle's
    algorithm, several tokens per write) keeps its long gaps: no stall of the client covers
    them. When stalls cover every gap, the estimate is 0 (the client named at STALL_FLOOR_S).
    Without stall intervals every gap counts.
    """
    kept = []
    for r in ok:
        times = np.asarray(r.content_times, dtype=float)
        if times.size < 2:
            continue
        apart = np.flatnonzero(np.diff(times) > 0)
        starts, ends = times[apart], times[apart + 1]
        gaps = ends - starts
        kept.append(gaps[stall_cover(starts, ends, loop_stalls) < STALL_COVER * gaps])
    pace = np.concatenate(kept) if kept else np.empty(0)
    return float(np.median(pace)) if pace.size else 0.0


def validity(
    ok: Sequence[RequestRecord],
    loop_lag_s: Sequence[float] = (),
    percentiles: Sequence[float] = (),
    loop_stalls: Sequence[Stall] = (),
) -> tuple[MetricValidity, MetricValidity]:
    """TTFT and ITL validity from the chunks read together.

    The predicted error of a figure is the figure as measured minus the same figure over
    the records with every group of chunks read together spread out (`spread_times`); who
    bunched them is decided from the client's own event-loop lag (`attribute`), against
    the token gap that the client's own stalls do not explain (`token_gap`).
    """
    ttft, ttft_spread, itl, itl_spread = [], [], [], []
    for r in ok:
        times = np.asarray(r.content_times, dtype=float)
        if times.size == 0:
            continue
        spread = spread_times(times) if r.shared_read_chunks else times
        ttft.append(times[0] - r.send_time)
        ttft_spread.append(spread[0] - r.send_time)
        itl.append(itl_samples(r))
        itl_spread.append(itl_samples(r.model_copy(update={"content_times": spread.tolist()})))
    pace = token_gap(ok, loop_stalls)
    ttft_validity = attribute(
        _validity(summarize(ttft, percentiles), summarize(ttft_spread, percentiles),
                  TTFT_TOLERANCE_MS),
        "first tokens", sum(r.first_token_shared_read for r in ok), len(ok), loop_lag_s, pace,
    )  # fmt: skip
    itl_validity = attribute(
        _validity(
            summarize(np.concatenate(itl) if itl else [], percentiles),
            summarize(np.concatenate(itl_spread) if itl_spread else [], percentiles),
            ITL_TOLERANCE_MS,
        ),
        "chunks", sum(r.shared_read_chunks for r in ok), sum(r.content_chunks for r in ok),
        loop_lag_s, pace,
    )  # fmt: skip
    return ttft_validity, itl_validity


def burst_share(ok: Sequence[RequestRecord]) -> float | None:
    """The share of token intervals under BURST_GAP_S, pooled over successful requests: the
    k tokens of one chunk are k - 1 intervals of 0, then every gap between chunks counts once
    (None without two tokens in any request)."""
    together = intervals = 0
    for r in ok:
        if r.output_tokens < 2 or not r.content_times:
            continue
        apart = int(np.count_nonzero(np.diff(np.asarray(r.content_times)) >= BURST_GAP_S))
        intervals += r.output_tokens - 1
        together += max(r.output_tokens - 1 - apart, 0)
    return together / intervals if intervals else None


def slo_met(ttft_s: float, tpot_s: float | None, e2e_s: float, slo: SLO) -> bool:
    """Whether one successful request met every target (a one-token request has no TPOT)."""
    return (
        (slo.ttft_ms is None or ttft_s * 1e3 <= slo.ttft_ms)
        and (slo.tpot_ms is None or tpot_s is None or tpot_s * 1e3 <= slo.tpot_ms)
        and (slo.e2e_ms is None or e2e_s * 1e3 <= slo.e2e_ms)
    )


def cell_report(
    records: Sequence[RequestRecord],
    *,
    concurrency: int | None = None,
    rate: float | None = None,
    loop_lag_s: Sequence[float] = (),
    loop_stalls: Sequence[Stall] = (),
    complete: bool = True,
    slo: SLO | None = None,
    percentiles: Sequence[float] = (),
    capacity_probe: bool = False,
) -> CellReport:
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok]
    failed = [r for r in measured if r.error is not None and r.error != "interrupted"]
    interrupted = sum(r.error == "interrupted" for r in measured)

    ttft, e2e, tpot, itl = [], [], [], []
    good = 0
    for r in ok:
        assert r.first_content_time is not None
        assert r.end_time is not None
        first = r.first_content_time - r.send_time
        total = r.end_time - r.send_time
        ttft.append(first)
        e2e.append(total)
        per_token = (total - first) / (r.output_tokens - 1) if r.output_tokens > 1 else None
        if per_token is not None:
            tpot.append(per_token)
        itl.append(itl_samples(r))
        good += slo is not None and slo_met(first, per_token, total, slo)

    output_tokens = sum(r.output_tokens for r in ok)
    sent = [r for r in measured if r.error != "interrupted"]
    duration = 0.0
    if sent:
        start = min(r.send_time for r in sent)
        end = max((r.end_time or r.send_time) for r in sent)
        duration = max(end - start, 0.0)

    queue_wait = summarize([r.queue_wait for r in sent], percentiles)
    achieved, nominal = achieved_concurrency(sent, concurrency)
    ttft_validity, itl_validity = validity(ok, loop_lag_s, percentiles, loop_stalls)
    together = burst_share(ok)
    first_failed = min(failed, key=lambda r: r.send_time, default=None)
    tried = len(ok) + len(failed)
    attainment = None if slo is None or not tried else good / tried
    return CellReport(
        concurrency=concurrency,
        rate=rate,
        requests_ok=len(ok),
        requests_failed=len(failed),
        output_tokens=output_tokens,
        duration_s=duration,
        output_tok_s=output_tokens / duration if duration > 0 else 0.0,
        ttft_ms=summarize(ttft, percentiles),
        itl_ms=summarize(np.concatenate(itl) if itl else [], percentiles),
        tpot_ms=summarize(tpot, percentiles),
        e2e_ms=summarize(e2e, percentiles),
        queue_wait_ms=queue_wait,
        failure_reasons=dict(Counter(str(r.error) for r in failed)),
        first_failure=(
            None if first_failed is None else f"{first_failed.error}: {first_failed.error_detail}"
        ),
        goodput_req_s=None if slo is None else (good / duration if duration > 0 else 0.0),
        slo_met=None if slo is None else good,
        slo_attainment=attainment,
        meets_slo=None if slo is None or attainment is None else 100 * attainment >= slo.percentile,
        length_mismatches=sum(r.output_tokens != r.output_len for r in ok),
        prompt_length_mismatches=sum(
            r.input_len is not None
            and r.usage_prompt_tokens is not None
            and r.usage_prompt_tokens != r.input_len
            for r in sent
        ),
        requests_without_usage=sum(r.usage_output_tokens is None for r in ok),
        multi_token_chunk_requests=sum(r.output_tokens > r.content_chunks for r in ok),
        requests_interrupted=interrupted,
        shared_read_fraction=(
            sum(r.shared_read_chunks for r in ok) / max(sum(r.content_chunks for r in ok), 1)
        ),
        event_loop_lag_ms=summarize(loop_lag_s),
        complete=complete,
        achieved_concurrency=achieved,
        achieved_request_rate=len(sent) / duration if duration > 0 else None,
        load_shortfall=load_shortfall(sent, achieved, nominal, queue_wait.p50),
        first_token_shared_reads=sum(r.first_token_shared_read for r in ok),
        ttft_validity=ttft_validity,
        itl_validity=itl_validity,
        burst_share=together,
        delivery="burst" if together is not None and together > BURST_SHARE else "streamed",
        capacity_probe=capacity_probe,
    )
