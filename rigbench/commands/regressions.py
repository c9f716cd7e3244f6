"""`rigbench regressions`: the regression alerts sweeps raised (a rig significantly worse than
its own recent history; functions/regressions.py), as a table or JSON."""

import json
import sys
from typing import Annotated

import typer
from rich.console import Console

from rigbench.commands import local as local_cli
from rigbench.commands.stack_choice import (
    DEFAULT_STACK,
    CloudError,
    StackOption,
    fail,
    open_stack,
    parse_since,
)


def regressions_command(
    since: Annotated[
        str | None, typer.Option(help="Sweeps started from this date (default: 30 days ago)")
    ] = None,
    sweep: Annotated[str | None, typer.Option(help="Only this sweep id")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table or json")] = "table",
    stack: StackOption = DEFAULT_STACK,
    local: local_cli.LocalOption = False,
    home: local_cli.HomeOption = None,
) -> None:
    """Regression alerts: a rig significantly worse than its own recent history (same model,
    instance type and settings) by more than the sweep's regression_ratio; --local (or no AWS
    credentials): those of local sweeps."""
    try:
        if fmt not in ("table", "json"):
            raise CloudError(f"--format must be table or json, not {fmt!r}")
        when = parse_since(since)
    except CloudError as exc:
        fail(exc)
    with open_stack(local, stack, home) as client:
        found = client.regressions(since=when, sweep=sweep)
    if fmt == "json":
        sys.stdout.write(json.dumps([r.model_dump(mode="json") for r in found], indent=2) + "\n")
        return
    from rigbench.commands.regression_table import regressions_table

    console = Console()
    if not found:
        console.print("no regression alerts in the period asked (widen it with --since)")
        return
    console.print(regressions_table(found, f"{len(found)} regression alert(s)"))
