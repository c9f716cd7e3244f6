"""`rigbench bench` against a server that shares no code with the harness.

The server below is a bare asyncio HTTP/1.1 server written for this test: chat completions
only, SSE with CRLF line ends and no space after `data:`, a role-only first chunk, the
body delimited by closing the connection (no chunked encoding, no keep-alive), usage in its
own final chunk, every 4th POST answered 503, and at most 40 tokens per answer. Its token
schedule: first token 80 ms after the request, then one every 25 ms. `GET /observed` gives
the median delay it actually achieved before each first token, so that a run where other
processes on a shared box made it miss its schedule can be told apart and repeated.
Run as a script it serves on a free port and prints the port.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

TTFT_S, ITL_S, MAX_TOKENS = 0.080, 0.025, 40
pytestmark = pytest.mark.slow

FAIL_EVERY = 4


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    state = handle.__dict__.setdefault("state", {"posts": 0, "ttft": []})
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        start = time.monotonic()
        request_line, *header_lines = head.decode().split("\r\n")
        method, path, _ = request_line.split(" ")
        length = 0
        for line in header_lines:
            if line.lower().startswith("content-length:"):
                length = int(line.split(":", 1)[1])
        body = json.loads(await reader.readexactly(length)) if length else {}
        if method == "GET":
            ttfts = sorted(state["ttft"]) or [0.0]
            answer = (
                {"ttft_p50": ttfts[len(ttfts) // 2]}
                if path == "/observed"
                else {"object": "list", "data": [{"id": "indie"}]}
            )
            payload = json.dumps(answer).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\nConnection: close\r\n\r\n%s"
                         % (len(payload), payload))  # fmt: skip
            return
        state["posts"] += 1
        if state["posts"] % FAIL_EVERY == 0 or path != "/v1/chat/completions":
            writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n"
                         b"Connection: close\r\n\r\nbusy")  # fmt: skip
            return
        tokens = min(int(body["max_tokens"]), MAX_TOKENS)
        prompt_words = len(body["messages"][0]["content"].split())
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Connection: close\r\n\r\n")  # fmt: skip
        writer.write(b'data:{"choices":[{"delta":{"role":"assistant"}}]}\r\n\r\n')
        await writer.drain()
        for i in range(tokens):
            await asyncio.sleep(max(0.0, start + TTFT_S + i * ITL_S - time.monotonic()))
            if i == 0:
                state["ttft"].append(time.monotonic() - start)
            chunk = {"choices": [{"index": 0, "delta": {"content": f" w{i}"}}]}
            writer.write(b"data:" + json.dumps(chunk).encode() + b"\r\n\r\n")
            await writer.drain()
        usage = {"prompt_tokens": prompt_words, "completion_tokens": tokens}
        writer.write(b"data:" + json.dumps({"choices": [], "usage": usage}).encode() + b"\r\n\r\n")
        writer.write(b"data:[DONE]\r\n\r\n")
        await writer.drain()
    finally:
        writer.close()


async def main() -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


@contextlib.contextmanager
def indie_server() -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, __file__], stdout=subprocess.PIPE, text=True)
    with contextlib.suppress(OSError):  # as for the reference server: see conftest.py
        os.setpriority(os.PRIO_PROCESS, proc.pid, -10)
    assert proc.stdout is not None
    try:
        yield f"http://127.0.0.1:{proc.stdout.readline().strip()}"
    finally:
        proc.terminate()
        proc.wait(5)


@pytest.fixture
def indie_url() -> Iterator[str]:
    with indie_server() as url:
        yield url


def bench(url: str, out: Path, output_len: int) -> dict:  # type: ignore[type-arg]
    from tests.harness.test_cli import rigbench  # here: the script serves without the CLI

    result = rigbench(
        "--url", url, "--model", "indie", "--endpoint", "chat", "--concurrency", "8",
        "--requests", "24", "--warmup", "2", "--input-len", "20",
        "--output-len", str(output_len), "--out", str(out),
        "--max-failed-share", "0.5",  # it fails one POST in four on purpose
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return dict(json.loads(out.read_text())["cells"][0])


def observed_ttft_ms(url: str) -> float:
    return float(httpx.get(f"{url}/observed").json()["ttft_p50"]) * 1e3


def test_figures_counts_and_failures_match_the_independent_server(
    indie_url: str, tmp_path: Path
) -> None:
    cell = bench(indie_url, tmp_path / "r.json", output_len=12)
    # POST 1 is the pre-flight, 2-3 the warm-up; of POSTs 4..27, those divisible by 4 fail:
    # 6 of 24.
    assert cell["requests_failed"] == 6
    assert cell["requests_ok"] == 18
    assert cell["failure_reasons"] == {"http_error": 6}
    assert cell["first_failure"] == "http_error: HTTP 503: busy"
    assert cell["output_tokens"] == 18 * 12
    assert cell["length_mismatches"] == 0
    assert cell["prompt_length_mismatches"] == 0
    # Against what the server achieved, which a busy shared box may have made late: a first
    # token taken from the role-only chunk would be a whole TTFT early, one taken at the
    # second token a whole gap late; half a gap tells both apart from loopback jitter.
    server_ttft_ms = observed_ttft_ms(indie_url)
    assert server_ttft_ms == pytest.approx(TTFT_S * 1e3, abs=10.0)
    assert cell["ttft_ms"]["p50"] == pytest.approx(server_ttft_ms, abs=ITL_S * 1e3 / 2)
    assert cell["itl_ms"]["p50"] == pytest.approx(ITL_S * 1e3, abs=1.0)
    assert cell["tpot_ms"]["p50"] == pytest.approx(ITL_S * 1e3, abs=1.0)
    assert cell["itl_ms"]["count"] == 18 * 11


def test_a_short_answer_is_flagged_not_hidden(indie_url: str, tmp_path: Path) -> None:
    cell = bench(indie_url, tmp_path / "r.json", output_len=MAX_TOKENS + 5)
    assert cell["requests_ok"] == 18
    assert cell["output_tokens"] == 18 * MAX_TOKENS
    assert cell["length_mismatches"] == 18


if __name__ == "__main__":
    asyncio.run(main())
