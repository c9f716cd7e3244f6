"""On a schedule: end every project instance past its deadline tag and reconcile its boot.
The backstop behind the state machine's own terminate and the instance's dead-man timer."""

import time
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.budget import reconcile_boot
from functions.finish import terminate
from functions.observability import logger, metrics, tracer
from functions.settings import (
    BOOT_TAG,
    DEADLINE_TAG,
    PROJECT_TAG,
    RIG_TAG,
    SWEEP_TAG,
    Clients,
    Settings,
)


def overdue_instances(ec2: Any, project: str, now: float) -> list[dict[str, Any]]:
    found = []
    for page in ec2.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": f"tag:{PROJECT_TAG}", "Values": [project]},
            {
                "Name": "instance-state-name",
                "Values": ["pending", "running", "stopping", "stopped"],
            },
        ]
    ):
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                deadline = float(tags.get(DEADLINE_TAG, "0") or 0)
                if deadline <= now:  # a missing deadline tag counts as overdue
                    found.append({"instance": instance, "tags": tags})
    return found


def reap(clients: Clients, project: str, ledger_table: str, now: float | None = None) -> list[str]:
    """Terminate the project's instances past their deadline; returns their ids."""
    now = time.time() if now is None else now
    reaped = []
    for entry in overdue_instances(clients.ec2, project, now):
        instance, tags = entry["instance"], entry["tags"]
        terminate(clients.ec2, instance["InstanceId"])
        reaped.append(instance["InstanceId"])
        if SWEEP_TAG in tags and RIG_TAG in tags and BOOT_TAG in tags:
            seconds = max(0.0, now - instance["LaunchTime"].timestamp())
            reconcile_boot(
                clients.dynamodb,
                ledger_table,
                tags[SWEEP_TAG],
                tags[RIG_TAG],
                int(tags[BOOT_TAG]),
                seconds,
            )
        logger.warning(
            "reaped an instance past its deadline", extra={"instance": instance["InstanceId"]}
        )
    metrics.add_metric(name="InstancesReaped", unit=MetricUnit.Count, value=len(reaped))
    return reaped


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = Settings.from_env()
    return {"reaped": reap(Clients(), settings.project, settings.ledger_table)}
