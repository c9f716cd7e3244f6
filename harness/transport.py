# ruff: noqa: ASYNC109  (httpcore's AsyncNetworkStream interface takes `timeout`)
"""An httpcore network backend whose reads carry the kernel's arrival time of the bytes.

httpx reads a stream through several layers and a task only sees a chunk when the event
loop gets round to resuming it; with dozens of streams delivering at once, or other
processes taking the CPU, a chunk stamped then would be stamped milliseconds late. Instead,
every socket asks the kernel for receive timestamps (SO_TIMESTAMPNS), and `recvmsg` returns
the time the bytes reached the socket, however late the harness reads them. A request goes
to the kernel in one send, stamped just before it. The backend reads
these stamps from `response.extensions["network_stream"]`, so TTFT and ITL measure the wire,
not the client's own scheduling. HTTP/1.1, pooling and errors stay httpx's and httpcore's.

Plain-TCP (http://) URLs only; for https:// the backend uses httpx's default transport and
stamps on task resumption.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
from typing import Any

import httpcore
import httpx

# Linux values; Python's socket module does not export them.
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("@ll")
_ANC_SIZE = socket.CMSG_SPACE(_TIMESPEC.size)
_FLUSH_AT = 256 * 1024  # bytes of request gathered before they must go out


def _realtime_minus_perf() -> float:
    """CLOCK_REALTIME - perf_counter, from the tightest of a few paired readings."""
    best: tuple[float, float] | None = None
    for _ in range(5):
        before = time.perf_counter()
        real = time.time()
        after = time.perf_counter()
        if best is None or after - before < best[0]:
            best = (after - before, real - (before + after) / 2)
    assert best is not None
    return best[1]


def _wake(future: asyncio.Future[None]) -> None:
    # Level-triggered: the callback can fire again before the waiting task has run.
    if not future.done():
        future.set_result(None)


class StampedStream(httpcore.AsyncNetworkStream):
    """A non-blocking TCP socket that remembers when its request left and its bytes arrived.

    `request_sent_at` and `last_arrival` are on the `time.perf_counter` clock.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._offset = _realtime_minus_perf()
        self.request_sent_at: float | None = None
        self.last_arrival: float | None = None
        self._between_requests = True
        self._pending = bytearray()
        # The socket stays registered for reading while chunks keep coming (registering it
        # around every read would cost two epoll_ctl calls per chunk); it is dropped only
        # when it turns readable with no reader waiting, such as an idle keep-alive
        # connection the server closed, which would otherwise wake the loop on every turn.
        self._loop = asyncio.get_running_loop()
        self._readable = True
        self._watching = False
        self._reader: asyncio.Future[None] | None = None

    def _on_readable(self) -> None:
        self._readable = True
        if self._reader is None:
            self._loop.remove_reader(self._sock.fileno())
            self._watching = False
        elif not self._reader.done():
            self._reader.set_result(None)

    async def _wait_readable(self, timeout: float | None) -> None:
        if not self._watching:
            self._loop.add_reader(self._sock.fileno(), self._on_readable)
            self._watching = True
        self._reader = self._loop.create_future()
        try:
            if timeout is None:  # the lean client: the request's own deadline covers it
                await self._reader
            else:
                async with asyncio.timeout(timeout):
                    await self._reader
        except TimeoutError as exc:
            raise httpcore.ReadTimeout(f"no data in {timeout} s") from exc
        finally:
            self._reader = None

    async def _wait_writable(self, timeout: float | None) -> None:
        future = self._loop.create_future()
        fd = self._sock.fileno()
        self._loop.add_writer(fd, _wake, future)
        try:
            async with asyncio.timeout(timeout):
                await future
        except TimeoutError as exc:
            raise httpcore.WriteTimeout(f"socket not writable in {timeout} s") from exc
        finally:
            self._loop.remove_writer(fd)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._pending:
            await self._flush(timeout)
        while True:
            if not self._readable:
                await self._wait_readable(timeout)
            try:
                data, ancillary, _, _ = self._sock.recvmsg(max_bytes, _ANC_SIZE)
                break
            except BlockingIOError:
                self._readable = False
            except OSError as exc:
                raise httpcore.ReadError(str(exc)) from exc
        if len(data) < max_bytes:  # the kernel had no more: wait for readiness next time
            self._readable = False
        self._between_requests = True
        stamp = None
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                seconds, nanoseconds = _TIMESPEC.unpack(payload[: _TIMESPEC.size])
                stamp = seconds + nanoseconds * 1e-9 - self._offset
        self.last_arrival = stamp if stamp is not None else time.perf_counter()
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        # httpcore writes a request as head, body and end in turn; they are gathered and
        # sent in one piece when the response is first read, so the server gets the whole
        # request at once and the send is stamped exactly once.
        self._pending += buffer
        if len(self._pending) >= _FLUSH_AT:
            await self._flush(timeout)

    async def _flush(self, timeout: float | None) -> None:
        view = memoryview(self._pending)
        if self._between_requests:  # HTTP/1.1 alternates: a write after a read
            self.request_sent_at = time.perf_counter()  # starts the next request
            self._between_requests = False
        try:
            while view:
                try:
                    sent = self._sock.send(view)
                except BlockingIOError:
                    await self._wait_writable(timeout)
                    continue
                except OSError as exc:
                    raise httpcore.WriteError(str(exc)) from exc
                view = view[sent:]
        finally:
            view.release()
            self._pending = bytearray()

    async def aclose(self) -> None:
        if self._watching:
            self._loop.remove_reader(self._sock.fileno())
            self._watching = False
        self._sock.close()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("the stamping backend serves http:// only")

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # httpcore asks whether an idle keep-alive connection died
            try:
                self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)  # data or EOF
                return True
            except BlockingIOError:
                return False
            except OSError:
                return True
        if info == "socket":
            return self._sock
        if info == "client_addr":
            return self._sock.getsockname()
        if info == "server_addr":
            return self._sock.getpeername()
        return None


class StampingBackend(httpcore.AsyncNetworkBackend):
    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> StampedStream:
        loop = asyncio.get_running_loop()
        sock: socket.socket | None = None
        try:
            async with asyncio.timeout(timeout):
                infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
                family, kind, proto, _, address = infos[0]
                sock = socket.socket(family, kind, proto)
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                for option in socket_options or ():
                    sock.setsockopt(*option)
                if local_address:
                    sock.bind((local_address, 0))
                await loop.sock_connect(sock, address)
        except TimeoutError as exc:
            if sock is not None:
                sock.close()
            raise httpcore.ConnectTimeout(
                f"connect to {host}:{port} took over {timeout} s"
            ) from exc
        except OSError as exc:
            if sock is not None:
                sock.close()
            raise httpcore.ConnectError(f"{host}:{port}: {exc}") from exc
        return StampedStream(sock)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> StampedStream:
        raise httpcore.ConnectError("the stamping backend does not do unix sockets")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def stamping_transport(url: str, ssl_context: ssl.SSLContext) -> httpx.AsyncHTTPTransport:
    """An httpx transport with one keep-alive connection; kernel-stamped for http:// URLs."""
    transport = httpx.AsyncHTTPTransport(verify=ssl_context)
    if url.startswith("http://"):
        # httpx has no public hook for the network backend; replace the pool it built with
        # one like it over ours (httpx is pinned <0.29 in pyproject.toml).
        transport._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=1,
            max_keepalive_connections=1,
            network_backend=StampingBackend(),
        )
    return transport
