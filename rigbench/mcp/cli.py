"""`rigbench mcp`: the MCP server over stdio, or streamable HTTP on loopback with --http."""

import contextlib
import signal
import sys
import time
from typing import Annotated

import typer

from rigbench.cloud import DEFAULT_STACK, StackOption, connect_aws, use_local
from rigbench.commands import local as local_cli
from rigbench.stack import StackError

MCP_STOP_CAUSE = (
    "the MCP server stopped while the sweep ran (its client went away, or it was signalled): "
    "the sweep was stopped, its local instances terminated and the rows it stored kept; "
    "start it again to finish it"
)
DEFAULT_CEILING_USD = 5.0  # a few timed boots of a g5g.2xlarge; the seed's three sweeps: < $3


def mcp_command(
    local: local_cli.LocalOption = False,
    max_sweep_usd: Annotated[
        float,
        typer.Option(
            "--max-sweep-usd",
            min=0.01,
            help="Refuse any sweep whose budget_usd is above this (tools cannot raise it)",
        ),
    ] = DEFAULT_CEILING_USD,
    http: Annotated[
        int | None,
        typer.Option("--http", min=1, max=65535, help="Serve streamable HTTP on 127.0.0.1:PORT"),
    ] = None,
    stack: StackOption = DEFAULT_STACK,
    home: local_cli.HomeOption = None,
) -> None:
    """Serve rigbench's tools (plan, start, follow and query sweeps) to an MCP client, on the
    deployed stack or, with --local (or no AWS credentials), on the embedded emulation."""
    from rigbench.local.session import interrupts_as_keyboard_interrupt
    from rigbench.mcp.server import build_server
    from rigbench.stack.local import LocalStack

    # Stdout is the stdio transport: whatever opening the stack prints goes to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        try:
            client = (
                local_cli.local_stack(home, save=True) if use_local(local) else connect_aws(stack)
            )
            opened = client.__enter__()
            if isinstance(opened, LocalStack):  # its sweeps live in this process
                opened.session.stop_cause = MCP_STOP_CAUSE
        except StackError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
    try:
        server = build_server(opened, max_sweep_usd)
        with contextlib.suppress(KeyboardInterrupt), interrupts_as_keyboard_interrupt():
            if http is None:
                server.run("stdio")
            else:
                typer.echo(f"rigbench MCP server on http://127.0.0.1:{http}/mcp", err=True)
                server.run("streamable-http", host="127.0.0.1", port=http)
    finally:
        # An MCP client closes stdin, then sends SIGTERM after a grace period: the stack
        # still stops its sweeps, saves what they stored and ends its instances.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        started = time.monotonic()
        client.__exit__(None, None, None)
        typer.echo(f"stack closed in {time.monotonic() - started:.1f} s", err=True)
