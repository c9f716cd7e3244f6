"""How the harness talks to a server: OpenAI-compatible streaming, one request per record.

One request fills one `RequestRecord` with raw client-side timestamps; nothing is derived
here. Over http:// requests go through a lean HTTP/1.1 client (harness.http1) and the
times come from the wire (harness.transport): a request is stamped as it is handed to the
kernel, each chunk with the kernel's arrival time of its bytes, so the client's own
scheduling stays out of TTFT and ITL. Over https:// httpx.AsyncClient streams and chunks
are stamped when the task resumes. Each in-flight request has a connection of its own
(kept alive), and sends are paced one per event-loop turn.

A chunk counts as content when it carries generated text (`choices[0].text` for completions,
`choices[0].delta.content` or a reasoning delta for chat): role-only or empty chunks,
usage-only chunks and SSE comments never stamp a token time. Every way a request can go wrong
ends as a failure reason on the record; no exception leaves `generate` except cancellation
(after the record is marked "interrupted").
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from harness.http1 import Connection
from harness.schemas import Endpoint, FailureReason, RequestRecord, TokenDelivery
from harness.sse import SSEDecoder
from harness.transport import StampedStream, stamping_transport

_PATHS: dict[Endpoint, str] = {
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
}


_LEAN_HEADERS = b"Content-Type: application/json\r\nAccept: text/event-stream\r\n"


class ServerUnreachableError(Exception):
    """The server did not answer an HTTP request at all (refused, unresolvable, timed out)."""


Messages = list[dict[str, Any]]


@dataclass(frozen=True)
class ServerInfo:
    """What /v1/models says: the models served, and the vocabulary size and the way tokens
    are delivered ("per_token" or "burst") where advertised (rigbench rigs do)."""

    models: list[str]
    vocab_size: int | None
    token_delivery: TokenDelivery | None = None


def build_body(
    endpoint: Endpoint, model: str, prompt: list[int] | str | Messages, output_len: int
) -> bytes:
    """The JSON body of one streaming request that forces exactly `output_len` tokens.

    A prompt for the chat endpoint is either its messages or the text of one user message.
    """
    payload: dict[str, Any] = {
        "model": model,
        "max_tokens": output_len,
        "min_tokens": output_len,
        "ignore_eos": True,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if endpoint == "completions":
        payload["prompt"] = prompt
    elif isinstance(prompt, str):
        payload["messages"] = [{"role": "user", "content": prompt}]
    else:
        payload["messages"] = prompt
    return json.dumps(payload, separators=(",", ":")).encode()


class SendPacer:
    """Lets one request be sent per event-loop turn.

    Setting up a request costs the client most of a millisecond. When dozens are due at
    once (a cell starting, a closed loop whose streams ended together), sending them all in
    one turn would leave every socket unread meanwhile, and a late read can hand over two
    chunks under one arrival stamp. Paced, the loop polls its sockets between two sends; the
    wait counts as queue wait, never as latency.
    """

    def __init__(self) -> None:
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._scheduled = False

    async def turn(self) -> None:
        future = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._release)
        await future

    def _release(self) -> None:
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():  # a cancelled waiter gives its turn away
                future.set_result(None)
                break
        self._scheduled = bool(self._waiting)
        if self._scheduled:
            asyncio.get_running_loop().call_soon(self._release)


class OpenAIBackend:
    """Clients for one server; `generate` streams one request into a record.

    Each in-flight request gets a connection of its own (a lean `Connection` over http://,
    an httpx.AsyncClient over https://), taken from a free list: httpcore's shared pool
    scans every connection for every request, which costs more than the request itself at
    a few dozen connections.
    """

    # False reads http:// streams through httpx as well (benchmarks/harness_ceiling.py
    # --httpx measures the difference).
    lean_http = True

    def __init__(
        self,
        url: str,
        endpoint: Endpoint,
        *,
        request_timeout_s: float = 600.0,
        connect_timeout_s: float = 10.0,
        clock_origin: float = 0.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """`headers` go with every request (an API key's Authorization, say)."""
        self.url = url.rstrip("/")
        self._headers = dict(headers or {})
        self._lean_headers = _LEAN_HEADERS + b"".join(
            f"{name}: {value}\r\n".encode("latin-1") for name, value in self._headers.items()
        )
        self.endpoint = endpoint
        self._path = _PATHS[endpoint]
        self._request_timeout_s = request_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._origin = clock_origin
        self._ssl = ssl.create_default_context()  # built once: it costs milliseconds
        self._idle: list[httpx.AsyncClient] = []
        self._clients: list[httpx.AsyncClient] = []
        self._pacer = SendPacer()
        # Over http:// requests go through the lean client (harness.http1); httpx serves
        # https:// and the reachability check.
        self._lean = self.lean_http and self.url.startswith("http://")
        self._lean_idle: list[Connection] = []
        self._connections: list[Connection] = []

    def _new_connection(self) -> Connection:
        connection = Connection(self.url, self._connect_timeout_s)
        self._connections.append(connection)
        return connection

    def _new_client(self) -> httpx.AsyncClient:
        client = httpx.AsyncClient(
            base_url=self.url,
            transport=stamping_transport(self.url, self._ssl),
            timeout=httpx.Timeout(
                connect=self._connect_timeout_s,
                read=self._request_timeout_s,
                write=30.0,
                pool=None,
            ),
            headers={
                "Content-Type": "application/json",
                "Accept": "text/event-stream",
                **self._headers,
            },
        )
        self._clients.append(client)
        return client

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()
        self._clients.clear()
        self._idle.clear()
        for connection in self._connections:
            await connection.aclose()
        self._connections.clear()
        self._lean_idle.clear()

    async def __aenter__(self) -> OpenAIBackend:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    def now(self) -> float:
        return time.perf_counter() - self._origin

    async def check_reachable(self, timeout_s: float = 10.0) -> ServerInfo:
        """Raise ServerUnreachableError unless the server answers HTTP at all within timeout.

        Returns what /v1/models lists: the model names (for a pre-flight that names the
        right one) and the vocabulary size (rigbench rigs advertise it; an OpenAI server
        need not), so token-id prompts stay inside the model's vocabulary.
        """
        try:
            async with asyncio.timeout(timeout_s):
                client = self._idle.pop() if self._idle else self._new_client()
                try:
                    response = await client.get("/v1/models", timeout=timeout_s)
                finally:
                    self._idle.append(client)
        except TimeoutError as exc:
            raise ServerUnreachableError(
                f"cannot reach {self.url} (no answer within {timeout_s:g} s)"
            ) from exc
        except httpx.HTTPError as exc:
            reason = type(exc).__name__
            if str(exc):
                reason += f": {exc}"
            raise ServerUnreachableError(f"cannot reach {self.url} ({reason})") from exc
        return _server_info(response)

    async def generate(self, body: bytes, record: RequestRecord) -> None:
        """Send one streaming request, stamping times and counts into `record`."""
        try:
            await self._pacer.turn()
        except asyncio.CancelledError:
            record.error, record.error_detail = "interrupted", "cancelled before sending"
            record.end_time = self.now()
            raise
        client: httpx.AsyncClient | Connection
        if self._lean:
            client = self._lean_idle.pop() if self._lean_idle else self._new_connection()
        else:
            client = self._idle.pop() if self._idle else self._new_client()
        record.send_time = self.now()
        try:
            async with asyncio.timeout(self._request_timeout_s):
                if isinstance(client, Connection):
                    await self._stream_lean(client, body, record)
                else:
                    await self._stream(client, body, record)
        except asyncio.CancelledError:
            record.error, record.error_detail = "interrupted", "cancelled by the caller"
            record.end_time = self.now()
            raise
        except TimeoutError:
            _fail(record, "timeout", f"no complete response in {self._request_timeout_s} s")
        except httpx.ConnectTimeout as exc:
            _fail(record, "connect_error", f"connect timed out: {exc}")
        except httpx.TimeoutException as exc:
            _fail(record, "timeout", f"{type(exc).__name__}: {exc}")
        except httpx.ConnectError as exc:
            _fail(record, "connect_error", str(exc))
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            _fail(record, "stream_dropped", f"{type(exc).__name__}: {exc}")
        except (UnicodeDecodeError, httpx.DecodingError) as exc:
            _fail(record, "malformed_sse", f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # anything else must still end as a counted failure
            _fail(record, "stream_dropped", f"{type(exc).__name__}: {exc}")
        finally:
            if isinstance(client, Connection):
                self._lean_idle.append(client)
            else:
                self._idle.append(client)
        if record.error is not None and record.end_time is None:
            record.end_time = self.now()

    async def _stream(self, client: httpx.AsyncClient, body: bytes, record: RequestRecord) -> None:
        async with client.stream("POST", self._path, content=body) as response:
            record.http_status = response.status_code
            if response.status_code >= 400:
                _fail(
                    record,
                    "http_error",
                    http_error_detail(response.status_code, await response.aread()),
                )
                return
            if _not_streamed(response.headers.get("content-type", "")):
                await response.aread()
                _fail(record, "not_streamed", _NOT_STREAMED)
                return
            # Wire times from the stamping transport; task-resume times if it is not in use.
            wire = response.extensions.get("network_stream")
            if not isinstance(wire, StampedStream) or wire.request_sent_at is None:
                wire = None
            else:
                record.send_time = wire.request_sent_at - self._origin
            await self._read_events(response.aiter_bytes(), wire, record)

    async def _stream_lean(
        self, connection: Connection, body: bytes, record: RequestRecord
    ) -> None:
        response = await connection.post(self._path, body, self._lean_headers)
        record.http_status = response.status_code
        wire = response.wire
        async with contextlib.aclosing(response.chunks()) as pieces:
            if response.status_code >= 400 or _not_streamed(
                response.headers.get("content-type", "")
            ):
                text = b"".join([piece async for piece in pieces])
                if response.status_code >= 400:
                    _fail(record, "http_error", http_error_detail(response.status_code, text))
                else:
                    _fail(record, "not_streamed", _NOT_STREAMED)
                return
            assert wire.request_sent_at is not None
            record.send_time = wire.request_sent_at - self._origin
            await self._read_events(pieces, wire, record)

    async def _read_events(
        self, pieces: AsyncIterator[bytes], wire: StampedStream | None, record: RequestRecord
    ) -> None:
        """Decode the SSE body into the record: a stamp per content chunk, usage, failures."""
        times = record.content_times
        origin = self._origin
        # Counted in a list, set once: a pydantic attribute write costs a validation.
        shared: list[float] = []
        try:
            await self._decode_events(pieces, wire, record, shared)
        finally:
            record.shared_read_chunks = len(shared)
        last = wire.last_arrival if wire is not None else None
        record.end_time = (last - origin) if last is not None else self.now()
        record.content_chunks = len(record.content_times)
        if times:
            record.first_content_time = times[0]

    async def _decode_events(
        self,
        pieces: AsyncIterator[bytes],
        wire: StampedStream | None,
        record: RequestRecord,
        shared: list[float],
    ) -> None:
        chat = self.endpoint == "chat"
        decoder = SSEDecoder()
        done = False
        times = record.content_times
        origin = self._origin
        async for raw in pieces:
            arrival = wire.last_arrival if wire is not None else None
            now = (arrival if arrival is not None else time.perf_counter()) - origin
            for data in decoder.feed(raw):
                if done:
                    continue  # anything after [DONE] is ignored
                if data == "[DONE]":
                    done = True
                    continue
                try:
                    event = json.loads(data)
                except ValueError:
                    _fail(record, "malformed_sse", f"not JSON: {data[:120]!r}")
                    return
                if not isinstance(event, dict):
                    _fail(record, "malformed_sse", f"not a JSON object: {data[:120]!r}")
                    return
                if _has_content(event, chat):
                    if wire is not None and times and times[-1] == now:
                        # Read late, together with the previous chunk: one stamp for both.
                        shared.append(now)
                        if len(times) == 1:
                            record.first_token_shared_read = True
                    times.append(now)
                elif "error" in event and not event.get("choices"):
                    _fail(record, "error_event", json.dumps(event["error"])[:300])
                    return
                usage = event.get("usage")
                if usage:
                    record.usage_output_tokens = usage.get("completion_tokens")
                    record.usage_prompt_tokens = usage.get("prompt_tokens")
        if not done:
            _fail(record, "missing_done", "the stream ended without data: [DONE]")
        elif not times:
            _fail(record, "empty_output", "the stream carried no generated content")


def _has_content(event: dict[str, Any], chat: bool) -> bool:
    choices = event.get("choices")
    if not choices:
        return False
    choice = choices[0]
    if not chat:
        return bool(choice.get("text"))
    delta = choice.get("delta") or {}
    return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"))


def _fail(record: RequestRecord, reason: FailureReason, detail: str) -> None:
    record.error = reason
    record.error_detail = detail


_NOT_STREAMED = "the server ignored stream: true and answered with one JSON body"


def _not_streamed(content_type: str) -> bool:
    return content_type.split(";")[0].strip().lower() == "application/json"


def http_error_detail(status: int, body: bytes) -> str:
    """`HTTP 404: <the server's message>`: the message of an OpenAI-style JSON error (or a
    FastAPI `detail`) when there is one, else the start of the body as text."""
    text = body.decode("utf-8", "replace").strip()
    try:
        payload = json.loads(text)
    except ValueError:
        payload = None
    if isinstance(payload, dict):
        error = payload.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        message = message or payload.get("message") or payload.get("detail")
        if isinstance(message, str) and message:
            text = message
    return f"HTTP {status}: {' '.join(text.split())[:300]}"


def _server_info(response: httpx.Response) -> ServerInfo:
    try:
        listed = response.json()["data"]
    except (ValueError, KeyError, TypeError):
        return ServerInfo(models=[], vocab_size=None)
    if not isinstance(listed, list):
        return ServerInfo(models=[], vocab_size=None)
    entries = [m for m in listed if isinstance(m, dict)]
    models = [str(m["id"]) for m in entries if "id" in m]
    size = entries[0].get("vocab_size") if entries else None
    delivery = entries[0].get("token_delivery") if entries else None
    return ServerInfo(
        models=models,
        vocab_size=size if isinstance(size, int) and size > 0 else None,
        token_delivery=delivery if delivery in ("per_token", "burst") else None,
    )
