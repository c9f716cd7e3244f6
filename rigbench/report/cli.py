"""`rigbench report`: a sweep's report, or a rig's trend across sweeps, as one HTML file."""

import contextlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from rigbench.report.errors import ReportError

# boto3/botocore, plotly and jinja2 load only when a report is made: `import rigbench.cli`
# stays light on GPU machines that run only `bench` and `rig serve`.
if TYPE_CHECKING:
    from rigbench.report.data import Store

TREND_DAYS = 365


def store_from(client: Callable[[str], Any], refs: Any) -> "Store":
    """A Store over a stack's outputs (`rigbench.cloud.StackRefs`) and a client factory."""
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
    from rigbench.report.html import write
    from rigbench.report.sweep import sweep_page

    data = gather(store, sweep_id)
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
    return write(trend_page(rows, rig, model, instance_type), out)


@contextlib.contextmanager
def _store(local: bool, home: Path | None, stack: str) -> Iterator["Store"]:
    from rigbench.cloud import open_stack

    with open_stack(local, stack, home) as client:
        yield store_from(client.client, client.refs)  # type: ignore[attr-defined]


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text)


def report_command(
    sweep_id: Annotated[
        str | None, typer.Argument(help="The sweep (its id, the execution name)")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="HTML file (default: rigbench-report-SWEEP.html here)"),
    ] = None,
    cell: Annotated[
        str | None,
        typer.Option(help="Cell of the latency distribution, e.g. c=4 (default: highest load)"),
    ] = None,
    trend: Annotated[
        bool, typer.Option("--trend", help="A rig's figures across sweeps (needs --rig, --model)")
    ] = False,
    rig: Annotated[str | None, typer.Option(help="--trend: the rig")] = None,
    model: Annotated[str | None, typer.Option(help="--trend: the model")] = None,
    instance_type: Annotated[
        str | None, typer.Option(help="--trend: only this instance type")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help=f"--trend: from this date (default: {TREND_DAYS} days ago)")
    ] = None,
    stack: Annotated[str, typer.Option("--stack", help="CloudFormation stack name")] = "rigbench",
    local: Annotated[
        bool, typer.Option("--local", help="The results local sweeps saved on this machine")
    ] = False,
    home: Annotated[
        Path | None, typer.Option("--home", help="Local state directory (default ./.rigbench)")
    ] = None,
) -> None:
    """Write a sweep's report (comparison, plots, cost per token, provenance) as one HTML file
    that opens offline; --trend: a rig's figures across sweeps over time."""
    from rigbench.cloud import CloudError, parse_since

    err = Console(stderr=True, soft_wrap=True)
    try:
        if trend:
            if sweep_id is not None:
                raise ReportError("--trend takes no SWEEP_ID: give --rig and --model instead")
            if not rig or not model:
                raise ReportError(
                    "--trend needs --rig and --model (and optionally --instance-type)"
                )
            when = parse_since(since) or datetime.now(UTC) - timedelta(days=TREND_DAYS)
            target = out or Path(f"rigbench-trend-{_slug(rig)}-{_slug(model)}.html")
            with _store(local, home, stack) as store:
                path = write_trend_report(
                    store, target, rig=rig, model=model, instance_type=instance_type, since=when
                )
        else:
            if sweep_id is None:
                raise ReportError(
                    "give a SWEEP_ID (see `rigbench results`), or --trend --rig R --model M"
                )
            target = out or Path(f"rigbench-report-{_slug(sweep_id)}.html")
            with _store(local, home, stack) as store:
                path = write_sweep_report(store, sweep_id, target, cell=cell, local=local)
    except (ReportError, CloudError) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    Console(soft_wrap=True).print(f"report: {path.resolve()} (open it in a browser)")


def report_after_run(emulation: Any, sweep_id: str, out: Path) -> str:
    """Write a just-finished local sweep's report while its execution still exists; the line
    to print: where the report is, or why it could not be written."""
    try:
        path = write_sweep_report(
            store_from(emulation.client, emulation.stack_refs()), sweep_id, out, local=True
        )
    except Exception as exc:  # the sweep's own outcome matters more than its report
        return f"[red]report not written:[/] {exc}"
    return f"report: {path} (open it in a browser)"
