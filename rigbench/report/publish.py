"""WriteReport (ReportFunction): when the boots are done, render the sweep's report page and
put it in the bucket (`functions.settings.sweep_report_key`), where `rigbench run` and the MCP
resource find it. It is its own function with its own package: plotly stays out of every other
function, and numpy and scipy come from the StatisticsLayer (rigbench/lambda_package).

The execution is still running here, so the page does not read it: what only the execution
knows (the input, each boot's outcome and why it failed, how the sweep ends) comes from the
Map's result and the rounds, as Summarize sees them."""

from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.events import ReportWritten, SummarizeEvent
from functions.execution_input import SweepInput
from functions.observability import instrumented
from functions.settings import EMULATED_AMI_PARAMETER, Clients, Settings, sweep_report_key
from functions.summarize import summarize
from rigbench.report.data import BootData, Store, SweepData, gather
from rigbench.report.html import render_page
from rigbench.report.sweep import sweep_page


def sweep_data(store: Store, event: SummarizeEvent, now: datetime) -> SweepData:
    """What the tables and bucket hold, completed from the Map's result."""
    sweep = event.sweep
    stored = gather(store, sweep.sweep_id)
    outcomes = {(b.rig, b.boot): b for b in event.outcomes}
    boots = {(b.rig, b.boot): b for b in stored.boots}
    for key in outcomes.keys() - boots.keys():
        boots[key] = BootData(rig=key[0], boot=key[1])
    for key, boot in boots.items():
        outcome = outcomes.get(key)
        if outcome is not None:
            error = f"{outcome.error}: {outcome.cause}" if outcome.error else ""
            boots[key] = boot.model_copy(update={"outcome": outcome.outcome, "error": error})
    rigs = [*sweep.rigs, *sorted({rig for rig, _ in boots} - set(sweep.rigs))]
    ending = summarize(event)
    return stored.model_copy(
        update={
            "status": "FAILED" if ending.failed else "SUCCEEDED",
            "error": ending.error,
            "cause": ending.cause,
            "rounds": event.rounds,
            "headline": event.headline,
            "started_at": datetime.fromisoformat(sweep.created_at),
            "stopped_at": now,
            "sweep_input": sweep.model_dump(
                mode="json", include=set(SweepInput.model_fields) - {"subnets"}, exclude_none=True
            ),
            "rigs": rigs,
            "model": sweep.model,
            "instance_type": sweep.instance_type,
            "boots": [boots[key] for key in sorted(boots)],
        }
    )


def publish(
    store: Store, event: SummarizeEvent, now: datetime | None = None, *, local: bool = False
) -> ReportWritten:
    """`local`: the stack is the embedded emulation (the page's rerun command says --local)."""
    page = sweep_page(sweep_data(store, event, now or datetime.now(UTC)), local=local)
    body = render_page(page).encode()
    key = sweep_report_key(event.sweep.sweep_id)
    store.s3.put_object(
        Bucket=store.bucket, Key=key, Body=body, ContentType="text/html; charset=utf-8"
    )
    return ReportWritten(key=key, bytes=len(body))


@instrumented
@event_parser(model=SummarizeEvent)
def handler(event: SummarizeEvent, context: LambdaContext) -> dict[str, Any]:
    settings, clients = Settings.from_env(), Clients()
    store = Store(
        dynamodb=clients.dynamodb,
        s3=clients.s3,
        stepfunctions=None,
        results_table=settings.results_table,
        ledger_table=settings.ledger_table,
        bucket=settings.bucket,
        state_machine_arn=None,
    )
    local = settings.ami_parameter == EMULATED_AMI_PARAMETER
    return publish(store, event, local=local).model_dump(mode="json")
