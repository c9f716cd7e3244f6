"""Per-boot progress folded from a real execution history (moto runs the ASL)."""

import json
import time
from typing import Any

import boto3
from moto import mock_aws
from rich.console import Console

from rigbench.local.progress import Phase, SweepProgress, phase_of_state


def _pass(
    name: str, nxt: str | None, result: Any = None, path: str | None = None
) -> dict[str, Any]:
    state: dict[str, Any] = {"Type": "Pass"}
    if result is not None:
        state.update(Result=result, ResultPath=path)
    state.update({"Next": nxt} if nxt else {"End": True})
    return {name: state}


CAUSE = json.dumps({"errorMessage": "the harness exited 1", "errorType": "CommandFailed"})
ITERATION = {
    "StartAt": "Launch",
    "States": {
        **_pass("Launch", "Broken?", {"instance_id": "i-0abc"}, "$.instance"),
        "Broken?": {
            "Type": "Choice",
            "Choices": [{"Variable": "$.boot", "NumericEquals": 1, "Next": "Dispatch bench"}],
            "Default": "Wait agent",
        },
        "Wait agent": {"Type": "Wait", "Seconds": 0, "Next": "Check ready"},
        **_pass("Check ready", "Dispatch bench"),
        "Dispatch bench": {
            "Type": "Choice",
            "Choices": [{"Variable": "$.boot", "NumericEquals": 1, "Next": "Caught"}],
            "Default": "Store results",
        },
        # What a Catch with ResultPath does: the error lands in the state, then terminate.
        **_pass(
            "Caught", "Terminate failed", {"Error": "CommandFailed", "Cause": CAUSE}, "$.error"
        ),
        **_pass("Terminate failed", None),  # a failed boot does not fail the Map
        **_pass("Store results", "Terminate"),
        **_pass("Terminate", None),
    },
}
SWEEP = {
    "StartAt": "Validate input",
    "States": {
        **_pass("Validate input", "Boots"),
        "Boots": {
            "Type": "Map",
            "ItemsPath": "$.items",
            "ItemProcessor": {"ProcessorConfig": {"Mode": "INLINE"}, **ITERATION},
            "Next": "SweepFailed",
        },
        "SweepFailed": {"Type": "Fail", "Error": "BootsFailed", "Cause": "1 of 3 boots failed"},
    },
}


def test_phases_follow_the_execution() -> None:
    progress = SweepProgress()
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
        while True:
            events = sfn.get_execution_history(executionArn=execution["executionArn"])["events"]
            progress.feed(events)
            progress.feed(events)  # seen again: no effect
            if (
                sfn.describe_execution(executionArn=execution["executionArn"])["status"]
                != "RUNNING"
            ):
                progress.feed(
                    sfn.get_execution_history(executionArn=execution["executionArn"])["events"]
                )
                break
            time.sleep(0.05)
    boots = {(b.rig, b.boot): b for b in progress.boots.values()}
    assert set(boots) == {("torch", 0), ("torch", 1), ("jax", 0)}
    assert boots["torch", 0].phase == Phase.TERMINATED
    assert boots["jax", 0].phase == Phase.TERMINATED
    assert boots["torch", 0].instance_id == "i-0abc"
    assert boots["torch", 1].phase == Phase.FAILED
    assert boots["torch", 1].error == "the harness exited 1"
    assert progress.status == "FAILED"
    assert progress.error == "1 of 3 boots failed"
    console = Console(width=140, record=True)
    console.print(progress.table())
    out = console.export_text()
    assert "terminated" in out
    assert "failed" in out
    assert "the harness exited 1" in out


def test_state_names_map_to_phases() -> None:
    assert phase_of_state("LaunchInstance") == Phase.LAUNCHING
    assert phase_of_state("WaitForAgent") == Phase.WAITING_READY
    assert phase_of_state("CheckRigReady") == Phase.WAITING_READY
    assert phase_of_state("PollBenchmark") == Phase.BENCHMARKING
    assert phase_of_state("StoreResults") == Phase.STORING
    assert phase_of_state("TerminateInstance") == Phase.TERMINATING
    assert phase_of_state("Quota") is None
