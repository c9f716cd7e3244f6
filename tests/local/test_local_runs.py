"""Local sweeps of their own, each as small as it can be: an interrupted run (Ctrl-C) or a
killed one (the next run cleans up) leaves no process; a dry run prints the plan and launches
nothing; bad input is refused before anything starts."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from rich.console import Console

from rigbench.commands.local import run_local
from rigbench.local import executions, persist
from rigbench.local.home import LocalHome
from rigbench.local.procs import group_alive, read_records
from tests.local.conftest import REPO, local_env, processes_under, sweep_input, wait_for


def _input(tmp_path: Path, **overrides: Any) -> Path:
    body = sweep_input(**overrides)
    path = tmp_path / "input.json"
    path.write_text(json.dumps(body))
    return path


def _start_cli(args: list[str], home: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rigbench", *args],
        cwd=REPO, env=local_env(home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _rig_groups(home: Path) -> list[int]:
    return [r.pgid for _, r in read_records(LocalHome(home)) if r and r.label.startswith("rig ")]


@pytest.mark.slow
def test_ctrl_c_then_kill_leave_no_process_and_the_next_run_cleans_up(tmp_path: Path) -> None:
    home = tmp_path / "home"
    sweep = _input(tmp_path, boots_per_rig=2)

    # 1. Ctrl-C mid-sweep: the CLI stops the execution and every local instance.
    cli = _start_cli(["run", "--local", str(sweep), "--quota-vcpus", "16"], home)
    wait_for(lambda: len(_rig_groups(home)) == 2, timeout=180, what="two rigs started")
    groups = _rig_groups(home)
    cli.send_signal(signal.SIGINT)
    out, _ = cli.communicate(timeout=120)
    assert cli.returncode == 130, out[-3000:]
    assert "interrupted" in out
    assert not any(group_alive(g) for g in groups)
    assert read_records(LocalHome(home)) == []
    assert processes_under(tmp_path) == []

    # 2. SIGKILL of the CLI and of its watchdog: the rig processes are orphaned...
    # (no --local: without AWS credentials `rigbench run` runs locally and says so)
    cli = _start_cli(["run", str(sweep), "--quota-vcpus", "8"], home)
    wait_for(lambda: len(_rig_groups(home)) == 1, timeout=180, what="a rig started")
    orphans = _rig_groups(home)
    watchdogs = [
        p for p in psutil.Process(cli.pid).children()
        if "rigbench.local.watchdog" in " ".join(p.cmdline())
    ]  # fmt: skip
    assert len(watchdogs) == 1
    for proc in (*watchdogs, psutil.Process(cli.pid)):
        proc.kill()
    out, _ = cli.communicate(timeout=30)
    assert out.splitlines()[0].startswith("no AWS credentials found: using the local")
    time.sleep(0.5)
    assert all(group_alive(g) for g in orphans)

    # ...and the next run (in-process: the code the CLI runs) reports them and ends them
    # before doing anything else.
    console = Console(record=True, width=200)
    code = run_local(sweep, dry_run=True, home=home, console=console)
    out = console.export_text()
    assert code == 0, out[-3000:]
    assert "cleaned up after an earlier run" in out
    assert f"process group {orphans[0]}" in out
    assert not any(group_alive(g) for g in orphans)
    assert read_records(LocalHome(home)) == []
    assert processes_under(tmp_path) == []


REAL_INPUT = {
    "rigs": ["vllm", "torch"],
    "model": "google/gemma-4-E2B-it",
    "boots_per_rig": 3,
    "budget_usd": 5,
    "cells": {"concurrency": [1, 8, 32], "requests_per_cell": 64},
}


def _dry(tmp_path: Path, body: dict[str, Any], **kwargs: Any) -> tuple[int, str]:
    path = tmp_path / "real.json"
    path.write_text(json.dumps(body))
    console = Console(record=True, width=200)
    code = run_local(path, dry_run=True, home=tmp_path / "home", console=console, **kwargs)
    return code, console.export_text()


@pytest.mark.slow
def test_dry_run_prints_the_plan_and_launches_nothing(tmp_path: Path) -> None:
    code, out = _dry(tmp_path, REAL_INPUT, quota_vcpus=64, spot_price=0.25)
    assert code == 0, out
    assert "vllm, torch x 3 boots of google/gemma-4-E2B-it on g5g.2xlarge (spot)" in out
    assert "64 vCPU (emulated) - 0 in use = 64" in out
    assert "at most 6 instances at once" in out  # 8 fit; the sweep has 6 boots
    assert "planned against the embedded emulation" in out
    assert "(emulated figures)" in out
    # MaxPrice $0.25/h + 25% = $0.3125/h x (2 h instance deadline + 120 s for the one relaunch
    # allowed) = $0.635 per boot, 6 boots = $3.81 of $5.00.
    said = " ".join(out.split())
    assert (
        "each boot reserves $0.3125/h x (2 h deadline + 1 relaunch x 120 s) = $0.64; "
        "6 boots reserve $3.81 of " in said
    )
    assert out.count("g5g.2xlarge   │ spot") == 6
    assert "no instance was launched" in out
    home = LocalHome(tmp_path / "home")
    assert not any(home.instances.iterdir())  # no local instance either
    assert persist.describe(home.data) is None  # a rehearsal stores nothing
    assert processes_under(tmp_path) == []


@pytest.mark.slow
def test_a_dry_run_of_two_rigs_by_thirty_boots_is_accepted_at_the_default_waits(
    tmp_path: Path,
) -> None:
    # 60 boots, each polling in its own execution: one history held 9 at these waits before
    body = {**REAL_INPUT, "boots_per_rig": 30, "budget_usd": 10}
    code, out = _dry(tmp_path, body, quota_vcpus=64, spot_price=0.05)
    assert code == 0, out
    assert "vllm, torch x 30 boots of google/gemma-4-E2B-it on g5g.2xlarge (spot)" in out
    assert "at most 8 instances at once" in out
    assert "60 boots reserve $7.62 of the $10.00 budget" in " ".join(out.split())
    assert out.count("g5g.2xlarge   │ spot") == 60
    assert "no instance was launched" in out
    assert processes_under(tmp_path) == []


@pytest.mark.slow
def test_dry_run_of_an_adaptive_sweep_plans_its_first_round_and_reserves_its_worst_case(
    tmp_path: Path,
) -> None:
    body = {**REAL_INPUT, "boots_per_rig": "auto", "max_boots_per_rig": 4, "budget_usd": 6}
    code, out = _dry(tmp_path, body, quota_vcpus=64, spot_price=0.25)
    assert code == 0, out
    assert "vllm, torch x up to 4 boots (auto: rounds at [3, 4] per rig) of google/" in out
    # the worst case, 2 rigs x 4 boots x $0.635, is reserved up front
    assert "= $0.64; 8 boots reserve $5.08 of the $6.00 budget" in " ".join(out.split())
    assert "the first round would launch" in out
    assert out.count("g5g.2xlarge   │ spot") == 6
    assert "later rounds launch up to 2 more boots" in out
    assert processes_under(tmp_path) == []


@pytest.mark.slow
def test_dry_run_says_why_a_cloud_run_would_fail(
    tmp_path: Path, recwarn: pytest.WarningsRecorder, capfd: pytest.CaptureFixture[str]
) -> None:
    # A refusal is bad input like any other: one line, exit 2, no warning printed before it.
    code, out = _dry(tmp_path, REAL_INPUT, quota_vcpus=64, spot_price=1.0)
    assert code == 2
    assert out.strip().splitlines() == [
        "error: a cloud run of this input would fail: estimate $12.20 (6 boots x $1.0000/h x "
        "(2 h deadline + 1 relaunch x 120 s)) is over the sweep budget $5.00 by $7.20; lower "
        "boots or "
        "deadlines.instance_s, or raise budget_usd"
    ]
    code, out = _dry(tmp_path, REAL_INPUT, quota_vcpus=0)
    assert code == 2
    assert len(out.strip().splitlines()) == 1, out
    assert "quota" in out.lower()
    assert not [w for w in recwarn if "metrics" in str(w.message)]
    assert "Warning" not in capfd.readouterr().err


def test_bad_input_is_refused_before_anything_starts(tmp_path: Path) -> None:
    console = Console(record=True, width=200)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**REAL_INPUT, "budget_usd": 0}))
    assert run_local(bad, home=tmp_path / "home", console=console) == 2
    assert "budget_usd" in console.export_text()
    bad.write_text("{not json")
    assert run_local(bad, dry_run=True, home=tmp_path / "home", console=console) == 2
    assert "not valid JSON" in console.export_text()
    assert not (tmp_path / "home").exists()


@pytest.mark.slow
def test_run_refuses_what_the_dry_run_refuses_before_an_execution_starts(tmp_path: Path) -> None:
    # The stack's per-sweep budget (template.yaml's SweepBudgetUsd, 10) is known only to the
    # stack: the input alone is valid, and a run used to start an execution that failed.
    path = _input(tmp_path, budget_usd=50)
    for dry_run in (True, False):
        console = Console(record=True, width=200)
        code = run_local(path, dry_run=dry_run, home=tmp_path / "home", console=console)
        lines = console.export_text().strip().splitlines()
        assert code == 2
        assert len(lines) == 1, lines
        assert "budget_usd: budget $50.00 is above the stack's per-sweep budget $10.00" in lines[0]
    home = LocalHome(tmp_path / "home")
    assert executions.load_all(home.root) == []
    assert not any(home.instances.iterdir())
    assert processes_under(tmp_path) == []
