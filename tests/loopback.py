"""httpx's functions and clients for the servers tests start on loopback, built without loading
the CA bundle each time.

Every httpx client (one per `httpx.get` call too) builds TLS settings and reads the CA bundle,
about 40 ms of CPU, though these servers speak plain HTTP: the rig tests built 650 of them,
tests/rigs/test_abuse.py spending 12 of its 17 CPU-s there. Here one set is built once and
shared; each call still gets a client and a connection of its own, as with httpx's functions.
"""

from contextlib import AbstractContextManager
from typing import Any

import httpx

TLS_NEVER_USED = httpx.create_ssl_context()


def get(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.get(url, verify=TLS_NEVER_USED, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    return httpx.post(url, verify=TLS_NEVER_USED, **kwargs)


def stream(method: str, url: str, **kwargs: Any) -> AbstractContextManager[httpx.Response]:
    return httpx.stream(method, url, verify=TLS_NEVER_USED, **kwargs)


def async_client(**kwargs: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(verify=TLS_NEVER_USED, **kwargs)
