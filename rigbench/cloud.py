"""The cloud commands: start and follow sweeps, read their results, reap overdue instances
(deploy, stop and logs: `rigbench.commands`, on this module's stack choice).

Every command works on a stack client (`rigbench.stack.StackClient`), chosen once by
`rigbench.commands.stack_choice.open_stack`: the deployed stack, or the embedded emulation.

boto3, moto and the Lambda code in `functions/` load inside the commands that use them, so
that `import rigbench.cli` stays light on GPU machines that run only `bench` and `rig serve`.
"""

import csv
import io
import json
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from analysis.metrics import MetricSpec, Source, specs
from functions.errors import InvalidInput
from functions.execution_input import SweepInput, read_input_file
from rigbench.commands import local as local_cli
from rigbench.commands.stack_choice import (
    DEFAULT_STACK,
    CloudError,
    StackOption,
    fail,
    open_stack,
    parse_since,
    use_local,
)
from rigbench.progress import (
    PhaseLines,
    boot_failures,
    decisions_table,
    explain_failure,
    rounds_table,
    status_table,
)
from rigbench.stack import ResultRow, ResultsQuery, StackClient, StackError, parse_sweep
from rigbench.stack.client import report_link_expires_s

# ---------------------------------------------------------------------------------- run


def sweep_body(input_file: Path | None, flags: dict[str, Any]) -> SweepInput:
    """The sweep from a JSON file and/or flags (flags win), parsed here, before anything
    starts (InvalidInput names the field)."""
    body: dict[str, Any] = {}
    if input_file is not None:
        body.update(read_input_file(input_file))
    body.update({k: v for k, v in flags.items() if v is not None})
    return parse_sweep(body)


def follow(stack: StackClient, execution_arn: str, console: Console) -> Any:
    """A live table per rig and boot until the execution ends (on a terminal; in a log, a line
    per change and the table at the end); returns the last progress."""
    if not console.is_terminal:
        progress = stack.follow_sweep(execution_arn, on_update=PhaseLines(console))
        console.print(status_table(progress))
        return progress
    with Live(console=console, refresh_per_second=4, transient=False) as live:
        return stack.follow_sweep(execution_arn, on_update=lambda p: live.update(status_table(p)))


def parse_concurrency(text: str) -> list[int]:
    """--concurrency 1,8 as cells; a CloudError naming the flag and the bad part."""
    cells = []
    for part in text.split(","):
        try:
            cells.append(int(part.strip()))
        except ValueError:
            raise CloudError(
                f"--concurrency: {part.strip()!r} is not a whole number (give e.g. 1,8)"
            ) from None
    return cells


def run_command(
    input_file: Annotated[
        Path | None, typer.Argument(help="Sweep input JSON (statemachine/sweep-input.schema.json)")
    ] = None,
    rig: Annotated[list[str] | None, typer.Option("--rig", help="Rig (repeat for several)")] = None,
    model: Annotated[
        str | None, typer.Option(help="Model spec, e.g. google/gemma-4-E2B-it")
    ] = None,
    instance_type: Annotated[str | None, typer.Option(help="EC2 instance type")] = None,
    boots: Annotated[int | None, typer.Option(help="Boots per rig")] = None,
    budget: Annotated[float | None, typer.Option(help="Sweep budget in USD")] = None,
    concurrency: Annotated[str | None, typer.Option(help="Concurrency cells, e.g. 1,8")] = None,
    market: Annotated[str | None, typer.Option(help="spot (default) or on-demand")] = None,
    name: Annotated[str | None, typer.Option(help="Execution name")] = None,
    no_follow: Annotated[bool, typer.Option("--no-follow", help="Print the ARN and exit")] = False,
    stack: StackOption = DEFAULT_STACK,
    local: local_cli.LocalOption = False,
    dry_run: local_cli.DryRunOption = False,
    quota_vcpus: local_cli.QuotaOption = None,
    spot_price: local_cli.PriceOption = None,
    home: local_cli.HomeOption = None,
) -> None:
    """Start a sweep on the deployed stack and follow it until it ends (--local: on this
    machine; with no AWS credentials it runs locally and says so)."""
    console = Console()
    try:
        flags: dict[str, Any] = {
            "rigs": rig or None, "model": model, "instance_type": instance_type,
            "boots_per_rig": boots, "budget_usd": budget, "market": market,
        }  # fmt: skip
        if concurrency is not None:
            flags["cells"] = {"concurrency": parse_concurrency(concurrency)}
        on_this_machine = use_local(local)
        if dry_run and not on_this_machine:
            raise typer.Exit(plan_on_account(sweep_body(input_file, flags), stack, console))
        if on_this_machine:
            given = input_file is not None or any(v is not None for v in flags.values())
            code = local_cli.run_local(
                sweep_body(input_file, flags) if given else None, dry_run=dry_run,
                quota_vcpus=quota_vcpus, spot_price=spot_price, home=home, console=console,
            )  # fmt: skip
            raise typer.Exit(code)
        body = sweep_body(input_file, flags)
    except (CloudError, InvalidInput) as exc:
        fail(exc)
    from rigbench.commands.regression_table import check_lines

    with open_stack(False, stack) as client:
        try:
            started = client.start_sweep(body, name)
        except StackError as exc:
            fail(exc)
        print(started.execution_arn, flush=True)  # unwrapped, for scripts
        if no_follow:
            return
        progress = follow(client, started.execution_arn, console)
        report = report_line(client, started.sweep_id)
        alerts = client.regressions(sweep=started.sweep_id)
    # the alerts are printed as a table, not inside the output's JSON
    summary = {k: v for k, v in (progress.output or {}).items() if k != "regressions"}
    check = check_lines(alerts, summary, body.regression_ratio, "the stack's ledger table")
    if progress.status != "SUCCEEDED":
        console.print(f"[red]{progress.status}: {explain_failure(progress)}[/]")
        for line in check if alerts else []:
            console.print(line)
        print(report, flush=True)
        raise typer.Exit(1)
    output = json.dumps(summary, separators=(",", ":")) if summary else ""
    console.print(f"[green]SUCCEEDED[/] {output}")
    for line in check:
        console.print(line)
    print(report, flush=True)


def plan_on_account(body: SweepInput, stack_name: str, console: Console) -> int:
    """`run --dry-run` with AWS credentials: the deployed stack's checks against the account's
    quota, spot price and the month's spend; nothing is started, reserved or launched."""
    from rigbench.commands.dry_run import print_plan
    from rigbench.stack.boto import BotoStack, aws_errors

    with open_stack(False, stack_name) as client:
        plan = client.plan(body)
        subnets = [s for b in plan.boots[:1] for s in b.subnets]
        zones: dict[str, str] = {}
        if subnets and isinstance(client, BotoStack):
            with aws_errors("reading the stack's subnets"):
                found = client.client("ec2").describe_subnets(SubnetIds=subnets)["Subnets"]
            zones = {s["SubnetId"]: s["AvailabilityZone"] for s in found}
    if not plan.valid:
        fail(CloudError(f"a run of this input would fail: {plan.error}"))
    print_plan(console, plan, zones, emulated=False)
    return 0


def report_line(client: StackClient, sweep_id: str) -> str:
    """Where the sweep's report is (unwrapped: a presigned URL is one long line), or why not."""
    try:
        return f"report: {client.report_location(sweep_id, report_link_expires_s())}"
    except StackError as exc:
        return f"report not available: {exc}"


# ---------------------------------------------------------------------------------- status


def status_command(
    execution: Annotated[str | None, typer.Argument(help="Execution ARN or name")] = None,
    stack: StackOption = DEFAULT_STACK,
    local: local_cli.LocalOption = False,
    home: local_cli.HomeOption = None,
) -> None:
    """One execution's progress per rig and boot, or the recent executions (--local: the
    sweeps run on this machine)."""
    console = Console()
    with open_stack(local, stack, home) as client:
        if execution is None:
            console.print(executions_table(client))
            return
        progress = client.describe_sweep(execution)
    console.print(status_table(progress))
    for failure in boot_failures(progress):
        console.print(escape(failure), style="red", highlight=False)
    if progress.rounds:
        console.print(rounds_table(progress.rounds))
        console.print(decisions_table(progress.rounds, progress.headline))
    if progress.status not in ("RUNNING", "SUCCEEDED"):
        console.print(f"[red]{explain_failure(progress)}[/]")


def executions_table(client: StackClient, limit: int = 20) -> Table:
    """Recent sweeps; their ids whole on any width (they are what the other commands take)."""
    sweeps = client.list_sweeps(limit)
    table = Table(title=f"sweeps on {client.refs.stack_name}")
    longest = max((len(e.sweep_id) for e in sweeps), default=4)
    table.add_column("sweep id", no_wrap=True, min_width=longest)
    for column in ("status", "started (UTC)", "stopped (UTC)"):
        table.add_column(column)
    for e in sweeps:
        stopped = e.stopped_at
        table.add_row(
            e.sweep_id, e.status, f"{e.started_at:%Y-%m-%d %H:%M:%S}",
            f"{stopped:%Y-%m-%d %H:%M:%S}" if stopped else "",
        )  # fmt: skip
    return table


# ---------------------------------------------------------------------------------- results

Format = Literal["table", "json", "csv"]
RESULT_COLUMNS = ("sweep_id", "rig", "boot", "model", "instance_type", "cell", "started_at")
ROW_COLUMNS = (("sweep", "sweep_id"), ("rig", "rig"), ("boot", "boot"), ("cell", "load"))


def metric_columns(*shown: str) -> list[MetricSpec]:
    """The metric table's rows `rigbench results` shows ("table": in its table and CSV;
    "csv": in the CSV alone), of a load cell or of the boot's start."""
    return specs(results=shown or ("table", "csv"))


def flat_row(row: dict[str, Any]) -> dict[str, Any]:
    flat = {k: row.get(k) for k in RESULT_COLUMNS}
    columns = metric_columns()
    flat.update({m.key: m.of_row(row) for m in columns if m.source is Source.CELL})
    provenance = row.get("provenance", {})
    flat.update(
        harness_version=provenance.get("harness_version"),
        bundle_sha256=provenance.get("bundle_sha256"),
        availability_zone=provenance.get("availability_zone"),
        gpu=provenance.get("gpu"),
    )
    # the boot's start (harness.boot_phases), on every row
    flat.update({m.key: m.of_row(row) for m in columns if m.source is Source.START})
    flat.update(price_paid_usd_per_hour=(row.get("timing") or {}).get("price_usd_per_hour"))
    return flat


def render_results(results: list[ResultRow], fmt: Format) -> str | Table:
    rows = [r.model_dump(mode="json") for r in results]
    if fmt == "json":
        return json.dumps(rows, indent=2, sort_keys=True)
    flat = [flat_row(r) for r in rows]
    if fmt == "csv":
        out = io.StringIO()
        columns = list(flat[0]) if flat else [*RESULT_COLUMNS, *(m.key for m in metric_columns())]
        writer = csv.DictWriter(out, fieldnames=columns)
        writer.writeheader()
        writer.writerows(flat)
        return out.getvalue()
    table = Table(title=f"{len(rows)} result rows (--format csv or json for every field)")
    shown = metric_columns("table")
    for header, _ in ROW_COLUMNS:
        table.add_column(header, overflow="fold")
    for spec in shown:  # units in the headers: "TTFT p50 ms"
        table.add_column(f"{spec.label} {spec.unit}", overflow="fold", justify="right")
    for row, raw in zip(flat, rows, strict=True):
        row["load"] = _load(raw)
        table.add_row(
            *[_text(row[k]) for _, k in ROW_COLUMNS],
            *[_metric_text(row[spec.key]) for spec in shown],
        )
    return table


def _load(row: dict[str, Any]) -> str:
    """The cell as the comparison labels it (c=1, rate=2.5/s), else its stored key."""
    from harness.schemas import cell_label

    try:
        return cell_label(row.get("metrics") or {})
    except ValueError:
        return str(row.get("cell") or "")


def _metric_text(value: Any) -> str:
    """Every figure with one decimal (0.0, never a bare 0); none recorded: a dash."""
    return "-" if value is None else f"{float(value):.1f}"


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def results_command(
    rig: Annotated[str | None, typer.Option(help="Only this rig")] = None,
    model: Annotated[str | None, typer.Option(help="Only this model")] = None,
    instance_type: Annotated[str | None, typer.Option(help="Only this instance type")] = None,
    since: Annotated[str | None, typer.Option(help="From this date (default: 30 days ago)")] = None,
    sweep: Annotated[str | None, typer.Option(help="Only this sweep id")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table, json or csv")] = "table",
    stack: StackOption = DEFAULT_STACK,
    local: local_cli.LocalOption = False,
    home: local_cli.HomeOption = None,
) -> None:
    """Results rows from the results table (by Query, never Scan); --local (or no AWS
    credentials): the results local sweeps saved."""
    console = Console()
    try:
        if fmt not in ("table", "json", "csv"):
            raise CloudError(f"--format must be table, json or csv, not {fmt!r}")
        when = parse_since(since)
    except CloudError as exc:
        fail(exc)
    query = ResultsQuery(sweep=sweep, rig=rig, model=model, instance_type=instance_type, since=when)
    with open_stack(local, stack, home) as client:
        rows = client.results(query)
    rendered = render_results(rows, fmt)  # type: ignore[arg-type]
    if isinstance(rendered, str):
        sys.stdout.write(rendered if rendered.endswith("\n") else rendered + "\n")
    else:
        console.print(rendered)


# ---------------------------------------------------------------------------------- reap


def reap_command(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List, terminate nothing")] = False,
    stack: StackOption = DEFAULT_STACK,
    local: local_cli.LocalOption = False,
    home: local_cli.HomeOption = None,
) -> None:
    """End the stack's instances past their deadline or whose sweep has ended; reconcile
    (--local: the processes an earlier local run left, and the local ledger)."""
    console = Console()
    with open_stack(local, stack, home, save=not dry_run) as client:
        if dry_run:
            overdue = {i.instance_id: i for i in client.instances() if i.overdue}
            for instance in overdue.values():
                console.print(instance.instance_id, instance.tags)
            console.print(f"{len(overdue)} instance(s) past their deadline")
            return
        reaped = client.reap()
    if reaped.instances:
        console.print(
            f"terminated {len(reaped.instances)} instance(s) past their deadline or orphaned "
            f"by their sweep: {' '.join(reaped.instances)}"
        )
    else:
        console.print("nothing to terminate: no instance past its deadline or orphaned")
    if reaped.released_sweeps:
        console.print(
            f"released the reservations of ended sweeps: {' '.join(reaped.released_sweeps)}"
        )


def register(app: typer.Typer) -> None:
    app.command("run")(run_command)
    app.command("status")(status_command)
    app.command("results")(results_command)
    app.command("reap")(reap_command)
