"""Reference servers as real processes on loopback, started per test and always stopped."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.schemas import CellReport
from tests import loopback

ROOT = Path(__file__).resolve().parents[2]

StartServer = Callable[..., str]


def start_reference_server(*args: str) -> tuple[subprocess.Popen[str], str]:
    """Start `python -m harness.reference_server --port 0 ARGS`; return it and its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.reference_server", "--port", "0", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # The reference server is the yardstick: on a busy shared box, let it keep its schedule
    # (it needs little CPU). Set from here, not in a preexec_fn: a fork hook in a process
    # that has imported JAX warns of deadlocks. Without the privilege it runs at normal
    # priority; the interpreter starts its threads after this, so they inherit it.
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, proc.pid, -10)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise RuntimeError(f"reference server did not start: {line}{proc.stdout.read()}")
    return proc, line.rsplit(" ", 1)[1].strip()


@pytest.fixture
def reference_server() -> Iterator[StartServer]:
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> str:
        proc, url = start_reference_server(*args)
        procs.append(proc)
        return url

    yield start
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def server_stats(url: str) -> dict[str, Any]:
    return dict(loopback.get(f"{url}/stats").json())


def assert_ttft_matches_server(harness_p50_ms: float | None, url: str, itl_ms: float) -> float:
    """The harness's TTFT p50 is within half a token gap of the server's own record: a first
    token taken from an empty chunk would be a whole TTFT early, one taken at the second token
    a whole gap late. Returns the server's TTFT p50.

    Not tighter: loopback and the client's event loop, on a loaded shared box, add a few
    milliseconds, and the server's record also holds the warm-up requests the cell leaves out.
    """
    server_ttft = float(server_stats(url)["observed_ttft_ms"]["p50"])
    assert harness_p50_ms == pytest.approx(server_ttft, abs=itl_ms / 2)
    return server_ttft


def assert_itl_matches_server(
    cell: CellReport, url: str, itl_ms: float, tokens_per_chunk: int = 1
) -> None:
    """The harness's per-token gaps agree with the gaps between the server's own writes
    (divided among the tokens a write carried) within a quarter of a gap: a chunk's gap
    counted as one token's would be off by a whole multiple, a token counted twice by half.

    Not against the schedule: on a loaded box the server itself writes late, and a late write
    lengthens one gap and shortens the next, moving both records' p50 alike.
    """
    gaps = server_stats(url)["observed_chunk_gap_ms"]
    tolerance = itl_ms / 4
    assert cell.itl_ms.mean == pytest.approx(gaps["mean"] / tokens_per_chunk, abs=tolerance)
    assert cell.itl_ms.p50 == pytest.approx(gaps["p50"] / tokens_per_chunk, abs=tolerance)
