"""Each boot of a sweep runs as its own execution of the boot state machine
(statemachine/boot.asl.json), started and waited for by the sweep's RunBoots Map
(`states:startExecution.sync:2`). Here: the name each gets, and ending those still running when
their sweep ended some other way.

A name is unique for as long as its sweep id (which names one execution only), so a retried
start finds the execution already started instead of starting a second boot. rigbench does not
rely on Step Functions stopping the execution a .sync Task waits for when its parent is stopped
(moto's parser does not): the sweep's end handler and the reaper stop the sweep's boot
executions themselves (`stop_boot_executions`).
"""

import hashlib
from collections.abc import Iterable
from typing import Any

from botocore.exceptions import ClientError

from functions.errors import error_code
from functions.observability import logger

MAX_NAME = 80  # Step Functions' limit on an execution's name
_DIGEST = 8


def boot_execution_name(sweep_id: str, rig: str, boot: int) -> str:
    """`<sweep id>-<rig>-<boot>`, within 80 characters: a sweep id too long for that keeps its
    start and a hash of the whole id, so that two sweep ids never share a name."""
    suffix = f"-{rig}-{boot}"
    name = sweep_id + suffix
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(sweep_id.encode()).hexdigest()[:_DIGEST]
    return f"{sweep_id[: MAX_NAME - len(suffix) - _DIGEST - 1]}-{digest}{suffix}"


def boot_execution_arn(boot_state_machine_arn: str, name: str) -> str:
    """An execution's ARN is its state machine's with `execution` for `stateMachine`, and its
    name after it."""
    return f"{boot_state_machine_arn.replace(':stateMachine:', ':execution:', 1)}:{name}"


def stop_boot_executions(
    sfn: Any, boot_state_machine_arn: str, sweep_id: str, boots: Iterable[tuple[str, int]]
) -> list[str]:
    """Stop every boot execution of `boots` still running; the ARNs it stopped. A boot whose
    execution never started is skipped."""
    stopped = []
    for rig, boot in boots:
        arn = boot_execution_arn(boot_state_machine_arn, boot_execution_name(sweep_id, rig, boot))
        try:
            status = sfn.describe_execution(executionArn=arn)["status"]
        except ClientError as exc:
            if error_code(exc) != "ExecutionDoesNotExist":
                raise
            continue
        if status == "RUNNING":
            sfn.stop_execution(
                executionArn=arn,
                error="SweepEnded",
                cause=f"sweep {sweep_id} ended before its boot",
            )
            stopped.append(arn)
    if stopped:
        logger.warning("stopped the boot executions of an ended sweep", extra={"stopped": stopped})
    return stopped
