"""`rigbench mcp --local` as a real stdio subprocess, driven by the SDK's stdio client: every
tool over the wire, a sweep run to its end while rig processes share the server's stdout,
and what it stored read back by a second server on the same state directory; that server's
client goes away mid-sweep, and a third server finds that sweep stopped."""

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.local.conftest import processes_under, sweep_input
from tests.mcp.conftest import SWEEP_TIMEOUT_S, TOOLS, ok, refused

REPO = Path(__file__).resolve().parents[2]
CEILING_USD = 1.5


def server_params(home: Path) -> StdioServerParameters:
    """The server as an MCP client would start it, with no AWS credentials anywhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    nowhere = str(home / "no-such-aws-file")
    env |= {
        "AWS_SHARED_CREDENTIALS_FILE": nowhere,
        "AWS_CONFIG_FILE": nowhere,
        "AWS_EC2_METADATA_DISABLED": "true",
        "PYTHONPATH": str(REPO),
        "RIGBENCH_LOCAL_QUOTA_VCPUS": "8",
    }
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "rigbench", "mcp", "--local", "--home", str(home),
              "--max-sweep-usd", str(CEILING_USD)],
        env=env,
        cwd=str(REPO),
    )  # fmt: skip


async def run_sweep_over_stdio(home: Path) -> None:
    sweep = sweep_input(sweep_id="mcp-stdio")
    async with Client(server_params(home)) as client:
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        assert (await ok(client, "check_quotas", {}))["spot"]["fits"] == 1
        assert "torch" in {r["name"] for r in (await ok(client, "list_rigs"))["rigs"]}

        over = await refused(client, "start_sweep", {**sweep, "budget_usd": 2})
        assert "ceiling of 1.5 USD" in over
        assert await refused(client, "start_sweep", {"rigs": "torch"})
        assert "not terminated" in await refused(
            client, "terminate", {"instance_id": "i-0123456789abcdef0"}
        )

        planned = await ok(client, "plan_sweep", sweep)
        assert planned["can_start"] is True, planned["reasons"]
        started = await ok(client, "start_sweep", sweep)
        deadline = time.monotonic() + SWEEP_TIMEOUT_S
        while not (status := await ok(client, "sweep_status", {"sweep_id": started["sweep_id"]}))[
            "done"
        ]:
            assert time.monotonic() < deadline, status
            await anyio.sleep(1.0)
        assert status["progress"]["status"] == "SUCCEEDED", status["explained"]

        assert "mcp-stdio" in {s["sweep_id"] for s in (await ok(client, "list_sweeps"))["sweeps"]}
        rows = await ok(client, "query_results", {"sweep": "mcp-stdio"})
        assert rows["total"] == 2
        compared = await ok(client, "compare", {"sweep_id": "mcp-stdio"})
        assert compared["rigs"] == ["torch"]
        assert compared["comparison"] is None  # compact unless detail
        assert (await ok(client, "list_instances"))["instances"] == []
        assert (await ok(client, "reap"))["report"]["instances"] == []


async def read_back_then_start_and_go_away(home: Path) -> dict[str, Any]:
    """A second server on the same home: read the finished sweep back, then start another and
    follow it until its boot is launched, then close the client."""
    async with Client(server_params(home)) as client:
        status = await ok(client, "sweep_status", {"sweep_id": "mcp-stdio"})
        assert status["progress"]["status"] == "SUCCEEDED"
        result: dict[str, Any] = await ok(client, "query_results", {"sweep": "mcp-stdio"})

        await ok(client, "start_sweep", sweep_input(sweep_id="mcp-away"))
        deadline = time.monotonic() + SWEEP_TIMEOUT_S
        while True:
            status = await ok(client, "sweep_status", {"sweep_id": "mcp-away"})
            if any(b["instance_id"] for b in status["progress"]["boots"]):
                break
            assert not status["done"], status
            assert time.monotonic() < deadline, status
            await anyio.sleep(0.5)
        return result


async def status_over_stdio(home: Path, sweep_id: str) -> dict[str, Any]:
    async with Client(server_params(home)) as client:
        return dict(await ok(client, "sweep_status", {"sweep_id": sweep_id}))


# One home, three servers one after another (each server start costs seconds of CPU).
@pytest.mark.slow
def test_stdio_servers_run_a_sweep_read_it_back_and_stop_one_whose_client_went_away(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    anyio.run(run_sweep_over_stdio, home)
    assert processes_under(tmp_path) == []

    rows = anyio.run(read_back_then_start_and_go_away, home)
    assert rows["total"] == 2
    assert {r["sweep_id"] for r in rows["rows"]} == {"mcp-stdio"}
    assert processes_under(tmp_path) == []

    status = anyio.run(status_over_stdio, home, "mcp-away")
    progress = status["progress"]
    assert (progress["status"], progress["error"]) == ("ABORTED", "SessionStopped")
    [line] = status["explained"]
    assert line.startswith("sweep mcp-away aborted in RunBoots: SessionStopped: the MCP server ")
    assert "its local instances terminated" in line
    assert "AttributeError" not in json.dumps(status)
    assert processes_under(tmp_path) == []
