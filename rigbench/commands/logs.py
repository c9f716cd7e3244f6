"""`rigbench logs SWEEP`: the bootstrap and rig logs each boot's instance left."""

import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from rigbench.commands import local as local_cli
from rigbench.commands.stack_choice import DEFAULT_STACK, CloudError, StackOption, fail, open_stack
from rigbench.stack import StackError


def logs_command(
    sweep: Annotated[str, typer.Argument(help="Sweep id")],
    rig: Annotated[str | None, typer.Option("--rig", help="Only this rig")] = None,
    boot: Annotated[int | None, typer.Option("--boot", help="Only this boot", min=1)] = None,
    tail: Annotated[
        int | None, typer.Option("--tail", help="Only the last N lines of each log", min=1)
    ] = None,
    stack: StackOption = DEFAULT_STACK,
    local: local_cli.LocalOption = False,
    home: local_cli.HomeOption = None,
) -> None:
    """Print the logs each boot's instance left: its bootstrap log and its rig's log, uploaded
    to the sweep's S3 prefix before the instance ended (--local: from each local instance's
    folder)."""
    console = Console(soft_wrap=True)
    with open_stack(local, stack, home) as client:
        try:
            logs = client.boot_logs(sweep, rig, boot)
        except StackError as exc:
            fail(exc)
    if not logs:
        which = " ".join(f for f in (rig and f"rig {rig}", boot and f"boot {boot}") if f)
        fail(
            CloudError(
                f"no logs of sweep {sweep!r}{' ' + which if which else ''}: its instances "
                "uploaded none (still booting, or ended before the upload ran)"
            ),
            code=1,
        )
    for log in logs:
        lines = log.text.splitlines()
        shown = lines[-tail:] if tail else lines
        more = f", last {len(shown)} of {len(lines)} lines" if len(shown) < len(lines) else ""
        console.print(
            f"[bold]== {log.rig} boot {log.boot}, {log.instance_id}, {log.name}{more} "
            f"({escape(log.location)}) ==[/]"
        )
        sys.stdout.write("".join(f"{line}\n" for line in shown))
        sys.stdout.flush()
