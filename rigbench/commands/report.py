"""`rigbench report`: a sweep's report, or a rig's trend across sweeps, as one HTML file."""

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from rigbench.report.errors import ReportError
from rigbench.report.writer import store_from, write_sweep_report, write_trend_report

# boto3/botocore, plotly and jinja2 load only when a report is made: `import rigbench.cli`
# stays light on GPU machines that run only `bench` and `rig serve`.
if TYPE_CHECKING:
    from rigbench.report.data import Store

TREND_DAYS = 365


# The options every report command shares: where the sweep's results are.
StackName = Annotated[str, typer.Option("--stack", help="CloudFormation stack name")]
LocalResults = Annotated[
    bool, typer.Option("--local", help="The results local sweeps saved on this machine")
]
LocalHomeDir = Annotated[
    Path | None, typer.Option("--home", help="Local state directory (default ./.rigbench)")
]


@contextlib.contextmanager
def _store(local: bool, home: Path | None, stack: str) -> Iterator["Store"]:
    from rigbench.commands.stack_choice import open_stack

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
    stack: StackName = "rigbench",
    local: LocalResults = False,
    home: LocalHomeDir = None,
) -> None:
    """Write a sweep's report (comparison, plots, cost per token, provenance) as one HTML file
    that opens offline; --trend: a rig's figures across sweeps over time."""
    from rigbench.commands.stack_choice import CloudError, parse_since

    err = Console(stderr=True, soft_wrap=True)
    try:
        if out is not None and not out.parent.is_dir():
            raise ReportError(f"--out {out}: no directory {out.parent} (create it first)")
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


class Format(StrEnum):
    TABLE = "table"
    JSON = "json"


def compare_command(
    sweep_id: Annotated[str, typer.Argument(help="The sweep (its id, the execution name)")],
    output: Annotated[
        Format, typer.Option("--format", help="table, or the comparison model as JSON")
    ] = Format.TABLE,
    stack: StackName = "rigbench",
    local: LocalResults = False,
    home: LocalHomeDir = None,
) -> None:
    """Print a finished sweep's comparison: the object the report draws and MCP `compare`
    returns (JSON: per cell, metric and rig its value, interval, n and verdict, the rigs'
    setups and the sweep-level ranking)."""
    from rigbench.commands.stack_choice import CloudError
    from rigbench.report.comparison import comparison_of
    from rigbench.report.data import gather
    from rigbench.report.terminal import print_comparison

    err = Console(stderr=True, soft_wrap=True)
    try:
        with _store(local, home, stack) as store:
            data = gather(store, sweep_id)
    except (ReportError, CloudError) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    comparison = comparison_of(data, local=local)
    if comparison is None:
        err.print(f"[red]error:[/] sweep {sweep_id!r} stored no harness report: nothing to compare")
        raise typer.Exit(1)
    if output is Format.JSON:
        print(comparison.model_dump_json(indent=2))
    else:
        print_comparison(Console(), comparison)
