"""EventBridge "Step Functions Execution Status Change" (ABORTED, TIMED_OUT, FAILED): within
seconds of an execution ending that way, end every instance of its sweep (found by tags and
the ledger) and close its reservations, without waiting for the reaper. Stop, abort and
execution timeout run no Catch, so no Finish: this is what ends their instances, after stopping
the sweep's boot executions still running (functions/boot_executions.py).
Idempotent: a FAILED sweep whose boots all finished finds nothing left to do."""

from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.boot_executions import stop_boot_executions
from functions.budget import boot_items, close_sweep, open_boots, sweep_of_execution
from functions.cleanup import LIVE, end_boot, tagged_instances, terminate
from functions.events import ExecutionStatusChangeEvent
from functions.observability import instrumented, logger, metrics
from functions.settings import BOOT_TAG, PROJECT_TAG, RIG_TAG, SWEEP_TAG, Clients, Settings
from functions.tables import ledger

ENDS_WITHOUT_FINISH = frozenset({"ABORTED", "TIMED_OUT", "FAILED"})


@dataclass
class SweepEnded:
    sweep_id: str | None
    terminated: list[str] = field(default_factory=list)
    boots_closed: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)  # boot executions still running


def end_instance_of(clients: Clients, settings: Settings, instance: dict[str, Any]) -> list[str]:
    """End a live instance through its boot (so that it is billed), or alone if untagged."""
    tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
    if SWEEP_TAG in tags and RIG_TAG in tags and BOOT_TAG in tags:
        return end_boot(
            clients.ec2, clients.dynamodb, settings.ledger_table, settings.project,
            tags[SWEEP_TAG], tags[RIG_TAG], int(tags[BOOT_TAG]),
        ).terminated  # fmt: skip
    terminate(clients.ec2, instance["InstanceId"])
    return [instance["InstanceId"]]


def end_sweep(clients: Clients, settings: Settings, execution_arn: str, status: str) -> SweepEnded:
    if status not in ENDS_WITHOUT_FINISH:
        return SweepEnded(sweep_id=None)
    sweep_id = sweep_of_execution(clients.dynamodb, settings.ledger_table, execution_arn)
    if sweep_id is None:
        return SweepEnded(sweep_id=None)  # ended before Validate claimed a sweep: nothing ran
    ended = SweepEnded(sweep_id=sweep_id)
    # First the boot executions, so that none goes on launching or polling its boot.
    if settings.boot_state_machine_arn:
        boots = boot_items(clients.dynamodb, settings.ledger_table, sweep_id)
        ended.stopped = stop_boot_executions(
            clients.stepfunctions, settings.boot_state_machine_arn, sweep_id,
            [ledger.rig_boot_of_sk(item["sk"]["S"]) for item in boots],
        )  # fmt: skip
    for rig, boot in open_boots(clients.dynamodb, settings.ledger_table, sweep_id):
        done = end_boot(
            clients.ec2,
            clients.dynamodb,
            settings.ledger_table,
            settings.project,
            sweep_id,
            rig,
            boot,
        )
        ended.terminated.extend(done.terminated)
        ended.boots_closed.append(f"{rig}#{boot}")
    # A boot already reconciled cannot launch again (Launch checks its reservation before and
    # after RunInstances), but an instance found live here is ended and billed all the same.
    for instance in tagged_instances(
        clients.ec2, {PROJECT_TAG: settings.project, SWEEP_TAG: sweep_id}
    ):
        if instance["State"]["Name"] in LIVE:
            logger.error("live instance of an ended boot", extra={"instance": instance})
            ended.terminated.extend(end_instance_of(clients, settings, instance))
    close_sweep(clients.dynamodb, settings.ledger_table, sweep_id)
    metrics.add_metric(
        name="InstancesEndedOnExecutionEnd", unit=MetricUnit.Count, value=len(ended.terminated)
    )
    return ended


@instrumented
@event_parser(model=ExecutionStatusChangeEvent)
def handler(event: ExecutionStatusChangeEvent, context: LambdaContext) -> dict[str, Any]:
    ended = end_sweep(
        Clients(), Settings.from_env(), event.detail.executionArn, event.detail.status
    )
    return {
        "sweep_id": ended.sweep_id,
        "terminated": ended.terminated,
        "boots_closed": ended.boots_closed,
        "stopped": ended.stopped,
    }
