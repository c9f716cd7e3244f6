"""Regression alerts, end to end on the emulation: an earlier sweep stores its rows through
the state machine's own Store step (the history), a later sweep's Summarize compares each rig
with it, publishes what got worse to the stack's SNS topic (read here from a subscribed SQS
queue) and keeps it in the ledger, where `list_regressions` finds it."""

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import typer
from rich.table import Table
from typer.testing import CliRunner

from analysis.metrics import Direction
from functions.alerts import list_regressions
from functions.execution_input import DEFAULT_REGRESSION_RATIO
from functions.regressions import (
    HEADLINE,
    HISTORY_SWEEPS,
    METHOD,
    Regression,
    RegressionCheck,
    find_regressions,
)
from functions.summarize import MAX_OUTPUT_REGRESSIONS
from rigbench.commands import stack_choice
from rigbench.commands.regression_table import check_lines
from rigbench.commands.regressions import regressions_command
from rigbench.emulation import Emulation
from rigbench.mcp.tools import SweepTools
from rigbench.report.writer import store_from, write_trend_report
from rigbench.stack.boto import BotoStack
from tests.orchestrator.conftest import fleet_of, run_sweep, sweep_input

SPREAD = 0.03  # boot to boot, as real boots vary
CELLS = 2  # concurrency 1 and 4 (sweep_input)
runner = CliRunner()


@pytest.fixture
def queue(emu: Emulation) -> Any:
    """An SQS queue subscribed to the stack's alarm topic: what a subscriber receives."""
    sqs, sns = emu.client("sqs"), emu.client("sns")
    url = sqs.create_queue(QueueName=f"alerts-{datetime.now(UTC):%H%M%S%f}")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    sns.subscribe(TopicArn=emu.physical["AlarmTopic"], Protocol="sqs", Endpoint=arn)
    return url


def received(emu: Emulation, url: str) -> list[dict[str, Any]]:
    sqs, messages = emu.client("sqs"), []
    while True:
        batch = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not batch:
            return messages
        messages += [json.loads(m["Body"]) for m in batch]


def sweep(emu: Emulation, rig: str, slowdown: float) -> dict[str, Any]:
    fleet = fleet_of(emu)
    fleet.boot_spread = SPREAD
    fleet.slowdown_by_rig = {rig: slowdown}
    described = run_sweep(emu, sweep_input(rigs=[rig], boots_per_rig=3))
    assert described["status"] == "SUCCEEDED", described
    summary: dict[str, Any] = json.loads(described["output"])
    return summary


@pytest.mark.slow
def test_a_rig_slower_than_its_history_raises_an_alert(
    emu: Emulation, queue: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rig = "torch@regress"
    first = sweep(emu, rig, 1.0)
    assert first["regressions"] == []
    assert first["regressions_tested"] == 0, "no history yet: nothing to compare"
    assert first["regressions_untested"] == {
        "no earlier sweep of the same rig, model, instance type and setup": len(HEADLINE) * CELLS
    }
    later = sweep(emu, rig, 1.5)  # every time 1.5x: latencies up, throughput down

    found = later["regressions"]
    assert later["regressions_tested"] == len(HEADLINE) * CELLS
    assert later["regressions_found"] == len(found)
    assert {(r["cell_label"], r["metric"]) for r in found} == {
        (cell, metric) for cell in ("c=1", "c=4") for metric in HEADLINE
    }
    for regression in found:
        assert regression["rig"] == rig
        assert regression["worse_by"] == pytest.approx(1.5, rel=1e-6)
        assert (regression["n_now"], regression["n_history"]) == (3, 3)
        assert regression["history_sweeps"] == [first["sweep_id"]]
        assert regression["threshold"] == DEFAULT_REGRESSION_RATIO
        assert regression["p_holm"] < 0.05
        assert (
            regression["report"] == f"s3://{emu.physical['ArtifactBucket']}/{later['report_key']}"
        )

    messages = received(emu, queue)
    assert len(messages) == len(found)
    body = next(m["Message"] for m in messages if "output_tok_s" in m["Subject"])
    assert "1.50x worse than its history" in body
    assert "3 boots now vs 3 boots in 1 earlier sweep(s)" in body
    assert "Holm-adjusted over 6 comparisons" in body
    assert later["report_key"] in body

    since = datetime.now(UTC) - timedelta(days=1)
    stored = list_regressions(
        emu.client("dynamodb"), emu.table("LedgerTable"), since=since, until=datetime.now(UTC),
        sweep=later["sweep_id"],
    )  # fmt: skip
    assert {(r.cell, r.metric) for r in stored} == {(r["cell"], r["metric"]) for r in found}

    # `rigbench regressions` lists them from the ledger, by Query
    monkeypatch.setattr(
        stack_choice,
        "connect_aws",
        lambda name: BotoStack(boto3.session.Session(), emu.stack_refs()),
    )
    app = typer.Typer()
    app.command()(regressions_command)
    listed = runner.invoke(app, ["--sweep", later["sweep_id"], "--format", "json"])
    assert listed.exit_code == 0, listed.output
    assert {(r["cell"], r["metric"]) for r in json.loads(listed.output)} == {
        (r["cell"], r["metric"]) for r in found
    }
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    table = runner.invoke(app, ["--since", today], env={"COLUMNS": "300"})
    assert table.exit_code == 0, table.output
    assert "6 regression alert(s)" in table.output
    assert later["sweep_id"] in table.output
    # the rig's trend page marks them
    page = write_trend_report(
        store_from(emu.client, emu.stack_refs()), tmp_path / "trend.html",
        rig=rig, model="random:tiny", instance_type=None, since=since,
    ).read_text()  # fmt: skip
    assert "6 regression alert(s) in this period, in 1 sweep(s)" in page
    assert page.count('"name":"regression alert"') == len(found)  # a cross on each point
    assert "1.50x (&gt; 1.05x)" in page
    assert "3 boots now vs 3 boots in 1 earlier sweep(s)" in page

    # and so does MCP `list_regressions`, on the same stack client
    stack = BotoStack(boto3.session.Session(), emu.stack_refs())
    listed_by_mcp = SweepTools(stack, 1.0).list_regressions(since=None, sweep=later["sweep_id"])
    assert {(r.cell, r.metric) for r in listed_by_mcp.regressions} == {
        (r["cell"], r["metric"]) for r in found
    }
    assert "Holm" in listed_by_mcp.method
    bad = runner.invoke(app, ["--format", "xml"])
    assert bad.exit_code == 2
    assert "--format must be table or json, not 'xml'" in bad.output


@pytest.mark.slow
def test_matching_history_or_a_change_within_the_ratio_raises_none(
    emu: Emulation, queue: Any
) -> None:
    rig = "torch@steady"
    sweep(emu, rig, 1.0)
    same = sweep(emu, rig, 1.0)
    assert same["regressions"] == []
    assert same["regressions_missing"] == ""
    assert same["regressions_tested"] == len(HEADLINE) * CELLS, "tested, not skipped"
    # 3% slower on every boot: a real change, but within the 5% the alert allows
    within = sweep(emu, rig, 1.03)
    assert within["regressions"] == []
    assert within["regressions_tested"] == len(HEADLINE) * CELLS
    assert received(emu, queue) == []


def row(
    sweep_id: str, boot: int, tok_s: float, *, day: int, dtype: str = "float16"
) -> dict[str, Any]:
    """A results row as functions/store.py writes it (the fields the check reads)."""
    return {
        "sweep_id": sweep_id, "rig": "torch", "boot": boot, "model": "m",
        "instance_type": "g5g.2xlarge", "cell": "c00001",
        "started_at": f"2026-11-{day:02d}T00:00:{boot:02d}+00:00",
        "provenance": {"boot_plan": {"dtype": dtype, "settings": {"batching": "continuous"}}},
        "metrics": {
            "concurrency": 1, "requests_ok": 4, "output_tokens": 64, "output_tok_s": tok_s,
            "ttft_ms": {"p50": 1000 / tok_s}, "tpot_ms": {"p50": 100 / tok_s},
        },
    }  # fmt: skip


def boots(
    sweep_id: str, centre: float, *, day: int, dtype: str = "float16"
) -> list[dict[str, Any]]:
    return [
        row(sweep_id, b, centre * f, day=day, dtype=dtype) for b, f in enumerate((1, 1.03, 0.97))
    ]


def check(now: list[dict[str, Any]], history: list[dict[str, Any]]) -> RegressionCheck:
    return find_regressions(
        now, {"torch": history + now}, sweep_id=now[0]["sweep_id"],
        started_at=now[0]["started_at"], regression_ratio=1.05,
    )  # fmt: skip


def test_history_is_the_same_setup_in_the_latest_earlier_sweeps() -> None:
    now = boots("now", 50.0, day=20)
    # an older fast era, then HISTORY_SWEEPS sweeps at today's speed: only the latter count
    old = [r for d in range(1, 4) for r in boots(f"old{d}", 100.0, day=d)]
    recent = [r for d in range(10, 10 + HISTORY_SWEEPS) for r in boots(f"r{d}", 50.0, day=d)]
    assert check(now, old + recent).regressions == []
    assert check(now, old).family == len(HEADLINE)
    assert {r.metric for r in check(now, old).regressions} == set(HEADLINE)
    # float32 boots are another setup: no history for a float16 sweep
    other = check(now, [r for r in boots("f32", 100.0, day=5, dtype="float32")])
    assert other.family == 0
    assert other.untested == {
        "no earlier sweep of the same rig, model, instance type and setup": len(HEADLINE)
    }
    # a later sweep is not history
    assert check(now, boots("later", 100.0, day=25)).family == 0
    # nor one whose requests asked for something else (rows carry their workload)
    prefix = {"kind": "shared_prefix", "groups": 2, "prefix_tokens": 8, "suffix_tokens": 4,
              "output_tokens": 4, "words": "shared prefix ..."}  # fmt: skip
    shared = [{**r, "workload": prefix} for r in old]
    assert check(now, shared).family == 0
    renamed = {**prefix, "words": "other words, same workload"}
    assert check(
        [{**r, "workload": prefix} for r in now], [{**r, "workload": renamed} for r in old]
    ).family == len(HEADLINE)


def test_one_boot_now_is_untested_and_said_so() -> None:
    found = check(boots("now", 50.0, day=20)[:1], boots("then", 100.0, day=1)[:1])
    assert found.family == 0
    assert found.untested == {"no test possible: 1 boot": len(HEADLINE)}


def test_a_local_sweep_says_what_its_check_found() -> None:
    lines = check_lines([], {"regressions_tested": 6}, 1.05, "home")
    assert lines == [
        f"no regression: 6 comparisons with the rigs' earlier sweeps, none worse by more than "
        f"1.05x ({METHOD})"
    ]
    reason = "no earlier sweep of the same rig, model, instance type and setup"
    untested = {"regressions_tested": 0, "regressions_untested": {reason: 6}}
    assert check_lines([], untested, 1.05, "home") == [f"no regression check possible: {reason}: 6"]
    assert "did not run:[/] boom" in str(
        check_lines([], {"regressions_missing": "boom"}, 1.05, "h")[0]
    )
    alerts = check(boots("now", 50.0, day=20), boots("then", 100.0, day=1)).regressions
    table, kept = check_lines(alerts, {}, 1.05, "the home")
    assert isinstance(table, Table)
    assert table.row_count == len(HEADLINE)
    assert kept == "kept in the home"


@pytest.mark.slow
def test_an_alert_that_cannot_be_published_fails_nothing_else(emu: Emulation) -> None:
    lam, name = emu.client("lambda"), emu.physical["SummarizeFunction"]
    env = lam.get_function_configuration(FunctionName=name)["Environment"]["Variables"]
    gone = env["ALERT_TOPIC_ARN"] + "-deleted"
    rig = "torch@unheard"
    sweep(emu, rig, 1.0)
    lam.update_function_configuration(
        FunctionName=name, Environment={"Variables": {**env, "ALERT_TOPIC_ARN": gone}}
    )
    try:
        later = sweep(emu, rig, 1.5)  # SUCCEEDED: asserted by sweep()
    finally:
        lam.update_function_configuration(FunctionName=name, Environment={"Variables": env})
    assert later["regressions"] == []
    assert "NotFound" in later["regressions_missing"], later["regressions_missing"]
    assert later["report_key"], "the rest of the summary is there"


def test_the_output_holds_a_bounded_number_of_regressions() -> None:
    longest = Regression(
        sweep_id="s" * 63, sweep_started_at="2026-12-03T00:00:00+00:00", rig="r" * 32 + "@b" * 16,
        model="m" * 256, instance_type="g5g.2xlarge", cell="r0000000.0001", cell_label="rate=1/s",
        metric="output_tok_s", direction=Direction.HIGHER_IS_BETTER, now=1.0, history=2.0,
        worse_by=2.0, threshold=1.05, p_value=1e-9, p_holm=1e-7, n_now=10, n_history=50,
        history_sweeps=["s" * 63] * HISTORY_SWEEPS, family=1536, report="s3://" + "k" * 300,
    )  # fmt: skip
    output = [longest.model_dump(mode="json")] * MAX_OUTPUT_REGRESSIONS
    assert len(json.dumps(output).encode()) < 256 * 1024 / 4
