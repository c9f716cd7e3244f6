"""The capacity search: the highest concurrency or rate at which a server meets an SLO.

A probe is a measured cell at one load; it meets the SLO when at least `slo.percentile`% of
its requests met every target (failed requests never do). The search grows the load (doubling
from the lowest: concurrency 1, or rate max/16) until a probe fails or `max` is reached, then
bisects between the highest probe that met the SLO and the lowest that did not: to one request
for concurrency, to 10% for a rate. A rate search whose first probe fails halves the load, at
most three times. A server with S slots whose excess requests queue has capacity S: one more
request in flight waits a whole request, which a target between the two latencies tells apart.

Every probe is kept as a cell (`CellReport.capacity_probe`); the search stops early, saying
so, when the run's deadline would fall inside the next probe or the run is interrupted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from harness.schemas import SLO, CapacityProbe, CapacityResult, CapacitySearch, CellReport

RATE_START_FRACTION = 1 / 16
RATE_HALVINGS = 3
RATE_RESOLUTION = 1.1  # bisect a rate until the bracket's ends are within 10%
REQUESTS_PER_SLOT = 4  # a concurrency probe sends at least 4 requests per slot
MIN_RATE_REQUESTS = 16
DEADLINE_MARGIN = 1.25  # a probe is guessed to take this much longer than the longest so far

# (index of the cell in the report, the cell) or None when the run was stopped first
Probe = Callable[[float, int], Awaitable[tuple[int, CellReport] | None]]


def probe_requests(search: CapacitySearch, load: float, requests: int) -> int:
    """Requests a probe at `load` sends: at least the run's per-cell count, and for a
    concurrency enough to fill every slot a few times over (steady state, not one wave)."""
    if search.by == "concurrency":
        return max(requests, REQUESTS_PER_SLOT * int(load))
    return max(requests, MIN_RATE_REQUESTS)


def _midpoint(search: CapacitySearch, low: float, high: float) -> float | None:
    """The next load between a met `low` and a missed `high`; None when the bracket is tight."""
    if search.by == "concurrency":
        middle = (int(low) + int(high)) // 2
        return float(middle) if middle > low else None
    if high <= low * RATE_RESOLUTION:
        return None
    return float(f"{(low + high) / 2:.4g}")


async def search_capacity(
    search: CapacitySearch,
    slo: SLO,
    requests: int,
    probe: Probe,
    time_left: Callable[[], float | None],
) -> CapacityResult:
    """Probe loads until the capacity is bracketed, or max, the deadline or a stop ends it.

    `probe(load, requests)` measures one cell; `time_left()` is the seconds to the deadline
    (None: no deadline)."""
    probes: list[CapacityProbe] = []
    cells: dict[float, CellReport] = {}
    longest = 0.0
    ended = "interrupted"

    async def measure(load: float) -> bool | None:
        nonlocal longest, ended
        left = time_left()
        if left is not None and left < longest * DEADLINE_MARGIN:
            ended = "deadline"
            return None
        done = await probe(load, probe_requests(search, load, requests))
        if done is None:
            ended = "interrupted"
            return None
        index, cell = done
        longest = max(longest, cell.duration_s)
        met = bool(cell.meets_slo) and cell.requests_ok > 0
        probes.append(
            CapacityProbe(
                load=load, meets_slo=met, slo_attainment=cell.slo_attainment or 0.0, cell=index
            )
        )
        cells[load] = cell
        return met

    def result(value: float, stopped: str) -> CapacityResult:
        at = cells.get(value)
        return CapacityResult.model_validate(
            {
                "by": search.by,
                "value": value,
                "slo": slo,
                "max": search.max,
                "probes": probes,
                "stopped": stopped,
                "output_tok_s": None if at is None else at.output_tok_s,
                "goodput_req_s": None if at is None else at.goodput_req_s,
            }
        )

    low = 0.0  # the highest load that met the SLO, every lower probe meeting it too
    load = 1.0 if search.by == "concurrency" else search.max * RATE_START_FRACTION
    load = min(load, search.max)
    halvings = 0
    while True:  # grow (or, for a rate that starts too high, shrink) to a bracket
        met = await measure(load)
        if met is None:
            return result(low, ended)
        if met:
            low = load
            if load >= search.max:
                return result(low, "max")
            load = min(load * 2, search.max)
            continue
        high = load
        if low == 0 and search.by == "rate" and halvings < RATE_HALVINGS:
            halvings += 1
            load = float(f"{load / 2:.4g}")
            continue
        break
    if low == 0:
        return result(0.0, "floor")
    while (middle := _midpoint(search, low, high)) is not None:
        met = await measure(middle)
        if met is None:
            return result(low, ended)
        if met:
            low = middle
        else:
            high = middle
    return result(low, "bracketed")


def capacity_line(result: CapacityResult) -> str:
    """The answer in one plain line: 'capacity: 4 users at once within the SLO (TTFT <= 500
    ms, for 90% of requests); 812 output tok/s there'."""
    unit = "users at once" if result.by == "concurrency" else "requests/s"
    value = f"{result.value:g}"
    within = f"within the SLO ({result.slo.words()}, for {result.slo.percentile:g}% of requests)"
    if result.value == 0 and result.stopped == "floor":
        lowest = "concurrency 1" if result.by == "concurrency" else "the lowest rate probed"
        return f"capacity: none: even {lowest} missed the SLO ({result.slo.words()})"
    if result.value == 0:
        return f"capacity: unknown: the {result.stopped} came before any probe met the SLO"
    tok_s = result.output_tok_s
    there = "" if tok_s is None else f"; {tok_s:,.0f} output tok/s there"
    bound = {
        "max": f" (the most probed: every load up to max {result.max:g} met it)",
        "deadline": " (the deadline stopped the search: at least this)",
        "interrupted": " (interrupted: at least this)",
    }.get(result.stopped, "")
    return f"capacity: {value} {unit} {within}{there}{bound}"
