"""Every boot ends here, whatever happened: end the boot's instances (found by their tags and
the ledger, not by what the state carries), reconcile the ledger from their real run time,
and report the boot's outcome (a failed boot does not fail the Map; the summary does)."""

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.cleanup import end_boot
from functions.errors import error_message, error_name
from functions.events import BootOutcome, BootState, CaughtError
from functions.observability import instrumented, metrics
from functions.settings import Clients, Settings

MAX_CAUSE = 500  # per boot: a sweep's outcomes stay far below the 256 KiB payload limit


def explain(error: CaughtError) -> str:
    """The readable part of a Catch's Cause: a Lambda error's message, else the Cause as is."""
    return error_message(error.Cause)


def truncate(text: str, limit: int = MAX_CAUSE) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def finish_boot(state: BootState, clients: Clients, settings: Settings) -> BootOutcome:
    ended = end_boot(
        clients.ec2,
        clients.dynamodb,
        settings.ledger_table,
        settings.project,
        state.sweep.sweep_id,
        state.rig,
        state.boot,
    )
    if ended.terminated:
        metrics.add_metric(
            name="InstancesTerminated", unit=MetricUnit.Count, value=len(ended.terminated)
        )
    instance_id = state.instance.instance_id if state.instance else None
    failed = state.error is not None
    return BootOutcome(
        rig=state.rig,
        boot=state.boot,
        outcome="failed" if failed else "succeeded",
        instance_id=instance_id or (ended.instance_ids[0] if ended.instance_ids else None),
        error=truncate(error_name(state.error.Error, state.error.Cause), 100)
        if state.error
        else None,
        cause=truncate(explain(state.error)) if state.error else None,
        rows=state.stored.rows if state.stored else 0,
        interruptions=state.interruptions,
        interrupted_instances=[i for i in ended.instance_ids if i != instance_id]
        if state.interruptions
        else [],
        cost_usd=ended.cost_usd,
        instance_seconds=round(ended.seconds, 3),
    )


@instrumented
@event_parser(model=BootState)
def handler(event: BootState, context: LambdaContext) -> dict[str, Any]:
    outcome = finish_boot(event, Clients(), Settings.from_env())
    return outcome.model_dump(mode="json")
