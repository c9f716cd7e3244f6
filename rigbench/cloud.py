"""The cloud commands: start and follow sweeps on the deployed stack, read their results,
reap overdue instances, deploy the stack and its bundle.

Every command works on `StackRefs` (the stack's outputs). On AWS they come from
CloudFormation (`--stack`, default `rigbench`); the local mode builds them from its
emulation (`Emulation.stack_refs()`), so the same code queries both.

boto3 and the Lambda code in `functions/` load inside the commands that use them, so that
`import rigbench.cli` stays light on GPU machines that run only `bench` and `rig serve`.
"""

import csv
import io
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from functions.errors import InvalidInput
from functions.execution_input import parse_sweep_input
from rigbench.bundle import REPO_ROOT, build_bundle, rig_names, upload_bundle
from rigbench.local import cli as local_cli
from rigbench.progress import boot_progress, progress_table

if TYPE_CHECKING:
    import boto3
    from boto3.dynamodb.types import TypeDeserializer

DEFAULT_STACK = os.environ.get("RIGBENCH_STACK", "rigbench")
DONE = {"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"}
FOLLOW_POLL_S = 2.0

StackOption = Annotated[str, typer.Option("--stack", help="CloudFormation stack name")]


class CloudError(Exception):
    """A command cannot go on; the message says why and what to do."""


def fail(error: Exception, code: int = 2) -> NoReturn:
    Console(stderr=True, soft_wrap=True).print(f"[red]{error}[/]")
    raise typer.Exit(code) from error


@dataclass(frozen=True)
class StackRefs:
    stack_name: str
    state_machine_arn: str
    results_table: str
    ledger_table: str
    bucket: str


def stack_refs(session: "boto3.session.Session", stack_name: str) -> StackRefs:
    from botocore.exceptions import ClientError

    try:
        stacks = session.client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"]
    except ClientError as exc:
        raise CloudError(
            f"no stack {stack_name!r} in {session.region_name}: run `rigbench deploy` first "
            f"({exc.response['Error']['Message']})"
        ) from exc
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    try:
        return StackRefs(
            stack_name=stack_name,
            state_machine_arn=outputs["StateMachineArn"],
            results_table=outputs["ResultsTableName"],
            ledger_table=outputs["LedgerTableName"],
            bucket=outputs["BucketName"],
        )
    except KeyError as exc:
        raise CloudError(
            f"stack {stack_name!r} has no output {exc}: is it a rigbench stack?"
        ) from exc


def resolve(stack_name: str) -> tuple["boto3.session.Session", StackRefs]:
    import boto3
    from botocore.exceptions import BotoCoreError

    session = boto3.session.Session()
    try:
        return session, stack_refs(session, stack_name)
    except BotoCoreError as exc:
        raise CloudError(f"cannot reach AWS: {exc}") from exc


def resolve_or_exit(stack_name: str) -> tuple["boto3.session.Session", StackRefs]:
    """`resolve` for a command with nothing to do without the stack: say why and exit."""
    try:
        return resolve(stack_name)
    except CloudError as exc:
        fail(exc)


# ---------------------------------------------------------------------------------- run


def sweep_body(input_file: Path | None, flags: dict[str, Any]) -> dict[str, Any]:
    """The execution input from a JSON file and/or flags (flags win), checked before sending."""
    body: dict[str, Any] = {}
    if input_file is not None:
        try:
            loaded = json.loads(input_file.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise CloudError(f"{input_file}: not a readable JSON file ({exc})") from exc
        if not isinstance(loaded, dict):
            raise CloudError(f"{input_file}: the sweep input must be a JSON object")
        body.update(loaded)
    body.update({k: v for k, v in flags.items() if v is not None})
    try:
        parse_sweep_input(body, context={"rigs": set(rig_names(REPO_ROOT))})
    except InvalidInput as exc:
        raise CloudError(str(exc)) from exc
    return body


def start_sweep(sfn: Any, refs: StackRefs, body: dict[str, Any], name: str | None = None) -> str:
    name = name or body.get("sweep_id") or f"sweep-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    return str(
        sfn.start_execution(
            stateMachineArn=refs.state_machine_arn, name=name, input=json.dumps(body)
        )["executionArn"]
    )


def history(sfn: Any, execution_arn: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for page in sfn.get_paginator("get_execution_history").paginate(executionArn=execution_arn):
        events.extend(page["events"])
    return events


def follow(
    sfn: Any, execution_arn: str, console: Console, poll_s: float | None = None
) -> dict[str, Any]:
    """A live table per rig and boot until the execution ends; returns describe_execution."""
    with Live(console=console, refresh_per_second=4, transient=False) as live:
        while True:
            described = sfn.describe_execution(executionArn=execution_arn)
            live.update(progress_table(boot_progress(history(sfn, execution_arn)), described))
            if described["status"] in DONE:
                return dict(described)
            time.sleep(FOLLOW_POLL_S if poll_s is None else poll_s)


def explain_failure(described: dict[str, Any]) -> str:
    """An execution's error and cause; a Lambda error's cause is its errorMessage."""
    cause = str(described.get("cause", ""))
    try:
        parsed = json.loads(cause)
        if isinstance(parsed, dict) and "errorMessage" in parsed:
            cause = str(parsed["errorMessage"])
    except ValueError:
        pass
    return f"{described.get('error', 'failed')}: {cause}"


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
        if concurrency:
            flags["cells"] = {"concurrency": [int(c) for c in concurrency.split(",")]}
        if local or dry_run or not local_cli.has_aws_credentials():
            if not (local or dry_run):
                Console(stderr=True).print(local_cli.LOCAL_FALLBACK_NOTICE)
            given = input_file is not None or any(v is not None for v in flags.values())
            code = local_cli.run_local(
                sweep_body(input_file, flags) if given else None, dry_run=dry_run,
                quota_vcpus=quota_vcpus, spot_price=spot_price, home=home, console=console,
            )  # fmt: skip
            raise typer.Exit(code)
        body = sweep_body(input_file, flags)
        session, refs = resolve(stack)
        sfn = session.client("stepfunctions")
        arn = start_sweep(sfn, refs, body, name)
    except (CloudError, ValueError) as exc:
        fail(exc)
    print(arn, flush=True)  # unwrapped, for scripts
    if no_follow:
        return
    described = follow(sfn, arn, console)
    if described["status"] != "SUCCEEDED":
        console.print(f"[red]{described['status']}: {explain_failure(described)}[/]")
        raise typer.Exit(1)
    console.print(f"[green]SUCCEEDED[/] {described.get('output', '')}")


# ---------------------------------------------------------------------------------- status


def status_command(
    execution: Annotated[str | None, typer.Argument(help="Execution ARN or name")] = None,
    stack: StackOption = DEFAULT_STACK,
) -> None:
    """One execution's progress per rig and boot, or the recent executions."""
    console = Console()
    session, refs = resolve_or_exit(stack)
    sfn = session.client("stepfunctions")
    if execution is None:
        console.print(executions_table(sfn, refs))
        return
    arn = execution if execution.startswith("arn:") else execution_arn(refs, execution)
    described = dict(sfn.describe_execution(executionArn=arn))
    console.print(progress_table(boot_progress(history(sfn, arn)), described))
    if described["status"] not in ("RUNNING", "SUCCEEDED"):
        console.print(f"[red]{explain_failure(described)}[/]")


def execution_arn(refs: StackRefs, name: str) -> str:
    prefix = refs.state_machine_arn.replace(":stateMachine:", ":execution:")
    return f"{prefix}:{name}"


def executions_table(sfn: Any, refs: StackRefs, limit: int = 20) -> Table:
    table = Table(title=f"sweeps on {refs.stack_name}")
    for column in ("name", "status", "started", "stopped"):
        table.add_column(column)
    listed = sfn.list_executions(stateMachineArn=refs.state_machine_arn, maxResults=limit)
    for e in listed["executions"]:
        stopped = e.get("stopDate")
        table.add_row(
            e["name"], e["status"], f"{e['startDate']:%Y-%m-%d %H:%M:%S}",
            f"{stopped:%Y-%m-%d %H:%M:%S}" if stopped else "",
        )  # fmt: skip
    return table


# ---------------------------------------------------------------------------------- results

Format = Literal["table", "json", "csv"]
RESULT_COLUMNS = ("sweep_id", "rig", "boot", "model", "instance_type", "cell", "started_at")
METRIC_COLUMNS = ("output_tok_s", "ttft_ms.p50", "itl_ms.p50", "tpot_ms.p50", "e2e_ms.p50")
TABLE_COLUMNS = (
    ("sweep", "sweep_id"), ("rig", "rig"), ("boot", "boot"), ("cell", "cell"),
    ("tok/s", "output_tok_s"), ("ttft p50", "ttft_ms.p50"), ("itl p50", "itl_ms.p50"),
    ("e2e p50", "e2e_ms.p50"),
)  # fmt: skip


def _number(value: Any) -> Any:
    """DynamoDB numbers come back as Decimal: integral ones as int, others as float."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return str(value)


@cache
def _deserializer() -> "TypeDeserializer":
    from boto3.dynamodb.types import TypeDeserializer

    return TypeDeserializer()


def _plain(item: dict[str, Any]) -> dict[str, Any]:
    value = {k: _deserializer().deserialize(v) for k, v in item.items()}
    return json.loads(json.dumps(value, default=_number))


def _query_all(ddb: Any, **kwargs: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in ddb.get_paginator("query").paginate(**kwargs):
        items.extend(_plain(i) for i in page["Items"])
    return items


def months_between(since: datetime, until: datetime) -> list[str]:
    months, year, month = [], since.year, since.month
    while (year, month) <= (until.year, until.month):
        months.append(f"{year:04d}-{month:02d}")
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return months


def query_results(
    ddb: Any,
    table: str,
    *,
    sweep: str | None = None,
    rig: str | None = None,
    model: str | None = None,
    instance_type: str | None = None,
    since: datetime | None = None,
    now: datetime | None = None,
) -> list[dict[str, Any]]:
    """Results rows by Query only: a sweep (base table), one rig/model/type over time
    (GSI by_config), or else each month since `since` (GSI by_month) filtered."""
    now = now or datetime.now(UTC)
    since = since or now - timedelta(days=30)
    after = since.isoformat(timespec="seconds")
    filters = {"rig": rig, "model": model, "instance_type": instance_type}
    given = {k: v for k, v in filters.items() if v is not None}
    if sweep is not None:
        rows = _query_all(
            ddb, TableName=table, KeyConditionExpression="sweep_id = :s",
            ExpressionAttributeValues={":s": {"S": sweep}},
        )  # fmt: skip
        return [r for r in rows if all(r.get(k) == v for k, v in given.items())]
    if len(given) == 3:
        return _query_all(
            ddb, TableName=table, IndexName="by_config",
            KeyConditionExpression="config_key = :k AND started_at >= :t",
            ExpressionAttributeValues={
                ":k": {"S": f"{rig}#{model}#{instance_type}"}, ":t": {"S": after},
            },
        )  # fmt: skip
    rows = []
    for month in months_between(since, now):
        kwargs: dict[str, Any] = {
            "TableName": table, "IndexName": "by_month",
            "KeyConditionExpression": "#m = :m AND started_at >= :t",
            "ExpressionAttributeNames": {"#m": "month"},
            "ExpressionAttributeValues": {":m": {"S": month}, ":t": {"S": after}},
        }  # fmt: skip
        if given:
            kwargs["FilterExpression"] = " AND ".join(f"#{k} = :{k}" for k in given)
            kwargs["ExpressionAttributeNames"].update({f"#{k}": k for k in given})
            kwargs["ExpressionAttributeValues"].update(
                {f":{k}": {"S": v} for k, v in given.items()}
            )
        rows.extend(_query_all(ddb, **kwargs))
    return rows


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
    return flat


def render_results(rows: list[dict[str, Any]], fmt: Format) -> str | Table:
    rows = sorted(
        rows, key=lambda r: (r.get("started_at", ""), r.get("sweep_id", ""), r.get("row_key", ""))
    )
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
    for header, _ in TABLE_COLUMNS:
        table.add_column(header, overflow="fold")
    for row in flat:
        table.add_row(*[_fmt(row[key]) for _, key in TABLE_COLUMNS])
    return table


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.1f}"
    return "" if value is None else str(value)


def parse_since(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise CloudError(f"--since {text!r} is not a date (YYYY-MM-DD or ISO 8601)") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


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
        if local or not local_cli.has_aws_credentials():
            if not local:
                Console(stderr=True).print(local_cli.LOCAL_FALLBACK_NOTICE)
            with local_cli.local_account(home) as account:
                emulation = account.emulation
                assert emulation is not None
                rows = query_results(
                    emulation.client("dynamodb"), emulation.stack_refs().results_table,
                    sweep=sweep, rig=rig, model=model, instance_type=instance_type, since=when,
                )  # fmt: skip
        else:
            session, refs = resolve(stack)
            rows = query_results(
                session.client("dynamodb"), refs.results_table, sweep=sweep, rig=rig,
                model=model, instance_type=instance_type, since=when,
            )  # fmt: skip
    except CloudError as exc:
        fail(exc)
    rendered = render_results(rows, fmt)  # type: ignore[arg-type]
    if isinstance(rendered, str):
        sys.stdout.write(rendered if rendered.endswith("\n") else rendered + "\n")
    else:
        console.print(rendered)


# ---------------------------------------------------------------------------------- reap


def reap_command(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List, terminate nothing")] = False,
    stack: StackOption = DEFAULT_STACK,
) -> None:
    """End the stack's instances past their deadline or whose sweep has ended; reconcile."""
    from functions.reaper import overdue_instances, reap
    from functions.settings import Clients

    console = Console()
    session, refs = resolve_or_exit(stack)
    clients = Clients(session)
    if dry_run:
        overdue = overdue_instances(clients.ec2, refs.stack_name, time.time())
        for entry in overdue:
            console.print(entry["instance"]["InstanceId"], entry["tags"])
        console.print(f"{len(overdue)} instance(s) past their deadline")
        return
    reaped = reap(clients, refs.stack_name, refs.ledger_table)
    console.print(
        f"terminated {len(reaped.instances)} instance(s) past their deadline or orphaned by "
        f"their sweep: {' '.join(reaped.instances)}"
    )
    if reaped.released_sweeps:
        console.print(
            f"released the reservations of ended sweeps: {' '.join(reaped.released_sweeps)}"
        )


# ---------------------------------------------------------------------------------- deploy


def deploy_bundle(
    session: "boto3.session.Session", refs: StackRefs, root: Path = REPO_ROOT
) -> dict[str, Any]:
    bundle = build_bundle(root)
    return upload_bundle(session.client("s3"), refs.bucket, bundle)


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
    """`sam build` and `sam deploy` the stack, then upload the rig + harness bundle."""
    console = Console()
    if not bundle_only:
        deploy = ["sam", "deploy", "--stack-name", stack, "--capabilities", "CAPABILITY_IAM",
                  "--resolve-s3", "--no-fail-on-empty-changeset"]  # fmt: skip
        if guided:
            deploy.append("--guided")
        if parameter:
            deploy += ["--parameter-overrides", *parameter]
        for command in (["sam", "build"], deploy):
            console.print(f"[bold]$ {' '.join(command)}[/]")
            if subprocess.run(command, cwd=REPO_ROOT).returncode != 0:
                console.print(f"[red]{command[1]} failed[/]")
                raise typer.Exit(1)
    try:
        session, refs = resolve(stack)
        manifest = deploy_bundle(session, refs)
    except CloudError as exc:
        fail(exc)
    console.print(
        f"bundle {manifest['sha256'][:12]} (rigs: {', '.join(manifest['rigs'])}) "
        f"-> s3://{refs.bucket}/{manifest['key']}"
    )


def register(app: typer.Typer) -> None:
    app.command("run")(run_command)
    app.command("status")(status_command)
    app.command("results")(results_command)
    app.command("reap")(reap_command)
    app.command("deploy")(deploy_command)
