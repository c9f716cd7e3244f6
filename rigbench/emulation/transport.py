"""botocore's requests to the emulation's endpoint served by moto's WSGI app in this process.

The moto server's HTTP hop is most of the CPU a test spends outside the handlers: werkzeug's
server closes every connection after one response, so each call opens a TCP connection,
starts a server thread, writes and parses HTTP on both sides and logs a line (together about
a third of tests/orchestrator/test_fault_matrix.py's CPU). A client in this process gets the
same answer from the same app without the socket: the request becomes the WSGI environ
werkzeug's server (with moto's request handler) would build from it, and the app's answer the
response botocore would have read. The server still runs for other processes (the local
fleet's instances, `--local` commands' children).
"""

import io
import sys
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any
from urllib.parse import unquote, urlsplit

from botocore.awsrequest import AWSPreparedRequest, AWSRequest, AWSResponse
from botocore.compat import HTTPHeaders
from botocore.httpsession import URLLib3Session
from moto.core.request import (
    PRESERVED_HEADER_NAMES_ENVIRON_KEY,
    environ_key_for_header,
    should_preserve_original_header_name,
)
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.test import run_wsgi_app

_METHODS_EXPECTING_BODY = frozenset({"PATCH", "POST", "PUT"})


class _Body(io.BytesIO):
    """A response body as botocore reads urllib3's: whole, streamed or in parts."""

    def stream(self, **kwargs: Any) -> Iterator[bytes]:
        while chunk := self.read(kwargs.get("amt") or 1 << 16):
            yield chunk


def _bytes(body: Any) -> bytes:
    if body is None:
        return b""
    if isinstance(body, bytes | bytearray):
        return bytes(body)
    if isinstance(body, str):
        return body.encode()
    data = body.read()
    return data.encode() if isinstance(data, str) else bytes(data)


def _header_text(value: str | bytes) -> str:
    # http.client sends a str header as latin-1 and the server reads it back the same way.
    return value.decode("latin-1") if isinstance(value, bytes) else value


def wsgi_environ(request: AWSRequest | AWSPreparedRequest, body: bytes) -> dict[str, Any]:
    """The environ werkzeug's server with moto's request handler builds for `request`."""
    url = urlsplit(str(request.url))
    target = url.path + (f"?{url.query}" if url.query else "")
    headers = [(str(k), _header_text(v)) for k, v in request.headers.items()]
    names = {k.lower() for k, _ in headers}
    if "host" not in names:
        headers.insert(0, ("Host", url.netloc))
    if "content-length" not in names and (body or request.method in _METHODS_EXPECTING_BODY):
        headers.append(("Content-Length", str(len(body))))
    environ: dict[str, Any] = {
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": url.scheme,
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "REQUEST_METHOD": str(request.method),
        "SCRIPT_NAME": "",
        "PATH_INFO": _latin1(unquote(url.path)),
        "QUERY_STRING": _latin1(url.query),
        "REQUEST_URI": _latin1(target),
        "RAW_URI": _latin1(target),
        "REMOTE_ADDR": "127.0.0.1",
        "REMOTE_PORT": 0,
        "SERVER_NAME": url.hostname or "",
        "SERVER_PORT": str(url.port or ""),
        "SERVER_PROTOCOL": "HTTP/1.1",
    }
    for name, value in headers:
        if "_" in name:
            continue  # werkzeug's server drops these; moto keeps S3 metadata's, below
        key = environ_key_for_header(name)
        value = value.replace("\r\n", "")
        if key in environ and key.startswith("HTTP_"):
            value = f"{environ[key]},{value}"
        environ[key] = value
    dashed = {environ_key_for_header(n) for n, _ in headers if "_" not in n}
    preserved: dict[str, str] = {}
    values: dict[str, list[str]] = {}
    for name, value in headers:
        key = environ_key_for_header(name)
        if should_preserve_original_header_name(name) and key not in dashed:
            preserved.setdefault(key, name)
            values.setdefault(key, []).append(value.replace("\r\n", ""))
    environ.update({key: ",".join(v) for key, v in values.items()})
    environ[PRESERVED_HEADER_NAMES_ENVIRON_KEY] = preserved
    return environ


def _latin1(text: str) -> str:
    """werkzeug's `_wsgi_encoding_dance`: WSGI carries text as latin-1 of its UTF-8."""
    return text.encode().decode("latin-1")


@cache
def moto_app() -> DomainDispatcherApplication:
    """moto's server app, one per process: its per-service apps find the emulated account in
    moto's process-wide backends, so every emulation this process runs can share them (each
    costs about 5 ms to build)."""
    return DomainDispatcherApplication(create_backend_app)


class InProcessTransport:
    """While installed, every botocore request to the server on `port` from this process is
    served by moto's app on the caller's thread; any other request goes out as before."""

    def __init__(self, port: int) -> None:
        # moto's Step Functions calls its Lambda tasks through http://localhost:{port}.
        self.prefixes = tuple(f"http://{host}:{port}/" for host in ("127.0.0.1", "localhost"))
        self.app = moto_app()
        self._original: Callable[..., Any] | None = None

    def serve(self, request: AWSRequest | AWSPreparedRequest) -> AWSResponse:
        body = _bytes(request.body)
        app_iter, status, headers = run_wsgi_app(self.app, wsgi_environ(request, body))
        try:
            content = b"".join(app_iter)
        finally:
            close = getattr(app_iter, "close", None)
            if close is not None:
                close()
        if request.method == "HEAD":
            content = b""  # the server writes no body for HEAD
        response = AWSResponse(
            str(request.url),
            int(status.split(" ", 1)[0]),
            HTTPHeaders.from_pairs(list(headers.items())),
            _Body(content),
        )
        if not request.stream_output:
            response.content  # noqa: B018 - read at once, as botocore's session does
        return response

    def install(self) -> None:
        original = URLLib3Session.send
        self._original = original
        transport = self

        def send(session: URLLib3Session, request: AWSRequest | AWSPreparedRequest) -> AWSResponse:
            if str(request.url).startswith(transport.prefixes):
                return transport.serve(request)
            return original(session, request)

        URLLib3Session.send = send  # type: ignore[method-assign,assignment]

    def uninstall(self) -> None:
        if self._original is not None:
            URLLib3Session.send = self._original  # type: ignore[method-assign]
            self._original = None
