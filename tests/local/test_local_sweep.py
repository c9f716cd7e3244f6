"""The local sweep end to end: the real state machine, handlers, torch rig and harness.

Proves: the sweep stores results that a new process reads back, no child process survives a
run, an interrupted run (Ctrl-C), or a killed one (the next run cleans up), and a dry run
prints the plan and launches nothing.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from rich.console import Console
from typer.testing import CliRunner, Result

from rigbench.cli import app
from rigbench.commands.local import local_stack, run_local
from rigbench.local import persist
from rigbench.local.home import LocalHome
from rigbench.local.procs import group_alive, read_records
from tests.local.conftest import processes_under, wait_for
from tests.shared_sweep import (
    SHARED_SWEEP_GROUP,
    SHARED_SWEEP_ID,
    SHARED_SWEEP_TIMEOUT_S,
    FinishedSweep,
)

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.xdist_group(SHARED_SWEEP_GROUP)
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


def _input(tmp_path: Path, **overrides: Any) -> Path:
    body = {
        "rigs": ["torch"],
        "model": "random:tiny",
        "boots_per_rig": 1,
        "budget_usd": 1,
        "cells": TINY_CELLS,
        **FAST,
        **overrides,
    }
    path = tmp_path / "input.json"
    path.write_text(json.dumps(body))
    return path


def _env(home: Path) -> dict[str, str]:
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


@pytest.mark.slow
@pytest.mark.timeout(SHARED_SWEEP_TIMEOUT_S)
def test_sweep_stores_results_a_new_process_reads(
    finished_sweep: FinishedSweep, tmp_path: Path
) -> None:
    out = finished_sweep.terminal
    assert finished_sweep.code == 0, out
    assert "rigbench comparison" in out
    assert "c=1" in out
    assert "c=2" in out
    assert f"sweep {SHARED_SWEEP_ID} succeeded" in out
    # The labelled entry names its own rows; every figure says what ran it.
    assert "jax vs jax@b" in out
    assert "local emulation on this machine's CPU; prices and AMIs are emulated" in out
    # Nothing left running, no pidfile left behind.
    assert processes_under(finished_sweep.home) == []
    assert read_records(LocalHome(finished_sweep.home)) == []
    sweep = finished_sweep.copy_to(tmp_path / "home")
    home = sweep.home
    saved = persist.describe(home / "data")
    assert saved is not None
    assert saved.tables["rigbench-ResultsTable"] == 16  # 4 rig entries x 2 boots x 2 cells
    assert any(n.startswith("rigbench-") for n in saved.objects)
    # The harness measured the real rigs: every request of every cell succeeded.
    reports = list((home / "data" / "s3").glob("*/reports*report.json"))
    assert len(reports) == 8
    for report in reports:
        cells = json.loads(report.read_text())["cells"]
        assert [c["concurrency"] for c in cells] == [1, 2]
        assert all(c["requests_ok"] == 3 and c["requests_failed"] == 0 for c in cells), cells
        assert all(c["output_tok_s"] > 0 for c in cells)

    # A new process restores the tables; `rigbench results` queries them as on AWS.
    read = subprocess.run(
        [sys.executable, "-m", "rigbench", "results", "--local", "--sweep", SHARED_SWEEP_ID,
         "--format", "json"],
        cwd=REPO, env=_env(home), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert read.returncode == 0, read.stderr[-2000:]
    rows = json.loads(read.stdout)
    assert sorted((r["sweep_id"], r["rig"], r["model"]) for r in rows) == sorted(
        [(SHARED_SWEEP_ID, rig, "random:tiny") for rig in ("jax", "jax@b", "torch", "torch@wrong")]
        * 4
    )

    # The other commands in-process (the same code a new process runs).
    runner = CliRunner()
    env = {**_env(home), **{k: None for k in os.environ if k.startswith("AWS_")}}

    def cli(*args: str) -> Result:
        return runner.invoke(app, list(args), env=env, catch_exceptions=False)

    # Without AWS credentials `rigbench results` falls back to local, saying so in one line.
    table = cli("results", "--rig", "torch")
    assert table.exit_code == 0, table.stderr[-2000:]
    assert "no AWS credentials found" in table.stderr
    assert len(table.stderr.strip().splitlines()) == 1
    assert "4 result rows" in table.stdout

    # `status` and `reap` work on the local stack too: the sweep's boots from its saved history.
    status = cli("status", "--local", SHARED_SWEEP_ID)
    assert status.exit_code == 0, status.stderr[-2000:]
    assert "SUCCEEDED" in status.stdout
    assert "torch" in status.stdout
    assert "terminated" in status.stdout
    assert "succeeded" in status.stdout
    listing = cli("status", "--local")
    assert listing.exit_code == 0, listing.stderr[-2000:]
    assert SHARED_SWEEP_ID in listing.stdout
    missing = cli("status", "--local", "no-such-sweep")
    assert missing.exit_code == 2
    assert "no local sweep 'no-such-sweep'" in missing.stderr
    reaped = cli("reap", "--local")
    assert reaped.exit_code == 0, reaped.stderr[-2000:]
    assert "nothing to terminate" in reaped.stdout
    assert processes_under(tmp_path) == []


@pytest.mark.slow
@pytest.mark.timeout(SHARED_SWEEP_TIMEOUT_S)
def test_a_rig_made_wrong_on_purpose_is_flagged_outputs_diverge(
    finished_sweep: FinishedSweep, tmp_path: Path
) -> None:
    """torch@wrong, the torch rig with its logits perturbed (a test-only rig setting), against
    the JAX rig: the table names the pair and the first diverging prompt; MCP compare says so."""
    from rigbench.mcp.tools import SweepTools

    out = finished_sweep.terminal
    with local_stack(finished_sweep.copy_to(tmp_path / "home").home) as stack:
        found = SweepTools(stack, ceiling_usd=1).compare(SHARED_SWEEP_ID, None)
    pairs = {p.rigs: p for p in found.output_agreement}
    pair = pairs[("jax", "torch@wrong")]
    assert pair.verdict == "diverge"
    assert pair.diverged > 0
    assert pair.first_diverging is not None
    assert pair.first_diverging.outcome == "diverged"
    assert pairs[("jax", "torch")].verdict == "agree"
    # the terminal table names the pair and its first confidently diverging prompt
    table = out[out.index("output agreement") :]
    row = next(line for line in table.splitlines() if "jax vs torch@wrong" in line)
    assert "outputs diverge" in row
    assert f"first at prompt {pair.first_diverging.prompt_id}," in row
    assert any(v.startswith("jax vs torch@wrong: outputs diverge") for v in found.verdicts)
    dumped = found.model_dump(mode="json")["output_agreement"][0]
    assert {"rigs", "prompts", "identical", "near_tie", "diverged"} <= set(dumped)
    assert {"mean_first_divergence", "verdict"} <= set(dumped)


def _same(reported: str, planned: object) -> bool:
    """A setting the rig reports (text) against the plan's (a scalar): 1 and 1.0 are one; a
    plan's "auto" is the rig's to resolve (torch's compile: off on a CPU), so any value is."""
    if planned == "auto":
        return bool(reported)
    try:
        return float(reported) == float(str(planned))
    except ValueError:
        return reported == str(planned)


@pytest.mark.slow
@pytest.mark.timeout(SHARED_SWEEP_TIMEOUT_S)
def test_each_local_rig_serves_the_plan_stored_with_its_rows(
    finished_sweep: FinishedSweep, tmp_path: Path
) -> None:
    """What each rig said at /provenance (stored with its rows) is the stored plan: the dtype,
    every setting the rig reports by its own name, and the batch slots; torch@wrong's
    `rig_settings` (batched, perturbed) included."""
    from harness.compare import rig_setup
    from rigbench.stack.models import ResultsQuery
    from rigs.registry import get_rig

    with local_stack(finished_sweep.copy_to(tmp_path / "home").home) as stack:
        rows = stack.results(ResultsQuery(sweep=SHARED_SWEEP_ID))
    assert {r.rig for r in rows} == {"jax", "jax@b", "torch", "torch@wrong"}
    compared: dict[str, set[str]] = {}
    for row in rows:
        served, plan = row.provenance["rig"], row.provenance["boot_plan"]
        assert plan["instance_type"] == "local"  # planned for this machine, a CPU
        assert served["dtype"] == plan["dtype"] == "float32", row.rig
        shared = set(served) & set(plan["settings"])
        for key in shared:
            assert _same(served[key], plan["settings"][key]), (row.rig, key, served, plan)
        concurrency = get_rig(row.rig).serve.concurrency_setting
        assert concurrency is not None
        assert rig_setup(served).slots == str(plan["settings"][concurrency]), row.rig
        compared[row.rig] = shared
    assert compared["jax"] >= {"max_model_len", "steps_per_call"}
    assert compared["torch"] >= {"max_model_len", "batching", "max_batch"}
    assert compared["torch@wrong"] >= {"batching", "test_logit_perturbation"}
    wrong = next(r for r in rows if r.rig == "torch@wrong").provenance["rig"]
    assert (wrong["batching"], wrong["test_logit_perturbation"]) == ("batched", "1")


def _start_cli(args: list[str], home: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rigbench", *args],
        cwd=REPO, env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
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

    # ...and the next run reports them and ends them before doing anything else.
    nxt = _start_cli(["run", "--local", "--dry-run", str(sweep)], home)
    out, _ = nxt.communicate(timeout=180)
    assert nxt.returncode == 0, out[-3000:]
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
    # $0.25/h x 2 h instance deadline = $0.50 per boot, 6 boots = $3.00 of $5.00.
    assert "$0.50 per boot; 6 boots reserve $3.00 of the $5.00 budget" in out
    assert out.count("g5g.2xlarge   │ spot") == 6
    assert "no instance was launched" in out
    home = LocalHome(tmp_path / "home")
    assert not any(home.instances.iterdir())  # no local instance either
    assert persist.describe(home.data) is None  # a rehearsal stores nothing
    assert processes_under(tmp_path) == []


@pytest.mark.slow
def test_dry_run_says_why_a_cloud_run_would_fail(
    tmp_path: Path, recwarn: pytest.WarningsRecorder, capfd: pytest.CaptureFixture[str]
) -> None:
    # A refusal is bad input like any other: one line, exit 2, no warning printed before it.
    code, out = _dry(tmp_path, REAL_INPUT, quota_vcpus=64, spot_price=1.0)
    assert code == 2
    assert out.strip().splitlines() == [
        "error: a cloud run of this input would fail: estimate $12.00 (6 boots x $1.0000/h x "
        "2 h deadline) is over the sweep budget $5.00 by $7.00; lower boots or "
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
