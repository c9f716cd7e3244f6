"""When requests are sent: fixed-concurrency cells, Poisson-rate cells, and warm-up.

A concurrency cell is a closed loop: `c` workers each send their next request as soon as
their previous one ends, until the cell's requests are used up. A rate cell sends requests at
seeded Poisson arrival times; with `max_concurrency` set, a request that arrives while every
slot is busy waits for one. Either way a record's `ready_time` is when the request was due
and `send_time` when it went out, so queueing is reported apart from latency.
Records are appended to the caller's list as requests finish, so an interrupted cell still
leaves every finished request behind.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

import numpy as np

from harness.backend import OpenAIBackend
from harness.metrics import LAG_INTERVAL_S, Stall
from harness.schemas import Arrival, GammaArrival, RequestRecord

MakeRecord = Callable[[int, float], RequestRecord]


async def run_concurrency(
    backend: OpenAIBackend,
    bodies: Sequence[bytes],
    concurrency: int,
    make_record: MakeRecord,
    records: list[RequestRecord],
) -> None:
    """Send every body, at most `concurrency` in flight, each slot refilled at once."""
    pending = iter(enumerate(bodies))

    async def worker() -> None:
        ready = backend.now()
        for index, body in pending:
            record = make_record(index, ready)
            try:
                await backend.generate(body, record)
            finally:
                records.append(record)
            ready = backend.now()

    async with asyncio.TaskGroup() as group:
        for _ in range(min(concurrency, len(bodies))):
            group.create_task(worker())


def poisson_arrivals(count: int, rate: float, seed: int) -> np.ndarray:
    """Arrival offsets in seconds: the first at 0, then exponential gaps of mean 1/rate."""
    return arrivals(count, rate, seed, "poisson")


def arrivals(count: int, rate: float, seed: int, arrival: Arrival) -> np.ndarray:
    """Arrival offsets in seconds, the first at 0, then gaps of mean 1/rate: exponential
    (poisson), equal (constant), or gamma-distributed of the given shape (scale 1/(rate x
    shape), so the mean stays 1/rate; vLLM's --burstiness)."""
    rng = np.random.default_rng(seed)
    if arrival == "poisson":
        gaps = rng.exponential(1.0 / rate, size=count)
    elif arrival == "constant":
        gaps = np.full(count, 1.0 / rate)
    else:
        assert isinstance(arrival, GammaArrival)
        gaps = rng.gamma(arrival.gamma, 1.0 / (rate * arrival.gamma), size=count)
    if count:
        gaps[0] = 0.0
    return np.cumsum(gaps)


async def run_rate(
    backend: OpenAIBackend,
    bodies: Sequence[bytes],
    arrivals: Sequence[float] | np.ndarray,
    make_record: MakeRecord,
    records: list[RequestRecord],
    max_concurrency: int | None = None,
    start: float | None = None,
) -> None:
    """Send body i at `arrivals[i]` seconds after `start` (default: now, on the backend's clock)."""
    slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None

    async def one(index: int, body: bytes, due: float) -> None:
        record = make_record(index, due)
        try:
            if slots is None:
                await backend.generate(body, record)
            else:
                async with slots:
                    await backend.generate(body, record)
        finally:
            if record.end_time is None and record.error is None:  # cancelled in the queue
                record.send_time = record.end_time = backend.now()
                record.error, record.error_detail = "interrupted", "cancelled before sending"
            records.append(record)

    start = backend.now() if start is None else start
    async with asyncio.TaskGroup() as group:
        for index, (body, offset) in enumerate(zip(bodies, arrivals, strict=True)):
            due = start + float(offset)
            delay = due - backend.now()
            if delay > 0:
                await asyncio.sleep(delay)
            group.create_task(one(index, body, due))


class LoopLagMonitor:
    """Samples how late the event loop wakes from a short sleep: the harness's own strain.

    `samples` holds every wake-up's lateness; `stalls` the (due, woke) interval of every late
    one, on the backend's clock (that of the request records): the loop was blocked, or busy
    with other work, for all of that interval, so no socket of this process was read in it.
    """

    def __init__(self, backend: OpenAIBackend, interval_s: float = LAG_INTERVAL_S) -> None:
        self._backend = backend
        self._interval = interval_s
        self.samples: list[float] = []
        self.stalls: list[Stall] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            due = self._backend.now() + self._interval
            await asyncio.sleep(self._interval)
            woke = self._backend.now()
            self.samples.append(max(woke - due, 0.0))
            if woke > due:
                self.stalls.append((due, woke))

    def __enter__(self) -> LoopLagMonitor:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()


async def cancel_on(event: asyncio.Event, work: asyncio.Task[None]) -> bool:
    """Wait for `work`; cancel it if `event` is set first. True when it was cancelled."""
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({work, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if work.done():
        work.result()
        return False
    work.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await work
    return True
