"""`rigbench mcp`: the MCP server over stdio, or streamable HTTP with --http (on loopback
unless --host says otherwise; beyond loopback, or with --require-token, behind a bearer
token: rigbench.mcp.auth)."""

import contextlib
import signal
import sys
import time
from typing import TYPE_CHECKING, Annotated

import typer

from rigbench.commands import local as local_cli
from rigbench.commands.stack_choice import DEFAULT_STACK, StackOption, connect_aws, use_local
from rigbench.stack import StackError

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

MCP_STOP_CAUSE = (
    "the MCP server stopped while the sweep ran (its client went away, or it was signalled): "
    "the sweep was stopped, its local instances terminated and the rows it stored kept; "
    "start it again to finish it"
)
DEFAULT_CEILING_USD = 5.0  # a few timed boots of a g5g.2xlarge; the seed's three sweeps: < $3


def serve_with_token(server: "MCPServer", host: str, port: int, token: str) -> None:
    """Streamable HTTP as the SDK serves it, behind `BearerAuth`."""
    import uvicorn

    from rigbench.mcp.auth import BearerAuth

    app = BearerAuth(server.streamable_http_app(host=host), token)
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).run()


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
        typer.Option("--http", min=1, max=65535, help="Serve streamable HTTP on HOST:PORT"),
    ] = None,
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="--http's address; beyond loopback every request needs the bearer token "
            "(RIGBENCH_MCP_TOKEN, or one printed at start)",
        ),
    ] = "127.0.0.1",
    require_token: Annotated[
        bool,
        typer.Option(
            "--require-token", help="--http on loopback also needs the bearer token (other users)"
        ),
    ] = False,
    stack: StackOption = DEFAULT_STACK,
    home: local_cli.HomeOption = None,
) -> None:
    """Serve rigbench's tools (plan, start, follow and query sweeps) to an MCP client, on the
    deployed stack or, with --local (or no AWS credentials), on the embedded emulation."""
    from rigbench.local.session import interrupts_as_keyboard_interrupt
    from rigbench.mcp.auth import TokenError, bearer_token, needs_token
    from rigbench.mcp.server import build_server
    from rigbench.stack.local import LocalStack

    token: str | None = None
    if http is not None and needs_token(host, require_token):
        try:
            token, made = bearer_token()
        except TokenError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        if made:
            typer.echo(f"bearer token (set RIGBENCH_MCP_TOKEN to choose one): {token}", err=True)

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
            elif token is None:
                typer.echo(f"rigbench MCP server on http://{host}:{http}/mcp", err=True)
                server.run("streamable-http", host=host, port=http)
            else:
                typer.echo(
                    f"rigbench MCP server on http://{host}:{http}/mcp (bearer token required)",
                    err=True,
                )
                serve_with_token(server, host, http, token)
    finally:
        # An MCP client closes stdin, then sends SIGTERM after a grace period: the stack
        # still stops its sweeps, saves what they stored and ends its instances.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        started = time.monotonic()
        client.__exit__(None, None, None)
        typer.echo(f"stack closed in {time.monotonic() - started:.1f} s", err=True)
