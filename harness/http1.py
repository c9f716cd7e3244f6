"""A lean HTTP/1.1 client for one streaming request at a time, over a kernel-stamped socket.

Profiled at 128 streams against the reference server, most of the client's time per chunk
went to httpx, httpcore and h11 (a dozen calls, context managers and state machines for
every socket read), so chunks sat in their sockets and were read together. This reads the
socket directly: one `recvmsg` per read (harness.transport.StampedStream, which keeps the
kernel's arrival stamp), the response head parsed once, then chunked (or Content-Length, or
read-to-close) bodies decoded in place, each read's payload handed over with its stamp.

Errors come out as httpx's exception types, translated here in one place, so the backend
maps them to failure reasons exactly as it does for httpx's own client (used for https://).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from urllib.parse import urlsplit

import httpcore
import httpx

from harness.transport import StampedStream, StampingBackend

_READ = 65536
_MAX_HEAD = 64 * 1024


@contextlib.contextmanager
def _httpx_errors() -> Iterator[None]:
    """httpcore's errors (from the socket layer) as the httpx errors the backend maps."""
    try:
        yield
    except httpcore.ConnectTimeout as exc:
        raise httpx.ConnectTimeout(str(exc)) from exc
    except httpcore.ConnectError as exc:
        raise httpx.ConnectError(str(exc)) from exc
    except httpcore.ReadTimeout as exc:
        raise httpx.ReadTimeout(str(exc)) from exc
    except httpcore.WriteTimeout as exc:
        raise httpx.WriteTimeout(str(exc)) from exc
    except httpcore.ReadError as exc:
        raise httpx.ReadError(str(exc)) from exc
    except httpcore.WriteError as exc:
        raise httpx.WriteError(str(exc)) from exc


class Response:
    """The status and headers of a response whose body is read with `chunks()`."""

    def __init__(self, connection: Connection, status: int, headers: dict[str, str]) -> None:
        self._connection = connection
        self.status_code = status
        self.headers = headers

    @property
    def wire(self) -> StampedStream:
        assert self._connection.stream is not None
        return self._connection.stream

    def chunks(self) -> AsyncGenerator[bytes, None]:
        """The body, one piece per socket read (`wire.last_arrival` is its stamp)."""
        return self._connection.body(self.headers)

    async def aread(self) -> bytes:
        return b"".join([piece async for piece in self.chunks()])


class Connection:
    """One keep-alive HTTP/1.1 connection to `url`'s host, opened on first use."""

    def __init__(self, url: str, connect_timeout_s: float) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"the lean client serves http:// URLs only, not {url!r}")
        self._host = parts.hostname
        self._port = parts.port or 80
        self._authority = parts.netloc.encode()
        self._connect_timeout = connect_timeout_s
        self.stream: StampedStream | None = None
        self._buffer = b""
        self._reusable = False

    async def aclose(self) -> None:
        if self.stream is not None:
            stream, self.stream = self.stream, None
            await stream.aclose()

    async def post(self, path: str, body: bytes, headers: bytes) -> Response:
        """Send a POST and read the response head; a stale keep-alive connection is replaced."""
        request = (
            b"POST " + path.encode() + b" HTTP/1.1\r\nHost: " + self._authority + b"\r\n"
            + headers + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )  # fmt: skip
        reused = self.stream is not None
        try:
            return await self._exchange(request)
        except httpx.RemoteProtocolError:
            if not reused:
                raise
        # The server had closed the idle connection before it saw this request: once more.
        return await self._exchange(request)

    async def _exchange(self, request: bytes) -> Response:
        with _httpx_errors():
            if self.stream is None:
                self.stream = await StampingBackend().connect_tcp(
                    self._host, self._port, timeout=self._connect_timeout
                )
                self._buffer = b""
            stream = self.stream
            await stream.write(request)
            try:
                while b"\r\n\r\n" not in self._buffer:
                    if len(self._buffer) > _MAX_HEAD:
                        raise httpx.RemoteProtocolError("response head too large")
                    data = await stream.read(_READ)
                    if not data:
                        raise httpx.RemoteProtocolError(
                            "the server closed the connection without a response"
                        )
                    self._buffer += data
            except BaseException:
                await self.aclose()
                raise
        head, _, self._buffer = self._buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        try:
            status = int(lines[0].split(" ", 2)[1])
        except (IndexError, ValueError) as exc:
            await self.aclose()
            raise httpx.RemoteProtocolError(f"malformed status line {lines[0]!r}") from exc
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return Response(self, status, headers)

    async def body(self, headers: dict[str, str]) -> AsyncGenerator[bytes, None]:
        """Decode the body; the connection is kept only when it ended cleanly."""
        self._reusable = False
        try:
            with _httpx_errors():
                if "chunked" in headers.get("transfer-encoding", "").lower():
                    async for piece in self._chunked():
                        yield piece
                    self._reusable = True
                elif "content-length" in headers:
                    async for piece in self._sized(int(headers["content-length"])):
                        yield piece
                    self._reusable = True
                else:
                    async for piece in self._to_close():
                        yield piece
        finally:
            if not self._reusable or headers.get("connection", "").lower() == "close":
                await self.aclose()

    async def _more(self) -> bytes:
        assert self.stream is not None
        data = await self.stream.read(_READ)
        if not data:
            raise httpx.RemoteProtocolError("the server closed the connection mid-body")
        return data

    async def _chunked(self) -> AsyncIterator[bytes]:
        buffer = self._buffer
        self._buffer = b""
        while True:
            out: list[bytes] = []
            while True:  # every complete chunk in the buffer
                end = buffer.find(b"\r\n")
                if end < 0:
                    break
                try:
                    size = int(buffer[:end].split(b";", 1)[0], 16)
                except ValueError as exc:
                    raise httpx.RemoteProtocolError(f"bad chunk size {buffer[:end]!r}") from exc
                if size == 0:  # the last chunk, then an empty line (no trailers)
                    if len(buffer) < end + 4:
                        break
                    if buffer[end : end + 4] != b"\r\n\r\n":
                        raise httpx.RemoteProtocolError("chunked trailers are not supported")
                    if out:
                        yield b"".join(out)
                    self._buffer = buffer[end + 4 :]
                    return
                stop = end + 2 + size
                if len(buffer) < stop + 2:
                    break
                out.append(buffer[end + 2 : stop])
                buffer = buffer[stop + 2 :]
            if out:
                yield b"".join(out)
            buffer += await self._more()

    async def _sized(self, length: int) -> AsyncIterator[bytes]:
        buffer, self._buffer = self._buffer[:length], self._buffer[length:]
        left = length - len(buffer)
        if buffer:
            yield buffer
        while left > 0:
            data = await self._more()
            piece, self._buffer = data[:left], data[left:]
            left -= len(piece)
            yield piece

    async def _to_close(self) -> AsyncIterator[bytes]:
        assert self.stream is not None
        if self._buffer:
            yield self._buffer
            self._buffer = b""
        while data := await self.stream.read(_READ):
            yield data
