"""The server-side dead-man timer: at launch, a one-time EventBridge Scheduler schedule at the
instance's deadline terminates it through Scheduler's universal target
(`aws-sdk:ec2:terminateInstances`), with a role that may terminate project instances only.
Unlike the on-instance timer it survives anything the instance does (a reboot, a hung
kernel, user data that never ran). The boot's ledger is reconciled from EC2's own end time by
Finish, the status-change handler or the reaper, whichever comes next."""

import json
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from functions.errors import error_code

SCHEDULE_GROUP = "default"
TERMINATE_TARGET = "arn:aws:scheduler:::aws-sdk:ec2:terminateInstances"


def schedule_name(instance_id: str) -> str:
    return f"rigbench-deadline-{instance_id}"


def schedule_deadline(scheduler: Any, role_arn: str, instance_id: str, deadline_at: float) -> None:
    """Idempotent: a retried launch finds its schedule already there."""
    when = datetime.fromtimestamp(deadline_at, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    try:
        scheduler.create_schedule(
            Name=schedule_name(instance_id),
            GroupName=SCHEDULE_GROUP,
            ScheduleExpression=f"at({when})",
            ScheduleExpressionTimezone="UTC",
            FlexibleTimeWindow={"Mode": "OFF"},
            ActionAfterCompletion="DELETE",
            Target={
                "Arn": TERMINATE_TARGET,
                "RoleArn": role_arn,
                "Input": json.dumps({"InstanceIds": [instance_id]}),
                "RetryPolicy": {"MaximumRetryAttempts": 10, "MaximumEventAgeInSeconds": 3600},
            },
        )
    except ClientError as exc:
        if error_code(exc) != "ConflictException":
            raise
