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
from typer.testing import CliRunner

from functions.alerts import list_regressions
from functions.execution_input import DEFAULT_REGRESSION_RATIO
from functions.regressions import HEADLINE
from rigbench import cloud
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


def test_a_rig_slower_than_its_history_raises_an_alert(
    emu: Emulation, queue: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rig = "torch@regress"
    first = sweep(emu, rig, 1.0)
    assert first["regressions"] == []
    assert first["regressions_tested"] == 0, "no history yet: nothing to compare"
    later = sweep(emu, rig, 1.5)  # every time 1.5x: latencies up, throughput down

    found = later["regressions"]
    assert later["regressions_tested"] == len(HEADLINE) * CELLS
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
        cloud, "connect_aws", lambda name: BotoStack(boto3.session.Session(), emu.stack_refs())
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
