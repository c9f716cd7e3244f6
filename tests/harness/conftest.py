"""Reference servers as real processes on loopback, started per test and always stopped."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]

StartServer = Callable[..., str]


def _raise_priority() -> None:
    # The reference server is the yardstick: on a busy shared box, let it keep its schedule
    # (it needs little CPU). Without the privilege to do so it runs at normal priority.
    with contextlib.suppress(OSError):
        os.nice(-10)


def start_reference_server(*args: str) -> tuple[subprocess.Popen[str], str]:
    """Start `python -m harness.reference_server --port 0 ARGS`; return it and its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.reference_server", "--port", "0", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_raise_priority,
    )
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
    return dict(httpx.get(f"{url}/stats").json())


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
