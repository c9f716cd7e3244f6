"""The cloud commands: start and follow sweeps, read their results, reap overdue instances,
deploy the stack and its bundle.

Every command works on a stack client (`rigbench.stack.StackClient`), chosen once by
`open_stack`: the deployed stack (`--stack`, default `rigbench`), or with `--local` (or no AWS
credentials) the embedded emulation, so the same code serves both.

boto3, moto and the Lambda code in `functions/` load inside the commands that use them, so
that `import rigbench.cli` stays light on GPU machines that run only `bench` and `rig serve`.
"""

import csv
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

import typer
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from functions.errors import InvalidInput
from functions.execution_input import SweepInput, read_input_file
from rigbench.bundle import REPO_ROOT
from rigbench.commands import local as local_cli
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

DEFAULT_STACK = os.environ.get("RIGBENCH_STACK", "rigbench")

StackOption = Annotated[str, typer.Option("--stack", help="CloudFormation stack name")]
CloudError = StackError  # what the commands raise and report
MAX_SINCE_DAYS = 3 * 365


def fail(error: Exception, code: int = 2) -> NoReturn:
    # One line, and the message as it is: Rich markup would eat a pattern's [a-z0-9].
    Console(stderr=True, soft_wrap=True).print(f"[red]{escape(str(error))}[/]")
    raise typer.Exit(code) from error


def connect_aws(stack_name: str) -> StackClient:
    """The deployed stack (tests point this at the emulation)."""
    from rigbench.stack.aws import AwsStack

    return AwsStack.connect(stack_name)


def use_local(local: bool) -> bool:
    """The one choice of stack: --local, or no AWS credentials (said in one line)."""
    from rigbench.stack.aws import has_aws_credentials

    if local:
        return True
    if has_aws_credentials():
        return False
    Console(stderr=True).print(local_cli.LOCAL_FALLBACK_NOTICE)
    return True


def require_aws_credentials(command: str, consequence: str) -> None:
    """Commands that only make sense on an AWS account end here without credentials, rather
    than falling back to the emulation as the sweep commands do."""
    from rigbench.stack.aws import has_aws_credentials

    if not has_aws_credentials():
        fail(
            CloudError(
                f"{command} needs AWS credentials and none were found (aws configure, or "
                f"AWS_PROFILE): {consequence}"
            )
        )


@contextmanager
def open_stack(
    local: bool, stack_name: str, home: Path | None = None, save: bool = False
) -> Iterator[StackClient]:
    """The stack client the command works on, chosen once; a StackError ends the command.
    `save`: locally, keep what the command changed (the reaper's ledger updates)."""
    try:
        if use_local(local):
            with local_cli.local_stack(home, save) as client:
                yield client
        else:
            with connect_aws(stack_name) as client:
                yield client
    except StackError as exc:
        fail(exc)


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
        if dry_run or use_local(local):
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
METRIC_COLUMNS = (
    "output_tok_s", "ttft_ms.p50", "itl_ms.p50", "tpot_ms.p50", "e2e_ms.p50",
    "gpu.mean_power_w", "gpu.j_per_output_token",
)  # fmt: skip
# The terminal table: the comparison's words and cell labels (c=1), units in the headers.
TABLE_COLUMNS = (
    ("sweep", "sweep_id"), ("rig", "rig"), ("boot", "boot"), ("cell", "load"),
    ("output tok/s", "output_tok_s"), ("TTFT p50 ms", "ttft_ms.p50"),
    ("ITL p50 ms", "itl_ms.p50"), ("TPOT p50 ms", "tpot_ms.p50"), ("E2E p50 ms", "e2e_ms.p50"),
)  # fmt: skip


def _metric(row: dict[str, Any], path: str) -> Any:
    value: Any = row.get("metrics", {})
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def flat_row(row: dict[str, Any]) -> dict[str, Any]:
    flat = {k: row.get(k) for k in RESULT_COLUMNS}
    flat.update({m: _metric(row, m) for m in METRIC_COLUMNS})
    provenance = row.get("provenance", {})
    flat.update(
        harness_version=provenance.get("harness_version"),
        bundle_sha256=provenance.get("bundle_sha256"),
        availability_zone=provenance.get("availability_zone"),
        gpu=provenance.get("gpu"),
    )
    timing = row.get("timing") or {}  # the boot's start (harness.boot_phases), on every row
    flat.update(
        ready_s=timing.get("ready_s"),
        warm_ready_s=timing.get("warm_ready_s"),
        startup_usd=timing.get("startup_usd"),
        price_paid_usd_per_hour=timing.get("price_usd_per_hour"),
    )
    return flat


def render_results(results: list[ResultRow], fmt: Format) -> str | Table:
    rows = [r.model_dump(mode="json") for r in results]
    if fmt == "json":
        return json.dumps(rows, indent=2, sort_keys=True)
    flat = [flat_row(r) for r in rows]
    if fmt == "csv":
        out = io.StringIO()
        columns = list(flat[0]) if flat else [*RESULT_COLUMNS, *METRIC_COLUMNS]
        writer = csv.DictWriter(out, fieldnames=columns)
        writer.writeheader()
        writer.writerows(flat)
        return out.getvalue()
    table = Table(title=f"{len(rows)} result rows (--format csv or json for every field)")
    for header, key in TABLE_COLUMNS:
        numeric = key in METRIC_COLUMNS
        table.add_column(header, overflow="fold", justify="right" if numeric else "left")
    for row, raw in zip(flat, rows, strict=True):
        row["load"] = _load(raw)
        table.add_row(
            *[
                _metric_text(row[k]) if k in METRIC_COLUMNS else _text(row[k])
                for _, k in TABLE_COLUMNS
            ]
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


def parse_since(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise CloudError(f"--since {text!r} is not a date (YYYY-MM-DD or ISO 8601)") from exc
    parsed = parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    # Results are queried month by month (one Query per monthly partition): bound the count.
    if parsed < datetime.now(UTC) - timedelta(days=MAX_SINCE_DAYS):
        raise CloudError(
            f"--since {text!r} is more than {MAX_SINCE_DAYS // 365} years ago: "
            "give a later date (results are queried one month at a time)"
        )
    return parsed


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


# ---------------------------------------------------------------------------------- deploy


def deploy_command(
    guided: Annotated[
        bool, typer.Option("--guided", help="Ask for parameters (first deploy)")
    ] = False,
    parameter: Annotated[
        list[str] | None, typer.Option("--parameter", help="Key=Value template parameter")
    ] = None,
    bundle_only: Annotated[
        bool, typer.Option("--bundle-only", help="Only upload the bundle")
    ] = False,
    stack: StackOption = DEFAULT_STACK,
) -> None:
    """`sam build` and `sam deploy` the stack, then upload the rig + harness bundle (needs
    AWS credentials; local sweeps need no deploy)."""
    console = Console()
    require_aws_credentials("deploy", "nothing deployed or uploaded; local sweeps need no deploy")
    if not bundle_only:
        deploy = ["sam", "deploy", "--stack-name", stack, "--capabilities", "CAPABILITY_IAM",
                  "--resolve-s3", "--no-fail-on-empty-changeset"]  # fmt: skip
        if guided:
            deploy.append("--guided")
        if parameter:
            deploy += ["--parameter-overrides", *parameter]
        for command in (["sam", "build"], deploy):
            console.print(f"[bold]$ {' '.join(command)}[/]")
            # functions/Makefile builds the Lambda package with this Python (rigbench's own)
            env = {**os.environ, "PYTHON": sys.executable}
            if subprocess.run(command, cwd=REPO_ROOT, env=env).returncode != 0:
                console.print(f"[red]{command[1]} failed[/]")
                raise typer.Exit(1)
    with open_stack(False, stack) as client:
        try:
            manifest = client.upload_bundle(REPO_ROOT)
        except StackError as exc:
            fail(exc)
        bucket = client.refs.bucket
    console.print(
        f"bundle {manifest.sha256[:12]} (rigs: {', '.join(manifest.rigs)}) "
        f"-> s3://{bucket}/{manifest.key}"
    )


def register(app: typer.Typer) -> None:
    app.command("run")(run_command)
    app.command("status")(status_command)
    app.command("results")(results_command)
    app.command("reap")(reap_command)
    app.command("deploy")(deploy_command)
