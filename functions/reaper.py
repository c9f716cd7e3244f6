"""On a schedule (every minute): the backstop behind Finish, the status-change handler and the
instance's dead-man timer. It ends every project instance past its deadline tag, whose sweep's
execution is no longer running, or whose boot Finish gave up on (marked FINISH_FAILED by the
state machine), reconciles those boots from their real run time, and releases the
reservations of sweeps whose execution ended without summarizing.

One instance's failure (termination protection, a throttle) is logged, counted and skipped:
the others are still ended. The run then fails (so the Lambda Errors alarm fires) and the
`ReaperFailures` and `OverdueInstances` metrics feed their own alarms.
"""

from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from functions import clock
from functions.budget import close_sweep, open_boots, open_sweeps
from functions.cleanup import LIVE, end_boot, tagged_instances, terminate
from functions.errors import error_code
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
from functions.tables import ledger


class ReaperFailed(Exception):
    """Some instances or sweeps could not be ended; the others were."""


@dataclass
class Reaped:
    instances: list[str] = field(default_factory=list)
    released_sweeps: list[str] = field(default_factory=list)
    overdue: list[str] = field(default_factory=list)
    finish_failed: list[str] = field(default_factory=list)  # instances of boots Finish gave up
    failures: list[str] = field(default_factory=list)


def project_instances(ec2: Any, project: str) -> list[dict[str, Any]]:
    return [
        {"instance": i, "tags": {t["Key"]: t["Value"] for t in i.get("Tags", [])}}
        for i in tagged_instances(ec2, {PROJECT_TAG: project})
        if i["State"]["Name"] in LIVE
    ]


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
                TableName=self._table, Key=ledger.sweep_owner(sweep_id), ConsistentRead=True
            ).get("Item", {})
            arn = item.get("execution_arn", {}).get("S", "")
            self._cache[sweep_id] = self._status(arn) == "RUNNING" if arn else True
        return self._cache[sweep_id]

    def _status(self, arn: str) -> str:
        try:
            return str(self._sfn.describe_execution(executionArn=arn)["status"])
        except ClientError as exc:
            if error_code(exc) == "ExecutionDoesNotExist":
                return "GONE"
            raise


def finish_gave_up(ddb: Any, ledger_table: str, tags: dict[str, str]) -> bool:
    """Finish failed every retry for this instance's boot (MarkFinishFailed in the ASL)."""
    if not (SWEEP_TAG in tags and RIG_TAG in tags and BOOT_TAG in tags):
        return False
    key = ledger.finish_failed(tags[SWEEP_TAG], tags[RIG_TAG], int(tags[BOOT_TAG]))
    return "Item" in ddb.get_item(TableName=ledger_table, Key=key, ConsistentRead=True)


def _reap_instance(
    clients: Clients, project: str, ledger_table: str, entry: dict[str, Any]
) -> None:
    instance, tags = entry["instance"], entry["tags"]
    sweep = tags.get(SWEEP_TAG)
    if sweep is not None and RIG_TAG in tags and BOOT_TAG in tags:
        end_boot(
            clients.ec2, clients.dynamodb, ledger_table, project, sweep, tags[RIG_TAG],
            int(tags[BOOT_TAG]),
        )  # fmt: skip
    terminate(clients.ec2, instance["InstanceId"])  # untagged boots, or a late duplicate


def reap(
    clients: Clients, project: str, ledger_table: str, now: float | None = None, sfn: Any = None
) -> Reaped:
    now = clock.now() if now is None else now
    executions = ExecutionStatus(clients.dynamodb, sfn or clients.stepfunctions, ledger_table)
    reaped = Reaped()
    for entry in project_instances(clients.ec2, project):
        instance_id, tags = entry["instance"]["InstanceId"], entry["tags"]
        try:
            sweep = tags.get(SWEEP_TAG)
            overdue = float(tags.get(DEADLINE_TAG, "0") or 0) <= now
            orphaned = sweep is not None and not executions.running(sweep)
            gave_up = not (overdue or orphaned) and finish_gave_up(
                clients.dynamodb, ledger_table, tags
            )
            if not (overdue or orphaned or gave_up):
                continue
            if overdue:
                reaped.overdue.append(instance_id)
            if gave_up:
                reaped.finish_failed.append(instance_id)
            _reap_instance(clients, project, ledger_table, entry)
            reaped.instances.append(instance_id)
            logger.warning(
                "reaped an instance",
                extra={
                    "instance": instance_id, "overdue": overdue, "orphaned": orphaned,
                    "finish_gave_up": gave_up,
                },
            )  # fmt: skip
        except ClientError as exc:
            reaped.failures.append(f"{instance_id}: {error_code(exc)}: {exc}")
            logger.exception("could not reap an instance", extra={"instance": instance_id})
    for item in open_sweeps(clients.dynamodb, ledger_table):
        sweep = ledger.sweep_of_pk(item["pk"]["S"])
        try:
            if executions.running(sweep):
                continue
            for rig, boot in open_boots(clients.dynamodb, ledger_table, sweep):
                end_boot(clients.ec2, clients.dynamodb, ledger_table, project, sweep, rig, boot)
            close_sweep(clients.dynamodb, ledger_table, sweep)
            reaped.released_sweeps.append(sweep)
        except ClientError as exc:
            reaped.failures.append(f"sweep {sweep}: {error_code(exc)}: {exc}")
            logger.exception("could not release a sweep", extra={"sweep": sweep})
    metrics.add_metric(name="InstancesReaped", unit=MetricUnit.Count, value=len(reaped.instances))
    metrics.add_metric(name="OverdueInstances", unit=MetricUnit.Count, value=len(reaped.overdue))
    metrics.add_metric(
        name="FinishGaveUpInstances", unit=MetricUnit.Count, value=len(reaped.finish_failed)
    )
    metrics.add_metric(name="ReaperFailures", unit=MetricUnit.Count, value=len(reaped.failures))
    return reaped


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = Settings.from_env()
    reaped = reap(Clients(), settings.project, settings.ledger_table, clock.now())
    if reaped.failures:
        raise ReaperFailed(
            f"{len(reaped.failures)} failures (the rest were reaped: {reaped.instances}): "
            + "; ".join(reaped.failures)[:2000]
        )
    return {"reaped": reaped.instances, "released_sweeps": reaped.released_sweeps}
