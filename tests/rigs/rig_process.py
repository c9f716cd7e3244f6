"""Start a real rig server process for tests and stop it (and its children) afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from rigbench.local.ports import free_port
from tests import loopback

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def rig_server(
    rig: str,
    model: str,
    *,
    cache: Path,
    log: Path,
    timeout_s: float = 120.0,
    settings: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    health_codes: list[int] | None = None,
) -> Iterator[str]:
    """`rigbench rig serve RIG --model MODEL [--set KEY=VALUE ...]` on a free loopback port,
    with `env` added to the environment; yields its base URL. `health_codes`, when given,
    receives every /health status seen while the rig started."""
    port = free_port()
    full_env = {**os.environ, **(env or {}), "RIGBENCH_CACHE": str(cache), "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "rigbench", "rig", "serve", rig, "--model", model]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    for setting in settings:
        argv += ["--set", setting]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            cwd=REPO,
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(proc, base, timeout_s, log, [] if health_codes is None else health_codes)
        yield base
    finally:
        stop_process_group(proc)


def stop_process_group(proc: subprocess.Popen[bytes], grace_s: float = 20.0) -> None:
    """SIGTERM a process started with `start_new_session=True` and its children; SIGKILL
    them after `grace_s`. Nothing to do once it has exited."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _wait_healthy(
    proc: subprocess.Popen[bytes], base: str, timeout_s: float, log: Path, codes: list[int]
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"rig exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            codes.append(loopback.get(f"{base}/health", timeout=2).status_code)
            if codes[-1] == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    raise TimeoutError(f"rig not healthy after {timeout_s} s:\n{log.read_text()[-4000:]}")
