"""`rigbench doctor`: is this account ready for a sweep? One line per check, each failure with
its fix (`rigbench.stack.doctor` does the checking); exit 1 when any check fails."""

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from rigbench.commands import local as local_cli

if TYPE_CHECKING:  # boto3 and the handlers load only when the command runs
    from rigbench.stack.doctor import Diagnosis

MARKS = {
    "ok": "[green]ok  [/]",
    "warn": "[yellow]warn[/]",
    "fail": "[red]FAIL[/]",
    "skipped": "[dim]skip[/]",
}


def print_diagnosis(console: Console, diagnosis: "Diagnosis", against: str) -> None:
    console.print(f"rigbench doctor: {against}")
    width = max(len(c.name) for c in diagnosis.checks)
    for check in diagnosis.checks:
        line = f"{MARKS[check.status]} {check.name:<{width}}  {escape(check.detail)}"
        if check.fix and check.status in ("fail", "warn"):
            line += f" [bold]fix:[/] {escape(check.fix)}"
        console.print(line, soft_wrap=True)
    failed = [c.name for c in diagnosis.checks if c.status == "fail"]
    console.print(
        f"[red]{len(failed)} check(s) failed: {', '.join(failed)}[/]"
        if failed
        else "[green]ready: `rigbench run --dry-run INPUT.json` plans a sweep against it[/]"
    )


def doctor_command(
    stack: Annotated[str, typer.Option("--stack", help="CloudFormation stack name")] = "rigbench",
    instance_type: Annotated[
        str, typer.Option("--instance-type", help="Instance type to check quota, price, images for")
    ] = "g5g.2xlarge",
    local: local_cli.LocalOption = False,
    home: local_cli.HomeOption = None,
) -> None:
    """Check what a sweep on the AWS account needs, read-only, one line per check with its fix:
    credentials and region, the stack and its version, quota room, a spot price in the stack's
    zones, the Hugging Face token secret (a plaintext string), the rig bundle, baked images
    (--local: the same checks on the embedded emulation). Exit 1 when any check fails."""
    import boto3

    from rigbench import version
    from rigbench.stack.doctor import diagnose

    console = Console()
    if local:
        from rigbench.local.emulated import EmulatedAccount
        from rigbench.stack.local import LocalStack

        with LocalStack(home, EmulatedAccount.from_env(), keep_results=False) as client:
            emu = client.session.emu
            diagnosis = diagnose(emu.session(), emu.stack_name, version(), instance_type)
        against = "the embedded emulation (local mode)"
    else:
        session = boto3.session.Session()
        diagnosis = diagnose(session, stack, version(), instance_type)
        against = f"stack {stack!r} in {session.region_name or 'no region'}"
    print_diagnosis(console, diagnosis, against)
    raise typer.Exit(0 if diagnosis.ok else 1)
