"""A flood of long streams against a rig with its defaults: what is refused, how fast, whether
/health keeps answering, and how soon a normal request is served once the flood is gone.

    PYTHONPATH=$PWD python -m benchmarks.rig_flood [--rig torch] [--streams 2000]

Starts `rigbench rig serve RIG --model random:tiny` (the rig's defaults: for torch 32
continuous slots and 1,024 waiting) on a loopback port, then opens `--streams` streaming
completions of `--max-tokens` tokens at once, each on its own connection, while a probe asks
/health every 0.2 s. Prints, from this client's clock: how many streams were admitted (200)
and refused (503, with Retry-After or not), the slowest refusal (request sent to status line),
the slowest /health during the flood, then, after every stream is closed, the time until a
normal 2-token completion succeeds. The rig's own bound decides the split: admitted = slots +
max_waiting when the flood outnumbers it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Flood:
    admitted: int = 0
    refused: int = 0
    refused_with_retry_after: int = 0
    other: dict[int, int] = field(default_factory=dict)
    refusal_s: list[float] = field(default_factory=list)
    health_s: list[float] = field(default_factory=list)
    health_failures: int = 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_rig(rig: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "rigbench", "rig", "serve", rig, "--model", "random:tiny"]
    argv += ["--port", str(port)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with log.open("wb") as out:
        return subprocess.Popen(
            argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def wait_healthy(proc: subprocess.Popen[bytes], base: str, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the rig exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"the rig was not healthy within {timeout_s:g} s:\n{log.read_text()[-3000:]}")


def request_bytes(port: int, body: dict[str, object]) -> bytes:
    payload = json.dumps(body).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


async def one_stream(port: int, payload: bytes, flood: Flood, hold: asyncio.Event) -> None:
    """Send one long stream; an admitted one is read until `hold` is set, then closed."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        sent = time.perf_counter()
        writer.write(payload)
        await writer.drain()
        status_line = await reader.readline()
        status = int(status_line.split()[1])
        headers = (await reader.readuntil(b"\r\n\r\n")).lower()
        if status == 200:
            flood.admitted += 1
            drain = asyncio.ensure_future(_drain(reader))
            await hold.wait()
            drain.cancel()
        elif status == 503:
            flood.refused += 1
            flood.refusal_s.append(time.perf_counter() - sent)
            flood.refused_with_retry_after += b"retry-after:" in headers
        else:
            flood.other[status] = flood.other.get(status, 0) + 1
    finally:
        writer.close()


async def _drain(reader: asyncio.StreamReader) -> None:
    while await reader.read(65536):
        pass


async def probe_health(base: str, flood: Flood, stop: asyncio.Event) -> None:
    async with httpx.AsyncClient(timeout=30) as client:
        while not stop.is_set():
            start = time.perf_counter()
            try:
                ok = (await client.get(f"{base}/health")).status_code == 200
            except httpx.HTTPError:
                ok = False
            flood.health_s.append(time.perf_counter() - start)
            flood.health_failures += not ok
            await asyncio.sleep(0.2)


async def run(port: int, streams: int, max_tokens: int, settle_s: float) -> tuple[Flood, float]:
    base = f"http://127.0.0.1:{port}"
    long = {
        "prompt": "flood " * 8, "max_tokens": max_tokens, "min_tokens": max_tokens,
        "ignore_eos": True, "stream": True,
    }  # fmt: skip
    flood, hold, stop = Flood(), asyncio.Event(), asyncio.Event()
    probe = asyncio.create_task(probe_health(base, flood, stop))
    payload = request_bytes(port, long)
    tasks = [asyncio.create_task(one_stream(port, payload, flood, hold)) for _ in range(streams)]
    deadline = time.perf_counter() + settle_s
    while flood.admitted + flood.refused + sum(flood.other.values()) < streams:
        if time.perf_counter() > deadline:
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(2.0)  # /health probed with the admitted streams still generating
    hold.set()
    cancelled = time.perf_counter()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    stop.set()
    await probe
    async with httpx.AsyncClient(timeout=60) as client:
        while True:
            reply = await client.post(
                f"{base}/v1/completions", json={"prompt": "hi", "max_tokens": 2}
            )
            if reply.status_code == 200:
                break
            await asyncio.sleep(0.05)
    return flood, time.perf_counter() - cancelled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rig", default="torch")
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--max-tokens", type=int, default=900)
    parser.add_argument("--settle-s", type=float, default=120.0)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * args.streams)), hard))
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "rig.log"
        proc = start_rig(args.rig, port, log)
        try:
            wait_healthy(proc, f"http://127.0.0.1:{port}", log, 600)
            flood, recovery_s = asyncio.run(run(port, args.streams, args.max_tokens, args.settle_s))
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
    refusals = sorted(flood.refusal_s)
    print(f"rig {args.rig} on random:tiny, its defaults; {args.streams} streams of "
          f"{args.max_tokens} tokens at once")  # fmt: skip
    other = flood.other or "none"
    print(f"admitted (200): {flood.admitted}; refused (503): {flood.refused}, "
          f"{flood.refused_with_retry_after} with Retry-After; other: {other}")  # fmt: skip
    if refusals:
        print(f"refusal, request sent to status line: median {refusals[len(refusals) // 2]:.3f} s, "
              f"slowest {refusals[-1]:.3f} s")  # fmt: skip
    print(f"/health during the flood: {len(flood.health_s)} probes, {flood.health_failures} not "
          f"200, slowest {max(flood.health_s, default=float('nan')):.3f} s")  # fmt: skip
    print(f"flood cancelled -> a 2-token completion succeeded: {recovery_s:.2f} s")


if __name__ == "__main__":
    main()
