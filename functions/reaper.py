"""On a schedule: the backstop behind the state machine's own terminate and the instance's
dead-man timer. It ends every project instance that is past its deadline tag or whose
sweep's execution is no longer running (aborted, timed out), reconciles those boots, and
releases the reservations of sweeps whose execution ended without summarizing."""

import time
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from functions.budget import _key, close_sweep, open_boots, open_sweeps, reconcile_boot
from functions.finish import terminate
from functions.observability import instrumented, logger, metrics
from functions.settings import (
    BOOT_TAG,
    DEADLINE_TAG,
    PROJECT_TAG,
    RIG_TAG,
    SWEEP_TAG,
    Clients,
    Settings,
)

LIVE = ("pending", "running", "stopping", "stopped")


@dataclass
class Reaped:
    instances: list[str] = field(default_factory=list)
    released_sweeps: list[str] = field(default_factory=list)


def project_instances(ec2: Any, project: str) -> list[dict[str, Any]]:
    found = []
    for page in ec2.get_paginator("describe_instances").paginate(
        Filters=[
            {"Name": f"tag:{PROJECT_TAG}", "Values": [project]},
            {"Name": "instance-state-name", "Values": list(LIVE)},
        ]
    ):
        for reservation in page["Reservations"]:
            for instance in reservation["Instances"]:
                tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
                found.append({"instance": instance, "tags": tags})
    return found


def overdue_instances(ec2: Any, project: str, now: float) -> list[dict[str, Any]]:
    """Project instances past their deadline tag (a missing tag counts as overdue)."""
    return [
        entry
        for entry in project_instances(ec2, project)
        if float(entry["tags"].get(DEADLINE_TAG, "0") or 0) <= now
    ]


class ExecutionStatus:
    """Whether a sweep's execution still runs, looked up once per sweep via the ledger."""

    def __init__(self, ddb: Any, sfn: Any, ledger_table: str) -> None:
        self._ddb, self._sfn, self._table = ddb, sfn, ledger_table
        self._cache: dict[str, bool] = {}

    def running(self, sweep_id: str) -> bool:
        if sweep_id not in self._cache:
            item = self._ddb.get_item(
                TableName=self._table, Key=_key(f"SWEEP#{sweep_id}", "TOTAL"), ConsistentRead=True
            ).get("Item", {})
            arn = item.get("execution_arn", {}).get("S", "")
            self._cache[sweep_id] = self._status(arn) == "RUNNING" if arn else True
        return self._cache[sweep_id]

    def _status(self, arn: str) -> str:
        try:
            return str(self._sfn.describe_execution(executionArn=arn)["status"])
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ExecutionDoesNotExist":
                return "GONE"
            raise


def reap(
    clients: Clients,
    project: str,
    ledger_table: str,
    now: float | None = None,
    sfn: Any = None,
) -> Reaped:
    now = time.time() if now is None else now
    sfn = sfn or clients.stepfunctions
    executions = ExecutionStatus(clients.dynamodb, sfn, ledger_table)
    reaped = Reaped()
    for entry in project_instances(clients.ec2, project):
        instance, tags = entry["instance"], entry["tags"]
        sweep = tags.get(SWEEP_TAG)
        overdue = float(tags.get(DEADLINE_TAG, "0") or 0) <= now
        orphaned = sweep is not None and not executions.running(sweep)
        if not (overdue or orphaned):
            continue
        terminate(clients.ec2, instance["InstanceId"])
        reaped.instances.append(instance["InstanceId"])
        if sweep is not None and RIG_TAG in tags and BOOT_TAG in tags:
            seconds = max(0.0, now - instance["LaunchTime"].timestamp())
            reconcile_boot(
                clients.dynamodb, ledger_table, sweep, tags[RIG_TAG], int(tags[BOOT_TAG]), seconds
            )
        logger.warning(
            "reaped an instance",
            extra={"instance": instance["InstanceId"], "overdue": overdue, "orphaned": orphaned},
        )
    for item in open_sweeps(clients.dynamodb, ledger_table):
        sweep = item["pk"]["S"].removeprefix("SWEEP#")
        if executions.running(sweep):
            continue
        for rig, boot in open_boots(clients.dynamodb, ledger_table, sweep):
            reconcile_boot(clients.dynamodb, ledger_table, sweep, rig, boot, 0.0)  # never ran
        close_sweep(clients.dynamodb, ledger_table, sweep)
        reaped.released_sweeps.append(sweep)
    metrics.add_metric(name="InstancesReaped", unit=MetricUnit.Count, value=len(reaped.instances))
    return reaped


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = Settings.from_env()
    reaped = reap(Clients(), settings.project, settings.ledger_table)
    return {"reaped": reaped.instances, "released_sweeps": reaped.released_sweeps}
