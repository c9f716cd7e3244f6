"""Each boot's execution name (unique per sweep id, within Step Functions' 80 characters) and
stopping an ended sweep's boot executions, on moto's Step Functions."""

import json
import re

import boto3
from moto import mock_aws

from functions.boot_executions import (
    MAX_NAME,
    boot_execution_arn,
    boot_execution_name,
    stop_boot_executions,
)
from functions.execution_input import MAX_BOOTS_PER_RIG, RIG_PATTERN, SWEEP_ID_PATTERN

# Step Functions refuses whitespace, brackets, wildcards, " # % \ ^ | ~ ` $ & , ; : / and
# control characters in a name.
NAME = re.compile(r"^[^\s<>{}\[\]?*\"#%\\^|~`$&,;:/\x00-\x1f\x7f]{1,80}$")


def test_a_name_reads_as_sweep_rig_and_boot() -> None:
    assert boot_execution_name("nightly", "jax@b", 3) == "nightly-jax@b-3"


def test_the_longest_sweep_id_and_rig_still_make_distinct_names_within_80_characters() -> None:
    rig, boot = "r" * 32 + "@" + "l" * 15, MAX_BOOTS_PER_RIG
    assert re.match(RIG_PATTERN, rig)
    first, second = "a" * 62 + "1", "a" * 62 + "2"
    assert re.match(SWEEP_ID_PATTERN, first)
    names = {boot_execution_name(sweep, rig, boot) for sweep in (first, second)}
    assert len(names) == 2
    for name in names:
        assert len(name) == MAX_NAME
        assert NAME.match(name), name
        assert name.startswith("a" * 19)
        assert name.endswith(f"-{rig}-{boot}")


def test_only_the_boot_executions_still_running_are_stopped() -> None:
    # moto's plain backend: an execution runs until stopped (the emulation, once started in
    # this process, turns on executing state machines for every later mock)
    with mock_aws(config={"stepfunctions": {"execute_state_machine": False}}):
        sfn = boto3.client("stepfunctions", region_name="us-east-1")
        machine = sfn.create_state_machine(
            name="boot",
            definition=json.dumps({"StartAt": "P", "States": {"P": {"Type": "Pass", "End": True}}}),
            roleArn="arn:aws:iam::123456789012:role/boot",
        )["stateMachineArn"]
        for boot in (1, 2):
            sfn.start_execution(stateMachineArn=machine, name=boot_execution_name("s", "jax", boot))
        ended = boot_execution_arn(machine, boot_execution_name("s", "jax", 2))
        sfn.stop_execution(executionArn=ended)
        # boot 3 never started; another sweep's boot is not named
        stopped = stop_boot_executions(sfn, machine, "s", [("jax", 1), ("jax", 2), ("jax", 3)])
        assert stopped == [boot_execution_arn(machine, "s-jax-1")]
        assert sfn.describe_execution(executionArn=stopped[0])["status"] == "ABORTED"
