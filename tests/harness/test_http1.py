"""The lean HTTP/1.1 client against a bare server on loopback: chunk boundaries that fall
anywhere in the reads, a keep-alive connection the server closed while idle, errors."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx
import pytest

from harness.http1 import Connection

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
HEADERS = b"Content-Type: application/json\r\n"


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )  # fmt: skip
    return await reader.readexactly(length)


async def with_server(handler: Handler, client: Callable[[str], Awaitable[None]]) -> None:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        await client(f"http://127.0.0.1:{port}")


@pytest.mark.slow
def test_chunked_body_split_anywhere_and_a_stale_keep_alive_connection() -> None:
    body = b"data: one\n\ndata: two\n\n"
    wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    wire += b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:7], body[7:]))
    wire += b"0\r\n\r\n"
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        assert await read_request(reader) == b"{}"
        for cut in range(0, len(wire), 5):  # five bytes a write, a pause between
            writer.write(wire[cut : cut + 5])
            await writer.drain()
            await asyncio.sleep(0.002)
        writer.close()  # idle keep-alive connection closed by the server

    async def client(url: str) -> None:
        connection = Connection(url, connect_timeout_s=5)
        for _ in range(2):
            response = await connection.post("/v1/completions", b"{}", HEADERS)
            assert response.status_code == 200
            assert await response.aread() == body
            assert response.wire.last_arrival is not None
            await asyncio.sleep(0.05)  # the server's close arrives meanwhile
        await connection.aclose()

    asyncio.run(with_server(handler, client))
    assert connections == 2  # the second request went out again on a new connection


@pytest.mark.slow
def test_error_status_with_content_length_and_a_stream_cut_midway() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy")
        await read_request(reader)  # same connection: it was kept
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel")
        await writer.drain()
        writer.close()

    async def client(url: str) -> None:
        connection = Connection(url, connect_timeout_s=5)
        response = await connection.post("/x", b"{}", HEADERS)
        assert (response.status_code, await response.aread()) == (503, b"busy")
        response = await connection.post("/x", b"{}", HEADERS)
        with pytest.raises(httpx.RemoteProtocolError, match="closed the connection mid-body"):
            await response.aread()
        await connection.aclose()

    asyncio.run(with_server(handler, client))


def test_refused_connection_is_a_connect_error() -> None:
    async def client() -> None:
        connection = Connection("http://127.0.0.1:9", connect_timeout_s=5)
        with pytest.raises(httpx.ConnectError):
            await connection.post("/x", b"{}", HEADERS)

    asyncio.run(client())
