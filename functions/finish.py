"""Every boot ends here, whatever happened: terminate the instance, reconcile the ledger,
and report the boot's outcome (a failed boot does not fail the Map; the summary does)."""

import time
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from functions.budget import reconcile_boot
from functions.errors import error_message
from functions.events import BootOutcome, BootState, CaughtError
from functions.observability import instrumented, metrics
from functions.settings import Clients, Settings


def terminate(ec2: Any, instance_id: str) -> None:
    try:
        ec2.terminate_instances(InstanceIds=[instance_id])
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "InvalidInstanceID.NotFound":
            raise


def explain(error: CaughtError) -> str:
    """The readable part of a Catch's Cause: a Lambda error's message, else the Cause as is."""
    return error_message(error.Cause)


def finish_boot(state: BootState, clients: Clients, settings: Settings) -> BootOutcome:
    instance_id = state.instance.instance_id if state.instance else None
    seconds = 0.0
    if state.instance is not None:
        terminate(clients.ec2, state.instance.instance_id)
        seconds = max(0.0, time.time() - state.instance.launched_at)
        metrics.add_metric(name="InstancesTerminated", unit=MetricUnit.Count, value=1)
    cost, _ = reconcile_boot(
        clients.dynamodb,
        settings.ledger_table,
        state.sweep.sweep_id,
        state.rig,
        state.boot,
        seconds,
    )
    failed = state.error is not None
    return BootOutcome(
        rig=state.rig,
        boot=state.boot,
        outcome="failed" if failed else "succeeded",
        instance_id=instance_id,
        error=state.error.Error if state.error else None,
        cause=explain(state.error) if state.error else None,
        rows=state.stored.rows if state.stored else 0,
        cost_usd=cost,
        instance_seconds=round(seconds, 3),
    )


@instrumented
@event_parser(model=BootState)
def handler(event: BootState, context: LambdaContext) -> dict[str, Any]:
    return finish_boot(event, Clients(), Settings.from_env()).model_dump(mode="json")
