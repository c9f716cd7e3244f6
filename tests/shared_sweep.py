"""One real local sweep per test run, shared by every test that reads a finished sweep.

The sweep (the state machine, handlers, the JAX and torch rigs on CPU, the harness) runs once,
in whichever pytest-xdist worker asks first; the others wait on a file lock and read what it
left. Each test gets its own copy of the sweep's home, so a test that writes (a report, a reap)
never changes what another reads.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock
from rich.console import Console

SHARED_SWEEP_ID = "shared-e2e"
# The modules that read it share one pytest-xdist work unit: they run one after another on
# one worker, which runs the sweep once, while the other worker takes everything else.
SHARED_SWEEP_GROUP = "shared-sweep"
SHARED_SWEEP_INPUT: dict[str, Any] = {
    "sweep_id": SHARED_SWEEP_ID,
    # torch@wrong: the torch rig again under a label, its rows named by the label, with its
    # logits perturbed (a test-only setting), whose outputs the agreement probe must find
    # diverging. (No A/A pair: what it would add, "no difference", is a 5% claim no test can
    # assert without flaking 1 run in 20; benchmarks/verdict_calibration.py measures it.)
    "rigs": ["jax", "torch", "torch@wrong"],
    # (batched: the perturbation needs the engine that also returns logprobs)
    "rig_settings": {"torch@wrong": {"batching": "batched", "test_logit_perturbation": 1.0}},
    "model": "random:tiny",
    # One boot per rig: what two boots give (an interval, a failed boot beside a reported one)
    # is checked on this sweep's data with a boot added (tests/report/test_report.py) and in
    # tests/harness/test_compare.py; each boot costs a rig start.
    "boots_per_rig": 1,
    "budget_usd": 2,
    "cells": {
        "concurrency": [1, 2],
        "requests_per_cell": 3,
        "prompt_tokens": 8,
        "output_tokens": 6,
        "warmup_requests": 1,
    },
    # each boot answers the agreement probe before its cells: room for it on busy cores
    "deadlines": {"ready_s": 600, "bench_s": 600, "instance_s": 1500},
    # the boots' polls well within Step Functions' history cap (25,000 events)
    "waits": {"agent_poll_s": 5, "ready_poll_s": 5, "command_poll_s": 5},
}
# A sweep of three boots takes a couple of minutes on an idle two-core machine and much longer on
# a busy one; the test that runs it (or waits for it) may take this long.
SHARED_SWEEP_TIMEOUT_S = 1500
# Wide enough that no verdict of three rigs wraps: tests find the table's phrases whole.
TERMINAL_WIDTH = 1000


@dataclass(frozen=True)
class FinishedSweep:
    """A finished local sweep: its home directory, its exit code and what it printed."""

    home: Path
    code: int
    terminal: str

    @property
    def report(self) -> Path:
        return self.home / f"report-{SHARED_SWEEP_ID}.html"

    def copy_to(self, destination: Path) -> FinishedSweep:
        """This sweep's home copied to `destination`, for a test that writes into it."""
        shutil.copytree(self.home, destination, symlinks=True)  # bundles link the checkout
        return FinishedSweep(home=destination, code=self.code, terminal=self.terminal)


def run_once(root: Path) -> FinishedSweep:
    """The shared sweep under `root` (a folder every worker of this run shares): run by the
    first caller, read back by the others."""
    from rigbench.commands.local import run_local

    home = root / "home"
    record = root / "finished.json"
    with FileLock(str(root / "sweep.lock")):
        if not record.exists():
            console = Console(record=True, width=TERMINAL_WIDTH)
            # room for all three boots at once (8 vCPU each)
            code = run_local(dict(SHARED_SWEEP_INPUT), home=home, console=console, quota_vcpus=24)
            record.write_text(json.dumps({"code": code, "terminal": console.export_text()}))
    saved = json.loads(record.read_text())
    return FinishedSweep(home=home, code=saved["code"], terminal=saved["terminal"])
