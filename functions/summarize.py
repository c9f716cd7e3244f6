"""After the Map: say what the sweep did; the Choice after it fails the execution with this
error and cause when any boot failed."""

from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel

from functions.budget import close_sweep, open_boots
from functions.events import CaughtError, ReportWritten, SummarizeEvent
from functions.observability import instrumented, logger
from functions.settings import Clients, Settings

MAX_CAUSE = 32_000  # Step Functions caps a Fail cause at 32,768 characters
MAX_REPORT_WHY = 1_000


class Summary(BaseModel):
    sweep_id: str
    failed: bool
    boots: int
    boots_failed: int
    rows: int
    cost_usd: float
    interruptions: int = 0  # spot reclaims the boots were relaunched after
    report_key: str = ""  # the sweep's HTML report in the bucket (WriteReport)
    report_missing: str = ""  # why there is none: a report that failed fails nothing else
    error: str = ""
    cause: str = ""


def _report_fields(report: ReportWritten | CaughtError | None) -> dict[str, str]:
    if isinstance(report, ReportWritten):
        return {"report_key": report.key}
    if isinstance(report, CaughtError):
        return {"report_missing": f"{report.Error}: {report.Cause}"[:MAX_REPORT_WHY]}
    return {"report_missing": "WriteReport did not run"}


def summarize(event: SummarizeEvent) -> Summary:
    failed = [b for b in event.boots if b.outcome == "failed"]
    summary = Summary(
        sweep_id=event.sweep.sweep_id,
        failed=bool(failed),
        boots=len(event.boots),
        boots_failed=len(failed),
        rows=sum(b.rows for b in event.boots),
        cost_usd=round(sum(b.cost_usd for b in event.boots), 6),
        interruptions=sum(b.interruptions for b in event.boots),
        **_report_fields(event.report),
    )
    if not failed:
        return summary
    errors = sorted({b.error or "Unknown" for b in failed})
    lines = [f"{b.rig} boot {b.boot}: {b.error}: {b.cause}" for b in failed]
    cause = f"{len(failed)} of {len(event.boots)} boots failed; " + "; ".join(lines)
    return summary.model_copy(
        update={
            "error": errors[0] if len(errors) == 1 else "BootsFailed",
            "cause": cause[:MAX_CAUSE],
        }
    )


@instrumented
@event_parser(model=SummarizeEvent)
def handler(event: SummarizeEvent, context: LambdaContext) -> dict[str, Any]:
    summary = summarize(event)
    if summary.report_missing:
        logger.warning("sweep report missing", extra={"why": summary.report_missing})
    ddb, table = Clients().dynamodb, Settings.from_env().ledger_table
    # A boot whose Finish kept failing still holds its reservation: leave the sweep open so
    # the status-change handler (this execution fails) or the reaper ends and bills it.
    if not open_boots(ddb, table, event.sweep.sweep_id):
        close_sweep(ddb, table, event.sweep.sweep_id)
    return summary.model_dump(mode="json")
