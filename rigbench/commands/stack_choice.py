"""Which stack a command works on, and how a command fails: shared by the cloud commands
(`rigbench.cloud`), the report commands, `regressions`, `bake` and the MCP server.

`open_stack` chooses once: the deployed stack (`--stack`, default `rigbench`), or with `--local`
(or no AWS credentials) the embedded emulation, so the same command code serves both.
"""

import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from rigbench.commands import local as local_cli
from rigbench.stack import StackClient, StackError

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
