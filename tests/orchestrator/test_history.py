"""Per-boot progress folded from a real execution history (moto runs the ASL), and every
state of statemachine/sweep.asl.json has its phase."""

import json
import time
from typing import Any

import boto3
import pytest
from moto import mock_aws
from rich.console import Console

from rigbench.progress import status_table, sweep_table
from rigbench.stack.history import STATE_PHASES, SWEEP_STATES, fold
from rigbench.stack.models import Phase, SweepProgress
from tests.orchestrator.test_definition import definition_text


def _pass(
    name: str, nxt: str | None, result: Any = None, path: str | None = None
) -> dict[str, Any]:
    state: dict[str, Any] = {"Type": "Pass"}
    if result is not None:
        state.update(Result=result, ResultPath=path)
    state.update({"Next": nxt} if nxt else {"End": True})
    return {name: state}


CAUSE = json.dumps({"errorMessage": "the harness exited 1", "errorType": "CommandFailed"})
# The sweep's own state names, with Pass states standing in for the Lambda tasks.
ITERATION = {
    "StartAt": "Launch",
    "States": {
        **_pass("Launch", "AgentOnline?", {"instance_id": "i-0abc"}, "$.instance"),
        "AgentOnline?": {
            "Type": "Choice",
            "Choices": [{"Variable": "$.boot", "NumericEquals": 1, "Next": "HarnessDone?"}],
            "Default": "WaitForRig",
        },
        "WaitForRig": {"Type": "Wait", "Seconds": 0, "Next": "CheckReady"},
        **_pass("CheckReady", "HarnessDone?"),
        "HarnessDone?": {
            "Type": "Choice",
            "Choices": [{"Variable": "$.boot", "NumericEquals": 1, "Next": "PollHarness"}],
            "Default": "StoreResults",
        },
        # What a Catch with ResultPath does: the error lands in the state, then terminate.
        **_pass(
            "PollHarness", "FinishFailed", {"Error": "CommandFailed", "Cause": CAUSE}, "$.error"
        ),
        **_pass("FinishFailed", None),  # a failed boot does not fail the Map
        **_pass("StoreResults", "Finish"),
        **_pass("Finish", None),
    },
}
SWEEP = {
    "StartAt": "ValidateInput",
    "States": {
        **_pass("ValidateInput", "RunBoots"),
        "RunBoots": {
            "Type": "Map",
            "ItemsPath": "$.items",
            "ItemProcessor": {"ProcessorConfig": {"Mode": "INLINE"}, **ITERATION},
            "Next": "SweepFailed",
        },
        "SweepFailed": {"Type": "Fail", "Error": "BootsFailed", "Cause": "1 of 3 boots failed"},
    },
}


@pytest.mark.slow
def test_phases_follow_the_execution() -> None:
    seen: list[SweepProgress] = []
    with mock_aws(config={"stepfunctions": {"execute_state_machine": True}}):
        sfn = boto3.client("stepfunctions", region_name="us-east-1")
        arn = sfn.create_state_machine(
            name="sweep", definition=json.dumps(SWEEP), roleArn="arn:aws:iam::123456789012:role/x"
        )["stateMachineArn"]
        items = [
            {"rig": "torch", "boot": 0},
            {"rig": "torch", "boot": 1},
            {"rig": "jax", "boot": 0},
        ]
        execution = sfn.start_execution(stateMachineArn=arn, input=json.dumps({"items": items}))
        execution_arn = execution["executionArn"]
        while True:
            events = sfn.get_execution_history(executionArn=execution_arn)["events"]
            described = sfn.describe_execution(executionArn=execution_arn)
            seen.append(fold(events, execution_arn=execution_arn))
            # the same events twice, and out of order: the same reading
            assert fold([*events, *reversed(events)], execution_arn=execution_arn) == seen[-1]
            if described["status"] != "RUNNING":
                events = sfn.get_execution_history(executionArn=execution_arn)["events"]
                progress = fold(events, execution_arn=execution_arn, described=described)
                break
            time.sleep(0.05)
    boots = {(b.rig, b.boot): b for b in progress.boots}
    assert set(boots) == {("torch", 0), ("torch", 1), ("jax", 0)}
    assert boots["torch", 0].phase == Phase.TERMINATED
    assert boots["jax", 0].phase == Phase.TERMINATED
    assert boots["torch", 0].instance_id == "i-0abc"
    assert boots["torch", 1].phase == Phase.FAILED
    assert boots["torch", 1].error == "CommandFailed"
    assert boots["torch", 1].cause == "the harness exited 1"
    assert progress.status == "FAILED"
    assert progress.error == "BootsFailed"
    assert progress.cause == "1 of 3 boots failed"
    assert progress.sweep_id == execution_arn.rsplit(":", 1)[-1]
    console = Console(width=160, record=True)
    console.print(sweep_table(progress))
    out = console.export_text()
    assert "terminated" in out
    assert "failed" in out
    assert "the harness exited 1" in out
    console.print(status_table(progress))
    assert "CommandFailed: the harness exited 1" in console.export_text()


def _states(definition: dict[str, Any]) -> tuple[set[str], set[str]]:
    """The names of the top-level states and of the states inside Map iterations."""
    top, inner = set(definition["States"]), set()
    for state in definition["States"].values():
        if state["Type"] == "Map":
            processor = state.get("ItemProcessor") or state["Iterator"]
            nested_top, nested_inner = _states(processor)
            inner |= nested_top | nested_inner
    return top, inner


def test_every_state_of_the_sweep_has_its_phase() -> None:
    top, inner = _states(json.loads(definition_text()))
    inner |= set(json.loads(definition_text("boot"))["States"])
    assert inner, "the sweep has no Map?"
    assert inner - set(STATE_PHASES) == set(), "boot states without a phase in STATE_PHASES"
    assert top - SWEEP_STATES == set(), "sweep states missing from SWEEP_STATES"
    # and nothing named there that the state machine does not have
    assert set(STATE_PHASES) - inner == set()
    assert SWEEP_STATES - top == set()
