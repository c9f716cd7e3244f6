"""The fast lane (`make check`: `pytest -m "not slow"`) is the tests that start no process and
no server. A test not marked slow that starts one fails, naming what it started; in the main
thread at once, before the process or server costs anything."""

import _posixsubprocess
import os
import socket
import subprocess
import threading
from collections.abc import Callable, Generator
from typing import Any

import pytest

_unmarked = False  # whether the test now running is one of the fast lane's
_started: list[str] = []
_earlier: set[threading.Thread] = set()  # threads alive before it: not its doing


def _guard(real: Callable[..., Any], what: Callable[..., str]) -> Callable[..., Any]:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        thread = threading.current_thread()
        if _unmarked and (thread is threading.main_thread() or thread not in _earlier):
            _started.append(what(*args))
            if thread is threading.main_thread():
                raise RuntimeError(_message())
        return real(*args, **kwargs)

    return guarded


def _message() -> str:
    return f"a test not marked slow started {'; '.join(_started)}: mark it @pytest.mark.slow"


def _argv(args: Any, *_: Any) -> str:
    return "the process " + " ".join(os.fsdecode(a) for a in list(args)[:4])[:120]


# subprocess (its own reference) and multiprocessing start processes through fork_exec; a
# server listens.
subprocess._fork_exec = _guard(subprocess._fork_exec, _argv)  # type: ignore[attr-defined]
_posixsubprocess.fork_exec = _guard(_posixsubprocess.fork_exec, _argv)
os.fork = _guard(os.fork, lambda: "a fork")
socket.socket.listen = _guard(  # type: ignore[method-assign]
    socket.socket.listen, lambda sock, *_: f"a server on {sock.getsockname()}"
)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    global _unmarked
    _unmarked = item.get_closest_marker("slow") is None
    _started.clear()
    _earlier.clear()
    _earlier.update(threading.enumerate())
    try:
        return (yield)
    finally:
        _unmarked = False


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call() -> Generator[None, None, None]:
    """A server started from another thread (its owner only waits for it) fails here."""
    yield
    if _started:
        pytest.fail(_message(), pytrace=False)
