"""After the Map: say what the sweep did, and whether a rig got worse than its own history
(regression alerts: published to the stack's SNS topic and kept in the ledger,
functions/alerts.py); the Choice after it fails the execution with this error and cause when
any boot failed."""

from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel

from functions import alerts
from functions.budget import close_sweep, open_boots, release_unlaunched
from functions.events import CaughtError, HeadlineComparison, ReportWritten, Round, SummarizeEvent
from functions.observability import instrumented, logger
from functions.regressions import Regression
from functions.settings import Clients, Settings

MAX_CAUSE = 32_000  # Step Functions caps a Fail cause at 32,768 characters
MAX_REPORT_WHY = 1_000
ROUND_FAILED = "RoundDecisionFailed"
# A sweep's regressions in its output: at most this many (1.5 kB each at the longest), so
# that the output stays far below Step Functions' 256 KiB; every one is in the ledger.
MAX_OUTPUT_REGRESSIONS = 20


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
    # Regression alerts: rigs worse than their own recent history (functions/regressions.py)
    regressions: list[Regression] = []  # the first MAX_OUTPUT_REGRESSIONS
    regressions_found: int = 0  # all of them (`rigbench regressions --sweep` lists every one)
    regressions_tested: int = 0  # comparisons the check made (Holm's family)
    regressions_untested: dict[str, int] = {}  # why the others were not made: count by reason
    regressions_missing: str = ""  # why no check ran: a failed check fails nothing else
    # An adaptive sweep's looks, and its headline comparisons as the last look left them
    rounds: list[Round] = []
    headline: list[HeadlineComparison] = []
    released: int = 0  # boots reserved for the worst case and never launched: given back


def _report_fields(report: ReportWritten | CaughtError | None) -> dict[str, str]:
    if isinstance(report, ReportWritten):
        return {"report_key": report.key}
    if isinstance(report, CaughtError):
        return {"report_missing": f"{report.Error}: {report.Cause}"[:MAX_REPORT_WHY]}
    return {"report_missing": "WriteReport did not run"}


def summarize(event: SummarizeEvent) -> Summary:
    outcomes = event.outcomes
    failed = [b for b in outcomes if b.outcome == "failed"]
    summary = Summary(
        sweep_id=event.sweep.sweep_id,
        failed=bool(failed),
        boots=len(outcomes),
        boots_failed=len(failed),
        rows=sum(b.rows for b in outcomes),
        cost_usd=round(sum(b.cost_usd for b in outcomes), 6),
        interruptions=sum(b.interruptions for b in outcomes),
        rounds=event.rounds,
        headline=event.headline,
        **_report_fields(event.report),
    )
    caught = event.round_error
    if caught is not None:  # the boots that ran are summarized; no further round ran
        after = len(event.rounds) + 1
        cause = f"deciding after round {after} failed: {caught.Error}: {caught.Cause}"
        return summary.model_copy(
            update={"failed": True, "error": ROUND_FAILED, "cause": cause[:MAX_CAUSE]}
        )
    if not failed:
        return summary
    errors = sorted({b.error or "Unknown" for b in failed})
    lines = [f"{b.rig} boot {b.boot}: {b.error}: {b.cause}" for b in failed]
    cause = f"{len(failed)} of {len(outcomes)} boots failed; " + "; ".join(lines)
    return summary.model_copy(
        update={
            "error": errors[0] if len(errors) == 1 else "BootsFailed",
            "cause": cause[:MAX_CAUSE],
        }
    )


def alert_regressions(
    event: SummarizeEvent, summary: Summary, clients: Clients, settings: Settings
) -> Summary:
    """Check the sweep's rows against each rig's history; publish and keep what it finds."""
    sweep = event.sweep
    if not summary.rows:
        return summary.model_copy(update={"regressions_missing": "the sweep stored no results"})
    try:
        check = alerts.check_sweep(
            clients.dynamodb, settings.results_table, sweep_id=sweep.sweep_id,
            started_at=sweep.created_at, model=sweep.model, instance_type=sweep.instance_type,
            regression_ratio=sweep.regression_ratio,
            report=alerts.report_uri(settings.bucket, summary.report_key),
        )  # fmt: skip
        if check.regressions:
            if settings.alert_topic_arn:
                alerts.publish(
                    clients.sns, settings.alert_topic_arn, check.regressions, settings.region
                )
            alerts.store(clients.dynamodb, settings.ledger_table, check.regressions)
    except Exception as exc:  # an alert that fails must not fail the sweep
        logger.exception("regression check failed")
        why = f"{type(exc).__name__}: {exc}"[:MAX_REPORT_WHY]
        return summary.model_copy(update={"regressions_missing": why})
    for found in check.regressions:
        logger.warning("regression", extra={"alert": found.headline, "basis": found.basis})
    return summary.model_copy(
        update={
            "regressions": check.regressions[:MAX_OUTPUT_REGRESSIONS],
            "regressions_found": len(check.regressions),
            "regressions_tested": check.family,
            "regressions_untested": check.untested,
        }
    )


@instrumented
@event_parser(model=SummarizeEvent)
def handler(event: SummarizeEvent, context: LambdaContext) -> dict[str, Any]:
    clients, settings = Clients(), Settings.from_env()
    summary = alert_regressions(event, summarize(event), clients, settings)
    if summary.report_missing:
        logger.warning("sweep report missing", extra={"why": summary.report_missing})
    ddb, table = clients.dynamodb, settings.ledger_table
    # Every round has run through Finish: the boots the worst case reserved and no round
    # launched (an adaptive sweep that stopped early, a decision that failed) are given back.
    released = release_unlaunched(ddb, table, event.sweep.sweep_id)
    if released:
        logger.info("released unlaunched boots", extra={"boots": len(released)})
    # A boot whose Finish kept failing still holds its reservation: leave the sweep open so
    # the status-change handler (this execution fails) or the reaper ends and bills it.
    if not open_boots(ddb, table, event.sweep.sweep_id):
        close_sweep(ddb, table, event.sweep.sweep_id)
    return summary.model_copy(update={"released": len(released)}).model_dump(mode="json")
