"""One cell spread over several client processes, for loads one event loop cannot carry.

Each worker process runs the same load code (`harness.load`) on its share of the cell: a
closed-loop cell's streams and requests are divided among the workers, a rate cell's
arrivals are dealt out in turn (each keeps its absolute due time). Records come back to the
parent, which derives the cell's figures from all of them together. Every process reads
`time.perf_counter` (CLOCK_MONOTONIC, one clock for the whole machine) against the parent's
origin, so their records share one time base, and all shares start at one agreed instant.
Ctrl-C sets a shared event; each worker cancels its share and returns what it has.
No worker outlives its run: workers ignore SIGINT (the parent decides when to stop, and a
terminal's Ctrl-C reaches the whole process group), the pool is shut down in a `finally`,
and on Linux each worker asks the kernel to kill it when its parent dies (PR_SET_PDEATHSIG),
so even a parent killed outright leaves none behind.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import multiprocessing
import multiprocessing.synchronize
import os
import signal
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from harness.backend import OpenAIBackend
from harness.load import LoopLagMonitor, run_concurrency, run_rate
from harness.metrics import Stall
from harness.schemas import Endpoint, RequestRecord

_stop: multiprocessing.synchronize.Event | None = None
_started: multiprocessing.synchronize.Barrier | None = None
# How long a started worker waits for the others to import (a loaded box can take minutes).
_START_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Share:
    """The part of one cell that one worker process sends."""

    url: str
    endpoint: Endpoint
    request_timeout_s: float
    connect_timeout_s: float
    origin: float
    start_at: float
    cell: int
    first_id: int
    bodies: list[bytes]
    input_lens: list[int | None]
    output_lens: list[int]
    headers: dict[str, str]
    concurrency: int | None = None
    arrivals: list[float] | None = None  # offsets from start_at
    max_concurrency: int | None = None


def split(total: int, parts: int) -> list[int]:
    """`total` divided into `parts` counts that differ by at most one."""
    return [total // parts + (i < total % parts) for i in range(parts)]


_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _init(
    stop: multiprocessing.synchronize.Event,
    started: multiprocessing.synchronize.Barrier,
    parent: int,
) -> None:
    global _stop, _started
    _stop = stop
    _started = started
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent)


def _ready() -> None:
    """Wait until every worker has imported everything, before the first cell is timed.

    Each call holds its process at the barrier until all have arrived, so every process of
    the pool takes exactly one call: the pool is whole when `start` returns, and a cell's
    shares then run at once, one per process (a process still importing would otherwise take
    its share late, after the others had finished theirs).
    """
    assert _started is not None
    _started.wait(_START_TIMEOUT_S)


ShareResult = tuple[list[dict[str, Any]], list[float], list[Stall]]


def run_share(share: Share) -> ShareResult:
    """Worker entry point: the share's records (as dicts), its event-loop lag samples and its
    event loop's stalls (`LoopLagMonitor`), on the parent's clock like the records."""
    return asyncio.run(_run_share(share))


async def _run_share(share: Share) -> ShareResult:
    records: list[RequestRecord] = []
    ids = iter(range(share.first_id, share.first_id + len(share.bodies)))

    def make(index: int, ready: float) -> RequestRecord:
        return RequestRecord(
            request_id=next(ids),
            cell=share.cell,
            input_len=share.input_lens[index],
            output_len=share.output_lens[index],
            ready_time=ready,
            send_time=ready,
        )

    async with OpenAIBackend(
        share.url,
        share.endpoint,
        request_timeout_s=share.request_timeout_s,
        connect_timeout_s=share.connect_timeout_s,
        clock_origin=share.origin,
        headers=share.headers,
    ) as backend:
        delay = share.start_at - backend.now()
        if delay > 0:
            await asyncio.sleep(delay)
        if share.arrivals is not None:
            work = run_rate(
                backend, share.bodies, share.arrivals, make, records, share.max_concurrency,
                start=share.start_at,
            )  # fmt: skip
        else:
            assert share.concurrency is not None
            work = run_concurrency(backend, share.bodies, share.concurrency, make, records)
        with LoopLagMonitor(backend) as lag:
            task = asyncio.ensure_future(work)
            while not task.done():
                await asyncio.wait({task}, timeout=0.05)
                if _stop is not None and _stop.is_set() and not task.done():
                    task.cancel()
            if not task.cancelled():
                task.result()
    return [r.model_dump() for r in records], lag.samples, lag.stalls


class WorkerPool:
    """Client processes kept for a whole run (they import once, before any cell)."""

    def __init__(self, processes: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.processes = processes
        self.stop = context.Event()
        self._pool = ProcessPoolExecutor(
            max_workers=processes,
            mp_context=context,
            initializer=_init,
            initargs=(self.stop, context.Barrier(processes), os.getpid()),
        )

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        # The pool spawns a process per submission; with SIGINT ignored meanwhile they are
        # born ignoring it (Python keeps an inherited SIG_IGN), so a Ctrl-C while they still
        # import cannot kill one and break the pool.
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
        try:
            ready = [loop.run_in_executor(self._pool, _ready) for _ in range(self.processes)]
        finally:
            if main:
                signal.signal(signal.SIGINT, previous)
        await asyncio.gather(*ready)

    async def run(
        self, shares: list[Share], stop: asyncio.Event
    ) -> tuple[list[RequestRecord], list[float], list[Stall], bool]:
        """Run the shares at once; records, lag samples, the workers' event-loop stalls
        (all together: a gap they cover is counted as the client's whichever worker read
        it), and whether Ctrl-C cut them short."""
        loop = asyncio.get_running_loop()
        futures = [loop.run_in_executor(self._pool, run_share, s) for s in shares]
        stopper = asyncio.ensure_future(stop.wait())
        done = asyncio.ensure_future(asyncio.gather(*futures))
        either: set[asyncio.Future[Any]] = {done, stopper}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        interrupted = stopper.done()
        if interrupted:
            self.stop.set()
        stopper.cancel()
        results = await done
        records = [RequestRecord.model_validate(r) for rows, _, _ in results for r in rows]
        lag = [x for _, samples, _ in results for x in samples]
        stalls = [x for _, _, stalled in results for x in stalled]
        return records, lag, stalls, interrupted

    def close(self) -> None:
        self.stop.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
