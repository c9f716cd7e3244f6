import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from rigbench.local.fleet import LocalFleet
from rigbench.local.home import LocalHome
from rigbench.local.procs import ProcessGroups
from rigs.bootstrap.user_data import BootstrapSpec

REPO = Path(__file__).resolve().parents[2]

# moto's state machine parser logs every failure with the whole parsed definition.
logging.getLogger("moto").setLevel(logging.CRITICAL)


def wait_for(predicate: Callable[[], object], timeout: float = 15.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or predicate}")


def processes_under(root: Path) -> list[str]:
    """Command lines of live processes whose working directory is inside `root`."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            if proc.status() != psutil.STATUS_ZOMBIE and str(proc.cwd()).startswith(str(root)):
                found.append(" ".join(proc.cmdline()))
    return found


def http_rig(spec: BootstrapSpec, port: int) -> list[str]:
    """A stand-in rig for fleet tests: a real HTTP server on the given port."""
    return [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)]


@pytest.fixture
def home(tmp_path: Path) -> Iterator[LocalHome]:
    yield LocalHome(tmp_path / "state")
    assert processes_under(tmp_path) == []


@pytest.fixture
def fleet(home: LocalHome) -> Iterator[LocalFleet]:
    groups = ProcessGroups(home)
    fleet = LocalFleet(home, groups, http_rig)
    try:
        yield fleet
    finally:
        fleet.close()
        groups.close()


def local_env(home: Path) -> dict[str, str]:
    """A child environment with no AWS credentials anywhere boto3 would look."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    nowhere = str(home / "no-such-aws-file")
    return {
        **env,
        "AWS_SHARED_CREDENTIALS_FILE": nowhere,
        "AWS_CONFIG_FILE": nowhere,
        "AWS_EC2_METADATA_DISABLED": "true",
        "PYTHONPATH": str(REPO),
        "RIGBENCH_HOME": str(home),
        "COLUMNS": "160",
    }


TINY_CELLS = {
    "concurrency": [1, 2],
    "requests_per_cell": 2,
    "prompt_tokens": 8,
    "output_tokens": 4,
    "warmup_requests": 1,
}
FAST = {
    "deadlines": {"ready_s": 240, "bench_s": 240, "instance_s": 600},
    "waits": {"agent_poll_s": 1, "ready_poll_s": 1, "command_poll_s": 1},
}


def sweep_input(**overrides: Any) -> dict[str, Any]:
    """One torch boot of random:tiny with two tiny cells: a sweep of under a minute."""
    return {
        "rigs": ["torch"],
        "model": "random:tiny",
        "boots_per_rig": 1,
        "budget_usd": 1,
        "cells": TINY_CELLS,
        **FAST,
        **overrides,
    }
