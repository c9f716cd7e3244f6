"""Writing reports: a sweep's page or a rig's trend from a stack's tables, bucket and history.
Imports nothing of the CLI, so the local sweep can write its report as it ends."""

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rigbench.report.errors import ReportError

# boto3/botocore, plotly and jinja2 load only when a report is made: `import rigbench.cli`
# stays light on GPU machines that run only `bench` and `rig serve`.
if TYPE_CHECKING:
    from rigbench.report.data import Store, SweepData


def store_from(client: Callable[[str], Any], refs: Any) -> "Store":
    """A Store over a stack's outputs (`rigbench.stack_refs.StackRefs`) and a client factory."""
    from rigbench.report.data import Store

    return Store(
        dynamodb=client("dynamodb"),
        s3=client("s3"),
        stepfunctions=client("stepfunctions"),
        results_table=refs.results_table,
        ledger_table=refs.ledger_table,
        bucket=refs.bucket,
        state_machine_arn=refs.state_machine_arn,
    )


def write_sweep_report(
    store: "Store", sweep_id: str, out: Path, *, cell: str | None = None, local: bool = False
) -> Path:
    """Gather the sweep and write its page; ReportError when there is no such sweep."""
    from rigbench.report.data import gather

    return write_gathered(gather(store, sweep_id), out, cell=cell, local=local)


def write_gathered(
    data: "SweepData", out: Path, *, cell: str | None = None, local: bool = False
) -> Path:
    from rigbench.report.html import write
    from rigbench.report.sweep import sweep_page

    try:
        page = sweep_page(data, cell=cell, local=local)
    except ValueError as exc:  # a --cell the sweep does not have
        raise ReportError(str(exc)) from exc
    return write(page, out)


def write_trend_report(
    store: "Store",
    out: Path,
    *,
    rig: str,
    model: str,
    instance_type: str | None,
    since: datetime,
) -> Path:
    from functions.alerts import list_regressions
    from functions.tables.results import query_rows
    from rigbench.report.html import write
    from rigbench.report.trend import trend_page

    rows = query_rows(
        store.dynamodb,
        store.results_table,
        until=datetime.now(UTC),
        rig=rig,
        model=model,
        instance_type=instance_type,
        since=since,
    )
    alerts = list_regressions(
        store.dynamodb, store.ledger_table, since=since, until=datetime.now(UTC)
    )
    return write(trend_page(rows, rig, model, instance_type, alerts), out)


def report_after_run(emulation: Any, sweep_id: str, out: Path) -> tuple[str, "SweepData | None"]:
    """Write a just-finished local sweep's report while its execution still exists: the line
    to print (where the report is, or why it could not be written) and what was gathered for
    it (None when gathering failed), so that the terminal shows the report's comparison."""
    from rigbench.report.data import gather

    data = None
    try:
        data = gather(store_from(emulation.client, emulation.stack_refs()), sweep_id)
        path = write_gathered(data, out, local=True)
    except Exception as exc:  # the sweep's own outcome matters more than its report
        return f"[red]report not written:[/] {exc}", data
    return f"report: {path} (open it in a browser)", data
