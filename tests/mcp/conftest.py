"""An MCP client session on the rigbench server, over the embedded emulation."""

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import CallToolResult, TextContent
from rich.console import Console

from rigbench.local.emulated import EmulatedAccount
from rigbench.local.home import LocalHome
from rigbench.stack.local import LocalStack
from tests.local.conftest import processes_under

logging.getLogger("moto").setLevel(logging.CRITICAL)

CEILING_USD = 2.0
QUOTA_VCPUS = 8.0  # one g5g.2xlarge at a time


TOOLS = {
    "check_quotas", "plan_sweep", "start_sweep", "sweep_status", "list_sweeps",
    "query_results", "compare", "list_instances", "terminate", "reap", "list_rigs",
    "list_regressions", "stop_sweep",
}  # fmt: skip
DESTRUCTIVE = {"terminate", "reap", "stop_sweep"}
SWEEP_TIMEOUT_S = 400


def text(result: CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, TextContent))


async def ok(client: Client, tool: str, arguments: dict[str, Any] | None = None) -> Any:
    result = await client.call_tool(tool, arguments or {})
    assert not result.is_error, f"{tool}: {text(result)}"
    assert result.structured_content is not None
    return result.structured_content


async def refused(client: Client, tool: str, arguments: dict[str, Any]) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} was not refused: {result.structured_content}"
    return text(result)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """One emulated stack for a module's tests (it takes seconds to start)."""
    root: Path = tmp_path_factory.mktemp("mcp")
    account = EmulatedAccount(quota_vcpus=QUOTA_VCPUS)
    with LocalStack(LocalHome(root / "home"), account, console=Console(stderr=True)) as opened:
        yield opened
    assert processes_under(root) == []
