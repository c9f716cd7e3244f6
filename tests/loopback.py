"""httpx's functions and clients for the servers tests start on loopback, built without loading
the CA bundle each time.

Every httpx client (one per `httpx.get` call too) builds TLS settings and reads the CA bundle,
about 40 ms of CPU, though these servers speak plain HTTP: the rig tests built 650 of them,
tests/rigs/test_abuse.py spending 12 of its 17 CPU-s there. Here one set is built once and
shared; each call still gets a client and a connection of its own, as with httpx's functions.
"""

import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import httpx
import uvicorn

from rigbench.local.ports import free_port

TLS_NEVER_USED = httpx.create_ssl_context()


def get(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(url, verify=TLS_NEVER_USED, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(url, verify=TLS_NEVER_USED, **kwargs)


def stream(method: str, url: str, **kwargs: Any) -> AbstractContextManager[httpx.Response]:
    return httpx.stream(method, url, verify=TLS_NEVER_USED, **kwargs)


def async_client(**kwargs: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(verify=TLS_NEVER_USED, **kwargs)


@contextmanager
def serve_in_thread(app: Any) -> Iterator[str]:
    """An ASGI app served by uvicorn on a free loopback port in a thread of this process, for
    as long as the block runs; yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
