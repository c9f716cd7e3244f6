"""`rigbench mcp --local` as a real stdio subprocess, driven by the SDK's stdio client: every
tool over the wire, a sweep run to its end while rig processes share the server's stdout,
then another sweep started and its client gone mid-sweep. What the server stored is read back
from its state directory by the tools on the stack `rigbench mcp --local --home` opens, in this
process, which never held either sweep: the first sweep's results as stored, the second found
stopped (a second server process would add only its start-up, about 10 CPU-s).
"""

import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.types import TextResourceContents

from rigbench.commands.local import local_stack
from rigbench.mcp.server import COMPARISON_URI, REPORT_HTML_URI, REPORT_URI
from rigbench.mcp.tools import SweepTools
from rigbench.stack.models import ResultsQuery
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
        rigs = {r["name"]: r for r in (await ok(client, "list_rigs"))["rigs"]}
        assert rigs["torch"]["runs_here"] is True

        over = await refused(client, "start_sweep", {**sweep, "budget_usd": 2})
        assert "ceiling of 1.5 USD" in over
        assert await refused(client, "start_sweep", {"rigs": "torch"})
        assert "not terminated" in await refused(
            client, "terminate", {"instance_id": "i-0123456789abcdef0"}
        )

        started_at = datetime.now(UTC) - timedelta(seconds=1)
        planned = await ok(client, "plan_sweep", sweep)
        assert planned["can_start"] is True, planned["reasons"]
        assert planned["within_ceiling"] is True
        assert planned["reasons"] == []
        assert [(b["rig"], b["boot"]) for b in planned["plan"]["boots"]] == [("torch", 1)]
        reservation = planned["plan"]["reservation"]
        assert 0 < reservation["total_usd"] <= sweep["budget_usd"]
        assert planned["plan"]["quota"]["max_concurrency"] == 1

        started = await ok(client, "start_sweep", sweep)
        assert started["sweep_id"] == "mcp-stdio"
        assert started["ceiling_usd"] == CEILING_USD
        phases: set[str] = set()
        deadline = time.monotonic() + SWEEP_TIMEOUT_S
        while True:
            status = await ok(client, "sweep_status", {"sweep_id": "mcp-stdio"})
            phases |= {b["phase"] for b in status["progress"]["boots"]}
            if status["done"]:
                break
            assert time.monotonic() < deadline, status
            await anyio.sleep(1.0)
        assert status["progress"]["status"] == "SUCCEEDED", status["explained"]
        assert status["explained"] == []
        [boot] = status["progress"]["boots"]
        assert (boot["rig"], boot["boot"], boot["phase"]) == ("torch", 1, "terminated")
        assert boot["instance_id"].startswith("i-")
        assert "benchmarking" in phases or "terminated" in phases

        listed = await ok(client, "list_sweeps", {"since": started_at.isoformat()})
        assert "mcp-stdio" in {s["sweep_id"] for s in listed["sweeps"]}
        later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        assert (await ok(client, "list_sweeps", {"since": later}))["sweeps"] == []
        await query_and_compare(client)

        assert (await ok(client, "list_instances"))["instances"] == []
        reaped = await ok(client, "reap", {"dry_run": True})
        assert reaped["report"] == {"dry_run": True, "instances": [], "released_sweeps": []}
        reaped = await ok(client, "reap")
        assert reaped["report"]["dry_run"] is False
        assert reaped["report"]["instances"] == []
        await start_and_go_away(client)


async def query_and_compare(client: Client) -> None:
    """The finished sweep's rows, comparison, report page and its summary, as tools and
    resources give them."""
    results = await ok(client, "query_results", {"sweep": "mcp-stdio"})
    assert results["total"] == 2
    assert not results["truncated"]
    assert sorted(r["cell"] for r in results["rows"]) == ["c00001", "c00002"]
    for row in results["rows"]:
        assert (row["rig"], row["boot"], row["model"]) == ("torch", 1, "random:tiny")
        assert row["metrics"]["requests_ok"] == 2
    page = await ok(client, "query_results", {"sweep": "mcp-stdio", "limit": 1})
    assert len(page["rows"]) == 1
    assert page["truncated"] is True
    by_rig = await ok(client, "query_results", {"rig": "torch"})
    assert {r["sweep_id"] for r in by_rig["rows"]} >= {"mcp-stdio"}

    compact = await ok(client, "compare", {"sweep_id": "mcp-stdio"})
    assert compact["comparison"] is None  # compact unless detail
    assert (compact["baseline"], compact["rigs"]) == ("torch", ["torch"])
    compared = await ok(client, "compare", {"sweep_id": "mcp-stdio", "detail": True})
    assert len(json.dumps(compact)) < len(json.dumps(compared)) / 5
    comparison = compared["comparison"]
    assert comparison["rigs"] == ["torch"]
    assert comparison["baseline"] == "torch"
    # the load cells, then each boot's start (time to ready and its cost, from the rows)
    assert [c["cell"] for c in comparison["cells"]] == ["c=1", "c=2", "start-up"]
    start = {m["metric"]["key"]: m for m in comparison["cells"][2]["metrics"]}
    assert set(start) == {"ready_s", "startup_usd"}
    assert start["ready_s"]["results"][0]["boots"][0] > 0
    [torch] = comparison["cells"][0]["metrics"][0]["results"]
    assert torch["aggregate"]["n_boots"] == 1
    assert torch["aggregate"]["value"] > 0
    assert compared["verdicts"] == []  # one rig: nothing to judge
    assert compared["flipped"] is False
    assert comparison["emulated"] == (
        "local emulation on this machine's CPU; prices and AMIs are emulated"
    )
    read = await client.read_resource(COMPARISON_URI.format(sweep_id="mcp-stdio"))
    content = read.contents[0]
    assert isinstance(content, TextResourceContents)
    assert json.loads(content.text) == compared
    read = await client.read_resource(REPORT_HTML_URI.format(sweep_id="mcp-stdio"))
    [html] = read.contents
    assert isinstance(html, TextResourceContents)
    assert html.mime_type == "text/html"
    assert "<title>rigbench sweep mcp-stdio</title>" in html.text
    assert 'id="plot-throughput"' in html.text
    assert "<script src=" not in html.text  # self-contained: plotly.js is inlined
    assert "rigbench run --local sweep.json" in html.text  # as it was really started
    assert len(html.text.encode()) <= 2_000_000
    # The report resource summarises the page and points at it.
    read = await client.read_resource(REPORT_URI.format(sweep_id="mcp-stdio"))
    [summary_text] = read.contents
    assert isinstance(summary_text, TextResourceContents)
    assert summary_text.mime_type == "application/json"
    summary = json.loads(summary_text.text)
    assert summary["html"] == REPORT_HTML_URI.format(sweep_id="mcp-stdio")
    assert summary["size_bytes"] == len(html.text.encode())
    assert summary["title"] == "rigbench sweep mcp-stdio"
    assert "Comparison" in " ".join(summary["sections"])
    assert summary["verdicts"] == compact["verdicts"]
    assert len(summary_text.text) < 5000


async def start_and_go_away(client: Client) -> None:
    """Start another sweep and follow it until its boot is launched; the caller then closes
    the client."""
    await ok(client, "start_sweep", sweep_input(sweep_id="mcp-away"))
    deadline = time.monotonic() + SWEEP_TIMEOUT_S
    while True:
        status = await ok(client, "sweep_status", {"sweep_id": "mcp-away"})
        if any(b["instance_id"] for b in status["progress"]["boots"]):
            return
        assert not status["done"], status
        assert time.monotonic() < deadline, status
        await anyio.sleep(0.5)


def as_a_server_reopened_would_read_them(home: Path) -> tuple[dict[str, Any], ...]:
    """`sweep_status` of both sweeps and `query_results` of the first, on the stack
    `rigbench mcp --local --home` opens, as tool calls return them."""
    with local_stack(home, save=True) as stack:
        tools = SweepTools(stack, ceiling_usd=CEILING_USD)
        answers = (
            tools.sweep_status("mcp-stdio"),
            tools.query_results(ResultsQuery(sweep="mcp-stdio"), limit=500),
            tools.sweep_status("mcp-away"),
        )
    return tuple(a.model_dump(mode="json") for a in answers)


# One server, one home (each server start costs seconds of CPU).
@pytest.mark.slow
def test_a_stdio_server_runs_a_sweep_then_stops_one_whose_client_went_away(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    anyio.run(run_sweep_over_stdio, home)
    assert processes_under(tmp_path) == []
    # Locally the report's place is a file of the home, kept when the server's session saves.
    assert "<title>rigbench sweep mcp-stdio</title>" in (home / "report-mcp-stdio.html").read_text()

    finished, rows, stopped = as_a_server_reopened_would_read_them(home)
    assert finished["progress"]["status"] == "SUCCEEDED"
    assert rows["total"] == 2
    assert {r["sweep_id"] for r in rows["rows"]} == {"mcp-stdio"}
    progress = stopped["progress"]
    assert (progress["status"], progress["error"]) == ("ABORTED", "SessionStopped")
    [line] = stopped["explained"]
    assert line.startswith("sweep mcp-away aborted in RunBoots: SessionStopped: the MCP server ")
    assert "its local instances terminated" in line
    assert "AttributeError" not in json.dumps(stopped)
    assert processes_under(tmp_path) == []
