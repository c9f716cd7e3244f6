"""`rigbench stop SWEEP`: stop a running sweep, wait until none of its instances runs, say
who stopped it (the stack client's `stop_sweep` does the stopping)."""

import time
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from rigbench.commands import local as local_cli
from rigbench.commands.stack_choice import DEFAULT_STACK, StackOption, fail, open_stack
from rigbench.stack import StackError

STOP_SETTLE_S = 120.0  # how long `stop` waits for the status-change handler to end instances


def who() -> str:
    """Who stops a sweep, as its status will say."""
    import getpass
    import socket

    return f"{getpass.getuser()}@{socket.gethostname()}"


def stop_command(
    sweep: Annotated[str, typer.Argument(help="Sweep id (execution name) or execution ARN")],
    stack: StackOption = DEFAULT_STACK,
    local: local_cli.LocalOption = False,
    home: local_cli.HomeOption = None,
) -> None:
    """Stop a running sweep: its execution ends, every instance of it is terminated and each
    boot billed to when its instance ended; its status says who stopped it (--local: a sweep
    running on this machine, in the process that started it)."""
    console = Console()
    with open_stack(local, stack, home) as client:
        try:
            progress = client.stop_sweep(sweep, who())
        except StackError as exc:
            fail(exc)
        console.print(f"[yellow]{progress.status}[/] {escape(progress.cause)}", soft_wrap=True)
        if client.kind != "aws":
            console.print(
                "the process running it ends its local instances and saves the sweep as stopped: "
                f"`rigbench status --local {progress.sweep_id}`"
            )
            return
        deadline = time.monotonic() + STOP_SETTLE_S
        while True:
            live = [i.instance_id for i in client.instances() if i.sweep_id == progress.sweep_id]
            if not live or time.monotonic() > deadline:
                break
            time.sleep(2.0)
    if live:
        console.print(
            f"[red]{len(live)} instance(s) of the sweep still live after {STOP_SETTLE_S:g} s: "
            f"{' '.join(live)}[/] (its status-change handler ends them; each also ends by its own "
            "deadline timer, and `rigbench reap` ends any past it)"
        )
        raise typer.Exit(1)
    console.print(f"no instance of sweep {progress.sweep_id} is running")
