"""An OpenAI-compatible streaming server with an exact, known token schedule, and quirks.

Token k of a response (0-based) is due `ttft_ms + k * itl_ms` after the request's last bytes
reached the server's socket (the kernel's receive timestamp, so a busy server still anchors
the schedule right), on absolute deadlines so lateness never accumulates. It serves
`/v1/completions` and `/v1/chat/completions` (streaming and not), `/v1/models`, `/health`, and
`/stats`: its counters (so tests can check a client's failure counts against what was
injected) and its own record of the schedule it kept (observed_ttft_ms: arrival to first
token write; observed_chunk_gap_ms: between content writes; token_slip_ms: writes versus due
times), so a measurement can be judged against what the server really did.

Quirks that real servers show, each switchable:
  role-chunk        a role-only (chat) or empty-text (completions) chunk right at the start
  comments          SSE comment keep-alives at the start and halfway between tokens
  usage-only-final  usage in its own final chunk with `choices: []` (else on the last chunk)
  no-usage          no usage chunk even when asked for
  malformed         a data line that is not JSON after the first token
  no-stream         `stream: true` ignored: one JSON body, as a non-streaming server answers
  --tokens-per-chunk K   after the first token, tokens are flushed K per chunk
  --coalesce N      the first N tokens leave in one socket write, when the Nth is due (each
                    its own SSE event), as a server that buffers its writes delivers them
  --nagle           Nagle's algorithm left on (no TCP_NODELAY), as Python's stdlib servers do
  --api-key KEY     every /v1/ request must carry `Authorization: Bearer KEY` (else 401)
One request can ask for more quirks with the header `X-Reference-Quirks: no-stream,...`, and
for an error with `X-Reference-Status: 500`, so one server can play several broken ones.
  --error-rate F    a seeded fraction F of requests answered HTTP 500
  --cut-rate F      a seeded fraction F of streams cut (connection aborted) half-way
  --slots S         at most S generations at once; a request beyond them waits for a slot and
                    its schedule starts when it gets one (a server of known capacity S)
Output length honours max_tokens, min_tokens and ignore_eos: with `--eos-after N`, a request
without ignore_eos stops after max(N, min_tokens) tokens, as a model meeting EOS would.

It is a raw asyncio HTTP/1.1 server on non-blocking sockets rather than Starlette on uvicorn:
it must stay far cheaper per token than the client it measures (the harness's ceiling is
measured against it), and it needs `recvmsg` for the kernel's arrival timestamps.
Several processes can share one port (`--workers`, SO_REUSEPORT); /stats is per process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import random
import signal
import socket
import struct
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

QUIRKS = ("role-chunk", "comments", "usage-only-final", "no-usage", "malformed", "no-stream")
TOKEN_TEXT = " tok"
_WAKE_BIAS_S = 0.0005


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, code: str = "invalid_request_error"):
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(frozen=True)
class ServerConfig:
    model: str = "reference"
    ttft_ms: float = 50.0
    itl_ms: float = 10.0
    quirks: frozenset[str] = field(default_factory=frozenset)
    tokens_per_chunk: int = 1
    error_rate: float = 0.0
    cut_rate: float = 0.0
    eos_after: int | None = None
    seed: int = 0
    coalesce: int = 1
    nagle: bool = False
    api_key: str | None = None
    slots: int | None = None

    def __post_init__(self) -> None:
        unknown = set(self.quirks) - set(QUIRKS)
        if unknown:
            raise ValueError(f"unknown quirk(s) {sorted(unknown)}; known: {', '.join(QUIRKS)}")
        if self.ttft_ms < 0 or self.itl_ms < 0:
            raise ValueError("ttft_ms and itl_ms must be >= 0")
        if self.tokens_per_chunk < 1 or self.coalesce < 1:
            raise ValueError("tokens_per_chunk and coalesce must be >= 1")
        if not (0 <= self.error_rate <= 1 and 0 <= self.cut_rate <= 1):
            raise ValueError("error_rate and cut_rate must be within [0, 1]")
        if self.slots is not None and self.slots < 1:
            raise ValueError("slots must be >= 1")


@dataclass(frozen=True)
class _Generation:
    chat: bool
    stream: bool
    tokens: int
    prompt_tokens: int
    include_usage: bool


_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            405: "Method Not Allowed", 500: "Internal Server Error"}  # fmt: skip


def _response(status: int, payload: Any) -> bytes:
    body = json.dumps(payload).encode()
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _error(status: int, message: str, code: str) -> bytes:
    return _response(status, {"error": {"message": message, "type": code, "code": status}})


def _frame(data: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(payload: Any) -> bytes:
    return _frame(b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n")


_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)
_COMMENT = _frame(b": keep-alive\n\n")
_DONE = _frame(b"data: [DONE]\n\n") + b"0\r\n\r\n"
_MALFORMED = _frame(b"data: {not json\n\n")


def _count_prompt(prompt: Any) -> int:
    if isinstance(prompt, str):
        return len(prompt.split())
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    raise BadRequest("prompt must be a string or a list of token ids (one prompt per request)")


class _BadHTTP(Exception):
    """The bytes on the connection are not an HTTP/1.1 request this server understands."""


def _realtime_minus_perf() -> float:
    """CLOCK_REALTIME (kernel timestamps) - perf_counter, from the tightest of a few pairs."""
    best = (float("inf"), 0.0)
    for _ in range(5):
        before = time.perf_counter()
        real = time.time()
        after = time.perf_counter()
        best = min(best, (after - before, real - (before + after) / 2))
    return best[1]


_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; Python does not export it
_TIMESPEC = struct.Struct("@ll")
_MAX_HEAD = 64 * 1024


def _wake(future: asyncio.Future[None]) -> None:
    # Level-triggered: the callback can fire again before the waiting task has run.
    if not future.done():
        future.set_result(None)


class _Connection:
    """A non-blocking client socket: HTTP/1.1 requests in (with the kernel's arrival time of
    their last bytes), response bytes out."""

    def __init__(self, sock: socket.socket, nagle: bool = False) -> None:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0 if nagle else 1)
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        self._sock = sock
        self._loop = asyncio.get_running_loop()
        self._offset = _realtime_minus_perf()
        self._inbox = b""
        self._outbox = bytearray()
        self._arrival = 0.0

    async def _wait(self, writable: bool) -> None:
        future = self._loop.create_future()
        fd = self._sock.fileno()
        add, remove = (
            (self._loop.add_writer, self._loop.remove_writer)
            if writable
            else (self._loop.add_reader, self._loop.remove_reader)
        )
        add(fd, _wake, future)
        try:
            await future
        finally:
            remove(fd)

    async def _receive(self) -> bool:
        """Read more bytes into the inbox; False at end of stream."""
        while True:
            try:
                data, ancillary, _, _ = self._sock.recvmsg(65536, socket.CMSG_SPACE(16))
                break
            except BlockingIOError:
                await self._wait(writable=False)
        if not data:
            return False
        self._arrival = time.perf_counter()
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                seconds, nanoseconds = _TIMESPEC.unpack(payload[: _TIMESPEC.size])
                self._arrival = seconds + nanoseconds * 1e-9 - self._offset
        self._inbox += data
        return True

    async def read_request(self) -> tuple[str, str, dict[str, str], bytes, float] | None:
        """The next request, or None when the client closed the connection between requests."""
        while b"\r\n\r\n" not in self._inbox:
            if len(self._inbox) > _MAX_HEAD:
                raise _BadHTTP("request head too large")
            if not await self._receive():
                if self._inbox:
                    raise _BadHTTP("connection closed inside a request head")
                return None
        head, _, self._inbox = self._inbox.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, _ = lines[0].split(" ", 2)
        except ValueError as exc:
            raise _BadHTTP(f"malformed request line {lines[0]!r}") from exc
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise _BadHTTP("chunked request bodies are not supported; send Content-Length")
        try:
            length = int(headers.get("content-length") or 0)
        except ValueError as exc:
            raise _BadHTTP("bad Content-Length") from exc
        while len(self._inbox) < length:
            if not await self._receive():
                raise _BadHTTP("connection closed inside a request body")
        body, self._inbox = self._inbox[:length], self._inbox[length:]
        return method, target.split("?")[0], headers, body, self._arrival

    def write(self, data: bytes) -> None:
        if self._outbox:
            self._outbox += data
            return
        try:
            sent = self._sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            raise ConnectionResetError(str(exc)) from exc
        if sent < len(data):
            self._outbox += data[sent:]

    async def drain(self) -> None:
        while self._outbox:
            await self._wait(writable=True)
            try:
                sent = self._sock.send(self._outbox)
            except BlockingIOError:
                continue
            except OSError as exc:
                raise ConnectionResetError(str(exc)) from exc
            del self._outbox[:sent]

    def abort(self) -> None:
        """Reset the connection (RST), as a crashing server would."""
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self._sock.close()

    def close(self) -> None:
        self._sock.close()


class ReferenceServer:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.stats: Counter[str] = Counter()
        self._rng = random.Random(config.seed)
        self._chunks: dict[tuple[bool, int], bytes] = {}
        # How late each token left versus its due time, and how late each request's bytes
        # were handled after they arrived: the server's own slip, reported by /stats.
        self.token_slip_s: list[float] = []
        self.arrival_slip_s: list[float] = []
        # What the server actually did: first content write after the request arrived, and
        # the gaps between its content writes (the truth a client's figures should match).
        self.observed_ttft_s: list[float] = []
        self.observed_gap_s: list[float] = []
        # With --slots: generations at once, and how long each request waited for a slot.
        self._slots = asyncio.Semaphore(config.slots) if config.slots else None
        self.slot_wait_s: list[float] = []

    # --- HTTP/1.1 ---------------------------------------------------------------------------
    async def handle(self, conn: _Connection) -> None:
        """Serve one keep-alive connection until the client closes it."""
        try:
            while True:
                request = await conn.read_request()
                if request is None:
                    return
                method, path, headers, body, arrived = request
                # The schedule runs from when the request's last bytes reached the socket
                # (kernel timestamp), however late this process got round to reading them.
                self.arrival_slip_s.append(time.perf_counter() - arrived)
                for name in headers:
                    if name.startswith("x-"):  # so tests can see extra headers arrive
                        self.stats[f"header {name}"] += 1
                keep_open = await self._route(method, path, headers, body, conn, arrived)
                await conn.drain()
                if not keep_open or headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, _BadHTTP) as exc:
            if isinstance(exc, _BadHTTP):
                conn.write(_error(400, str(exc), "invalid_request_error"))
                with contextlib.suppress(ConnectionError):
                    await conn.drain()
            return
        finally:
            conn.close()

    async def _route(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        writer: _Connection,
        received: float,
    ) -> bool:
        key = self.config.api_key
        if key and path.startswith("/v1/") and headers.get("authorization") != f"Bearer {key}":
            self.stats["unauthorized"] += 1
            writer.write(_error(401, "Incorrect API key provided", "invalid_api_key"))
            return True
        if path == "/health":
            writer.write(_response(200, {"status": "ok"}))
            return True
        if path == "/v1/models":
            model = {"id": self.config.model, "object": "model", "owned_by": "rigbench"}
            writer.write(_response(200, {"object": "list", "data": [model]}))
            return True
        if path == "/stats":
            writer.write(_response(200, self._stats()))
            return True
        if path not in ("/v1/completions", "/v1/chat/completions"):
            writer.write(_error(404, f"no route {path}", "not_found"))
            return True
        if method != "POST":
            writer.write(_error(405, f"{path} takes POST", "invalid_request_error"))
            return True
        self.stats["requests"] += 1
        try:
            quirks = self._quirks(headers)
            gen = self._parse(path, body, quirks)
        except BadRequest as exc:
            self.stats["bad_requests"] += 1
            writer.write(_error(exc.status, str(exc), exc.code))
            return True
        if headers.get("x-reference-status", "").isdigit():
            status = int(headers["x-reference-status"])
            self.stats[f"errors_{status}"] += 1
            writer.write(_error(status, "injected failure (X-Reference-Status)", "server_error"))
            return True
        if self.config.error_rate and self._rng.random() < self.config.error_rate:
            self.stats["errors_500"] += 1
            writer.write(_error(500, "injected failure", "server_error"))
            return True
        cut = bool(self.config.cut_rate) and self._rng.random() < self.config.cut_rate
        if self._slots is None:
            return await self._generate(gen, writer, received, cut, quirks)
        queued = self._slots.locked()
        async with self._slots:
            started = time.perf_counter()
            self.slot_wait_s.append(started - received if queued else 0.0)
            # a queued request's schedule starts when it gets its slot
            return await self._generate(gen, writer, started if queued else received, cut, quirks)

    async def _generate(
        self, gen: _Generation, writer: _Connection, received: float, cut: bool,
        quirks: frozenset[str],
    ) -> bool:  # fmt: skip
        if not gen.stream or "no-stream" in quirks:
            await self._sleep_until(received, gen.tokens - 1)
            writer.write(_response(200, self._full(gen)))
            self.stats["completed"] += 1
            return True
        completed = await self._stream(gen, writer, received, cut, quirks)
        if completed:
            self.stats["completed"] += 1
        else:
            self.stats["cut"] += 1
            writer.abort()
        return completed

    def _stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = dict(self.stats)
        for name, samples in (("token_slip_ms", self.token_slip_s),
                              ("arrival_slip_ms", self.arrival_slip_s),
                              ("observed_ttft_ms", self.observed_ttft_s),
                              ("observed_chunk_gap_ms", self.observed_gap_s),
                              ("slot_wait_ms", self.slot_wait_s)):  # fmt: skip
            ordered = sorted(samples)
            if ordered:
                stats[name] = {
                    "mean": 1e3 * sum(ordered) / len(ordered),
                    "p50": 1e3 * ordered[len(ordered) // 2],
                    "p99": 1e3 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
                    "max": 1e3 * ordered[-1],
                }
        return stats

    def _quirks(self, headers: dict[str, str]) -> frozenset[str]:
        asked = {q.strip() for q in headers.get("x-reference-quirks", "").split(",") if q.strip()}
        if unknown := asked - set(QUIRKS):
            raise BadRequest(f"unknown quirk(s) {sorted(unknown)}; known: {', '.join(QUIRKS)}")
        return self.config.quirks | asked

    def _parse(self, path: str, body: bytes, quirks: frozenset[str]) -> _Generation:
        try:
            request = json.loads(body)
        except ValueError as exc:
            raise BadRequest(f"body is not JSON: {exc}") from exc
        if not isinstance(request, dict):
            raise BadRequest("body must be a JSON object")
        if request.get("model") != self.config.model:
            raise BadRequest(
                f"model {request.get('model')!r} does not exist; this server serves "
                f"{self.config.model!r}",
                404,
                "model_not_found",
            )
        chat = path.endswith("/chat/completions")
        if chat:
            messages = request.get("messages")
            if not isinstance(messages, list) or not messages:
                raise BadRequest("messages must be a non-empty list")
            prompt_tokens = sum(_count_prompt(str(m.get("content", ""))) for m in messages)
        else:
            if "prompt" not in request:
                raise BadRequest("prompt is required")
            prompt_tokens = _count_prompt(request["prompt"])
        max_tokens = request.get("max_tokens", request.get("max_completion_tokens", 16))
        min_tokens = request.get("min_tokens", 0) or 0
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise BadRequest("max_tokens must be an integer >= 1")
        if not isinstance(min_tokens, int) or not 0 <= min_tokens <= max_tokens:
            raise BadRequest("min_tokens must be an integer within [0, max_tokens]")
        tokens = max_tokens
        if self.config.eos_after is not None and not request.get("ignore_eos", False):
            tokens = min(max_tokens, max(self.config.eos_after, min_tokens))
        options = request.get("stream_options") or {}
        return _Generation(
            chat=chat,
            stream=bool(request.get("stream", False)),
            tokens=tokens,
            prompt_tokens=prompt_tokens,
            include_usage=bool(options.get("include_usage")) and "no-usage" not in quirks,
        )

    # --- generation ------------------------------------------------------------------------
    async def _sleep_until(self, received: float, token_index: float) -> float:
        """Sleep until token `token_index` is due; return how late the wake-up was (s)."""
        due = received + (self.config.ttft_ms + token_index * self.config.itl_ms) / 1e3
        # The event loop's epoll timeout is whole milliseconds, rounded up, so a timer fires
        # 0-1 ms late; aiming half a millisecond early centres the wake-up on the deadline.
        delay = due - time.perf_counter() - _WAKE_BIAS_S
        if delay > 0:
            await asyncio.sleep(delay)
        return time.perf_counter() - due

    def _choice(self, chat: bool, text: str, finish: str | None) -> dict[str, Any]:
        if chat:
            return {"index": 0, "delta": {"content": text}, "finish_reason": finish}
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}

    def _chunk(self, chat: bool, tokens: int) -> bytes:
        """A mid-stream chunk carrying `tokens` tokens (cached: they are all alike)."""
        key = (chat, tokens)
        if key not in self._chunks:
            self._chunks[key] = _event(
                self._envelope(chat, [self._choice(chat, TOKEN_TEXT * tokens, None)])
            )
        return self._chunks[key]

    def _envelope(self, chat: bool, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": "ref-0",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.config.model,
            "choices": choices,
        }

    def _usage(self, gen: _Generation) -> dict[str, int]:
        return {
            "prompt_tokens": gen.prompt_tokens,
            "completion_tokens": gen.tokens,
            "total_tokens": gen.prompt_tokens + gen.tokens,
        }

    async def _stream(
        self, gen: _Generation, writer: _Connection, received: float, cut: bool,
        quirks: frozenset[str],
    ) -> bool:  # fmt: skip
        writer.write(_STREAM_HEAD)
        if "comments" in quirks:
            writer.write(_COMMENT)
        if "role-chunk" in quirks:
            first = (
                {"index": 0, "delta": {"role": "assistant", "content": ""}}
                if gen.chat
                else (self._choice(False, "", None))
            )
            writer.write(_event(self._envelope(gen.chat, [first])))
        await writer.drain()
        # Chunk boundaries: the first token alone, then `tokens_per_chunk` at a time; a chunk
        # leaves when its last token is due.
        k = self.config.tokens_per_chunk
        sizes = [1] + [k] * ((gen.tokens - 1) // k)
        if (gen.tokens - 1) % k:
            sizes.append((gen.tokens - 1) % k)
        last_token = -1
        cut_at = gen.tokens // 2 if cut else gen.tokens + 1
        previous_write: float | None = None
        held = bytearray()  # the first `coalesce` tokens' events, written as one
        for n, size in enumerate(sizes):
            if "comments" in quirks and n > 0:
                await self._sleep_until(received, last_token + 0.5)
                writer.write(_COMMENT)
            last_token += size
            if last_token >= cut_at:
                await writer.drain()
                return False
            final = n == len(sizes) - 1
            if not final:
                event = self._chunk(gen.chat, size)
            else:
                choice = self._choice(gen.chat, TOKEN_TEXT * size, "length")
                payload = self._envelope(gen.chat, [choice])
                if gen.include_usage and "usage-only-final" not in quirks:
                    payload["usage"] = self._usage(gen)
                event = _event(payload)
            if last_token < self.config.coalesce - 1 and not final:
                held += event
                continue
            self.token_slip_s.append(await self._sleep_until(received, last_token))
            wrote = time.perf_counter()
            if previous_write is None:
                self.observed_ttft_s.append(wrote - received)
            else:
                self.observed_gap_s.append(wrote - previous_write)
            previous_write = wrote
            writer.write(bytes(held) + event)
            held.clear()
            if n == 0 and "malformed" in quirks:
                writer.write(_MALFORMED)
            await writer.drain()
        if gen.include_usage and "usage-only-final" in quirks:
            payload = self._envelope(gen.chat, [])
            payload["usage"] = self._usage(gen)
            writer.write(_event(payload))
        writer.write(_DONE)
        return True

    def _full(self, gen: _Generation) -> dict[str, Any]:
        text = TOKEN_TEXT * gen.tokens
        choice: dict[str, Any] = (
            {"index": 0, "message": {"role": "assistant", "content": text}}
            if gen.chat
            else {"index": 0, "text": text, "logprobs": None}
        )
        choice["finish_reason"] = "length"
        payload = self._envelope(gen.chat, [choice])
        payload["object"] = "chat.completion" if gen.chat else "text_completion"
        payload["usage"] = self._usage(gen)
        return payload


# --- process entry point ------------------------------------------------------------------------
def _listen_socket(host: str, port: int, reuse_port: bool) -> socket.socket:
    # proto=IPPROTO_TCP matters: asyncio only sets TCP_NODELAY on sockets that say they are
    # TCP, and without it Nagle holds the first token until the client's delayed ACK (~40 ms).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(4096)
    return sock


async def serve(config: ServerConfig, sock: socket.socket, ready_line: bool = True) -> None:
    """Serve on an already bound, listening socket until SIGINT or SIGTERM."""
    app = ReferenceServer(config)
    loop = asyncio.get_running_loop()
    sock.setblocking(False)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    connections: set[asyncio.Task[None]] = set()

    async def accept() -> None:
        while True:
            client, _ = await loop.sock_accept(sock)
            task = loop.create_task(app.handle(_Connection(client, config.nagle)))
            connections.add(task)
            task.add_done_callback(connections.discard)

    acceptor = loop.create_task(accept())
    if ready_line:
        host, port = sock.getsockname()[:2]
        print(f"reference server listening on http://{host}:{port}", flush=True)
    await stop.wait()
    acceptor.cancel()
    for task in list(connections):
        task.cancel()
    await asyncio.gather(acceptor, *connections, return_exceptions=True)
    sock.close()


def _worker(config: ServerConfig, host: str, port: int) -> None:
    asyncio.run(serve(config, _listen_socket(host, port, reuse_port=True), ready_line=False))


def parse_args(argv: Sequence[str] | None = None) -> tuple[ServerConfig, str, int, int]:
    parser = argparse.ArgumentParser(
        prog="python -m harness.reference_server", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--model", default="reference")
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=10.0)
    parser.add_argument("--quirk", action="append", default=[], choices=QUIRKS)
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument("--error-rate", type=float, default=0.0)
    parser.add_argument("--cut-rate", type=float, default=0.0)
    parser.add_argument("--eos-after", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--coalesce", type=int, default=1, help="first N tokens in one write")
    parser.add_argument("--nagle", action="store_true", help="leave Nagle's algorithm on")
    parser.add_argument("--api-key", default=None, help="require Authorization: Bearer KEY")
    parser.add_argument("--workers", type=int, default=1, help="processes sharing the port")
    parser.add_argument("--slots", type=int, default=None, help="generations at once (queue)")
    args = parser.parse_args(argv)
    try:
        config = ServerConfig(
            model=args.model,
            ttft_ms=args.ttft_ms,
            itl_ms=args.itl_ms,
            quirks=frozenset(args.quirk),
            tokens_per_chunk=args.tokens_per_chunk,
            error_rate=args.error_rate,
            cut_rate=args.cut_rate,
            eos_after=args.eos_after,
            seed=args.seed,
            coalesce=args.coalesce,
            nagle=args.nagle,
            api_key=args.api_key,
            slots=args.slots,
        )
    except ValueError as exc:
        parser.error(str(exc))
    if args.workers < 1:
        parser.error("--workers must be >= 1")
    return config, args.host, args.port, args.workers


def main(argv: Sequence[str] | None = None) -> None:
    config, host, port, workers = parse_args(argv)
    sock = _listen_socket(host, port, reuse_port=workers > 1)
    port = sock.getsockname()[1]
    children = [
        multiprocessing.get_context("spawn").Process(
            target=_worker, args=(config, host, port), daemon=True
        )
        for _ in range(workers - 1)
    ]
    for child in children:
        child.start()
    try:
        asyncio.run(serve(config, sock))
    finally:
        for child in children:
            child.terminate()
        for child in children:
            child.join(5)
    with contextlib.suppress(BrokenPipeError):
        sys.stdout.flush()


if __name__ == "__main__":
    main()
