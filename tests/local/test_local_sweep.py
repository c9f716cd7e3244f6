"""The local sweep end to end: the real state machine, handlers, rigs and harness, read back
from the run's one shared sweep (tests/shared_sweep.py).

Proves: the sweep stores results that a new stack reads back, no child process survives a
run, a rig made wrong on purpose is flagged, and each rig serves the plan stored with its rows.
Runs of their own (interrupted, rehearsed, refused) are in test_local_runs.py.
"""

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from rigbench.cli import app
from rigbench.commands.local import local_stack
from rigbench.local import persist
from rigbench.local.home import LocalHome
from rigbench.local.procs import read_records
from tests.local.conftest import local_env, processes_under
from tests.shared_sweep import (
    SHARED_SWEEP_GROUP,
    SHARED_SWEEP_ID,
    SHARED_SWEEP_TIMEOUT_S,
    FinishedSweep,
)

pytestmark = pytest.mark.xdist_group(SHARED_SWEEP_GROUP)


@pytest.mark.slow
@pytest.mark.timeout(SHARED_SWEEP_TIMEOUT_S)
def test_sweep_stores_results_the_cli_reads_back(
    finished_sweep: FinishedSweep, tmp_path: Path
) -> None:
    out = finished_sweep.terminal
    assert finished_sweep.code == 0, out
    assert "rigbench comparison" in out
    assert "c=1" in out
    assert "c=2" in out
    assert f"sweep {SHARED_SWEEP_ID} succeeded" in out
    # The labelled entry names its own rows; every figure says what ran it.
    assert "jax vs torch@wrong" in out
    assert "local emulation on this machine's CPU; prices and AMIs are emulated" in out
    # Nothing left running, no pidfile left behind.
    assert processes_under(finished_sweep.home) == []
    assert read_records(LocalHome(finished_sweep.home)) == []
    sweep = finished_sweep.copy_to(tmp_path / "home")
    home = sweep.home
    saved = persist.describe(home / "data")
    assert saved is not None
    assert saved.tables["rigbench-ResultsTable"] == 6  # 3 rig entries x 1 boot x 2 cells
    assert any(n.startswith("rigbench-") for n in saved.objects)
    # The harness measured the real rigs: every request of every cell succeeded.
    reports = list((home / "data" / "s3").glob("*/reports*report.json"))
    assert len(reports) == 3
    for report in reports:
        cells = json.loads(report.read_text())["cells"]
        assert [c["concurrency"] for c in cells] == [1, 2]
        assert all(c["requests_ok"] == 3 and c["requests_failed"] == 0 for c in cells), cells
        assert all(c["output_tok_s"] > 0 for c in cells)

    runner = CliRunner()
    env = {**local_env(home), **{k: None for k in os.environ if k.startswith("AWS_")}}

    def cli(*args: str) -> Result:
        return runner.invoke(app, list(args), env=env, catch_exceptions=False)

    # A new stack restores the tables; `rigbench results` queries them as on AWS. (In-process:
    # tests/mcp/test_stdio.py reads a sweep back in a new process, tests/harness/test_cli.py
    # runs `python -m rigbench` itself.)
    read = cli("results", "--local", "--sweep", SHARED_SWEEP_ID, "--format", "json")
    assert read.exit_code == 0, read.stderr[-2000:]
    rows = json.loads(read.stdout)
    assert sorted((r["sweep_id"], r["rig"], r["model"]) for r in rows) == sorted(
        [(SHARED_SWEEP_ID, rig, "random:tiny") for rig in ("jax", "torch", "torch@wrong")] * 2
    )

    # Without AWS credentials `rigbench results` falls back to local, saying so in one line.
    table = cli("results", "--rig", "torch")
    assert table.exit_code == 0, table.stderr[-2000:]
    assert "no AWS credentials found" in table.stderr
    assert len(table.stderr.strip().splitlines()) == 1
    assert "2 result rows" in table.stdout

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
    from analysis.compare import rig_setup
    from rigbench.stack.models import ResultsQuery
    from rigs.registry import get_rig

    with local_stack(finished_sweep.copy_to(tmp_path / "home").home) as stack:
        rows = stack.results(ResultsQuery(sweep=SHARED_SWEEP_ID))
    assert {r.rig for r in rows} == {"jax", "torch", "torch@wrong"}
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
