"""Timed boots end to end: a local jax-vs-torch sweep of two boots each, every boot restarted
once on its instance (the state machine, handlers, the real rigs on CPU, the harness, the
local fleet restarting a rig as systemd would).

Each figure is checked against the record it rests on, never against how fast this machine is:
the phases against the order a boot goes through, the ready time against the rig's own record,
the warm start against the restarted process's."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from harness.boot_phases import BootTiming
from rigbench.cli import app
from tests.local.conftest import local_env, processes_under

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

SWEEP: dict[str, Any] = {
    "sweep_id": "timed-boots",
    "rigs": ["jax", "torch"],
    "model": "random:tiny",
    "boots_per_rig": 2,
    "restarts_per_boot": 1,
    "budget_usd": 2,
    "cells": {"concurrency": [1], "requests_per_cell": 2, "prompt_tokens": 8, "output_tokens": 4,
              "warmup_requests": 1},
    "deadlines": {"ready_s": 600, "bench_s": 900, "instance_s": 1700},
    "waits": {"agent_poll_s": 5, "ready_poll_s": 5, "command_poll_s": 5},
}  # fmt: skip
# The order a boot passes through them (launch_requested may precede EC2's LaunchTime, the zero).
IN_ORDER = ("running", "install_done", "model_on_disk", "weights_loaded", "compiled", "ready",
            "bench_started", "bench_ended")  # fmt: skip


def cli(home: Path, *args: str) -> str:
    env = {**local_env(home), **{k: None for k in os.environ if k.startswith("AWS_")}}
    result = CliRunner().invoke(app, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr[-2000:]
    return result.stdout


def test_a_sweep_times_every_boot_and_compares_time_to_ready(tmp_path: Path) -> None:
    from rigbench.commands.local import run_local

    home = tmp_path / "home"
    console = Console(record=True, width=1000)
    code = run_local(dict(SWEEP), home=home, console=console, quota_vcpus=32)
    terminal = console.export_text()
    assert code == 0, terminal[-4000:]
    assert processes_under(home) == []  # the restarted rigs ended with their instances

    rows = json.loads(cli(home, "results", "--local", "--sweep", "timed-boots", "--format", "json"))
    by_boot = {(r["rig"], r["boot"]): BootTiming.of_row(r) for r in rows}
    assert set(by_boot) == {(rig, boot) for rig in ("jax", "torch") for boot in (1, 2)}
    for (rig, boot), timing in by_boot.items():
        phases = timing.phases
        where = f"{rig} boot {boot}: {phases}"
        assert all(name in phases for name in (*IN_ORDER, "launch_requested", "agent_online")), (
            where
        )
        reached = [phases[name] for name in IN_ORDER]
        assert reached == sorted(reached), where
        assert timing.ready_s == phases["ready"] > 0
        assert timing.price_usd_per_hour is not None
        assert timing.startup_usd == pytest.approx(
            timing.price_usd_per_hour * timing.ready_s / 3600
        )
        # one restart: its ready time is the restarted process's own, from the restart asked for
        (warm,) = timing.warm_starts
        assert warm.error == "", where
        assert warm.ready_s is not None
        assert warm.marks["loading"] >= warm.requested_at
        assert warm.ready_s == pytest.approx(warm.marks["ready"] - warm.requested_at, abs=1e-3)
        assert timing.warm_ready_s == warm.ready_s
        (cell,) = timing.warm_cells  # the first cell, measured again on the restarted rig
        assert cell["concurrency"] == 1
        assert cell["requests_ok"] == 2
        assert cell["gpu"]["available"] is False  # this machine has no GPU, and says so
        assert cell["gpu"]["reason"]

    comparison = json.loads(cli(home, "compare", "timed-boots", "--local", "--format", "json"))
    cells = {c["cell"]: c for c in comparison["cells"]}
    metrics = {m["metric"]["key"]: m for m in cells["start-up"]["metrics"]}
    assert set(metrics) == {"ready_s", "startup_usd", "warm_ready_s"}
    for key in ("ready_s", "warm_ready_s"):
        results = {r["rig"]: r for r in metrics[key]["results"]}
        for rig, result in results.items():
            field = "ready_s" if key == "ready_s" else "warm_ready_s"
            assert result["boots"] == [getattr(by_boot[(rig, b)], field) for b in (1, 2)]
        # the baseline is jax; torch gets a verdict in the words every metric's has
        assert results["torch"]["verdict"] is not None
        noun = "ready" if key == "ready_s" else "warm ready"
        assert results["torch"]["words"].startswith(f"{noun} "), results["torch"]["words"]
        assert any(w in results["torch"]["words"] for w in ("later", "sooner", "same"))

    assert "time to ready (s)" in terminal
    assert "warm restart to ready (s)" in terminal
    page = (home / "report-timed-boots.html").read_text()
    assert "Time to ready" in page
    assert 'id="plot-timeline"' in page
    assert "What the GPU burned" in page  # and on this machine, why nothing was sampled
