"""Every tool through the SDK's own client, in memory, on the embedded emulation: plans, a
sweep the quota cannot hold, the refusals (over the ceiling, an instance the stack did not
launch, malformed arguments) as tool errors, after which the server keeps serving. A sweep
planned, started, followed to its end, queried and compared is tests/mcp/test_stdio.py's,
over the wire."""

import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.types import TextResourceContents
from rich.console import Console

from functions.execution_input import SCHEMA_PATH, SweepInput
from functions.settings import PROJECT_TAG, sweep_report_key
from harness.version import harness_version
from rigbench.commands.local_sweep import local_rigs
from rigbench.mcp.server import (
    COMPARISON_URI,
    REPORT_HTML_URI,
    REPORT_URI,
    SCHEMA_URI,
    build_server,
)
from rigbench.mcp.tools import Refused, SweepTools
from rigbench.progress import boot_failures, status_table
from rigbench.stack.local import LocalStack
from rigs.registry import discover
from tests.local.conftest import sweep_input, wait_for
from tests.mcp.conftest import (
    CEILING_USD,
    DESTRUCTIVE,
    QUOTA_VCPUS,
    SWEEP_TIMEOUT_S,
    TOOLS,
    ok,
    refused,
    text,
)

pytestmark = pytest.mark.slow


def with_client(
    stack: LocalStack, body: Callable[[Client], Awaitable[None]], mode: str = "auto"
) -> None:
    """`auto`: the SDK's in-process dispatch; `legacy`: JSON-RPC over in-memory streams."""

    async def run() -> None:
        async with Client(build_server(stack, CEILING_USD), mode=mode) as client:
            await body(client)

    anyio.run(run)


def test_tools_have_typed_schemas_and_annotations(stack: LocalStack) -> None:
    async def body(client: Client) -> None:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == TOOLS
        for name, tool in listed.items():
            assert tool.output_schema is not None, name
            assert tool.annotations is not None, name
            if name in DESTRUCTIVE:
                assert tool.annotations.destructive_hint is True, name
                assert tool.annotations.read_only_hint is False, name
            elif name == "start_sweep":
                assert tool.annotations.read_only_hint is False
                assert tool.annotations.destructive_hint is False
            else:
                assert tool.annotations.read_only_hint is True, name
            # Descriptions read as prose: no docstring indentation, no hard breaks.
            assert tool.description
            assert "\n" not in tool.description, (name, tool.description)
            assert "  " not in tool.description, (name, tool.description)
            assert '"title"' not in json.dumps(tool.input_schema), name  # no generated "Budget Usd"
            assert tool.input_schema.get("additionalProperties") is False, name
            for arg, prop in tool.input_schema.get("properties", {}).items():
                assert prop.get("description"), f"{name}.{arg} has no description"
        # The sweep input's fields, flat, each described; what this stack runs as enums.
        for name in ("plan_sweep", "start_sweep"):
            schema = listed[name].input_schema
            assert set(schema["properties"]) == set(SweepInput.model_fields), name
            assert set(schema["required"]) == {"rigs", "model", "budget_usd"}
            props = schema["properties"]
            assert props["rigs"]["items"]["enum"] == local_rigs()
            assert "vllm" not in props["rigs"]["items"]["enum"]  # no GPU here
            assert props["instance_type"]["enum"] == stack.allowed_instance_types()
            assert "USD" in props["budget_usd"]["description"]
            assert props["cells"]["examples"]
            for model in ("LoadCells", "Deadlines", "Waits"):
                for field, prop in schema["$defs"][model]["properties"].items():
                    assert prop.get("description"), f"{model}.{field} has no description"
        assert listed["terminate"].input_schema["properties"]["instance_id"]["pattern"]
        assert client.server_info is not None
        assert client.server_info.version == harness_version()

    with_client(stack, body)


def account_state(stack: LocalStack) -> dict[str, Any]:
    """Everything a plan could write: sweeps, table items, objects, instances, local files."""
    ddb, s3 = stack.client("dynamodb"), stack.client("s3")
    return {
        "sweeps": stack.list_sweeps(1000),
        "tables": {
            name: ddb.scan(TableName=name)["Items"] for name in ddb.list_tables()["TableNames"]
        },
        "objects": [
            o["Key"] for o in s3.list_objects_v2(Bucket=stack.refs.bucket).get("Contents", [])
        ],
        "instances": stack.session.emu.running_instances(),
        "home": sorted(
            (str(p.relative_to(stack.home.root)), p.stat().st_size, p.stat().st_mtime_ns)
            for p in stack.home.root.rglob("*")
            if p.is_file()
        ),
    }


def test_five_plans_write_nothing(stack: LocalStack) -> None:
    before = account_state(stack)

    async def body(client: Client) -> None:
        for boots in (1, 2, 3, 4, 2):  # five plans (5 boots would pass the history limit)
            planned = await ok(client, "plan_sweep", sweep_input(boots_per_rig=boots))
            assert planned["can_start"] is True, planned["reasons"]
            assert len(planned["plan"]["boots"]) == boots
            assert planned["plan"]["reservation"]["total_usd"] > 0
            assert "emulation" in planned["plan"]["planned_against"]

    with_client(stack, body)
    assert account_state(stack) == before


def test_a_plan_takes_a_workload_an_slo_and_a_capacity_search(stack: LocalStack) -> None:
    async def body(client: Client) -> None:
        given = sweep_input(
            workload={"kind": "shared_prefix", "groups": 2, "prefix_tokens": 16,
                      "suffix_tokens": {"mean": 8, "stddev": 2}},
            slo={"ttft_ms": 500, "percentile": 95},
            capacity={"by": "rate", "max": 8},
            cells={"concurrency": [1], "rates": [2], "arrival": {"gamma": 0.5}},
        )  # fmt: skip
        planned = await ok(client, "plan_sweep", given)
        assert planned["can_start"] is True, planned["reasons"]
        bad = await refused(client, "plan_sweep", sweep_input(capacity={"by": "rate", "max": 8}))
        assert "needs an slo" in bad

    with_client(stack, body)


def test_a_plan_refuses_a_rig_this_machine_cannot_serve(stack: LocalStack) -> None:
    cannot = [r for r in discover() if r not in local_rigs()]
    assert cannot, "every rig runs here: nothing to refuse"
    tools = SweepTools(stack, CEILING_USD)
    sweep = SweepInput.model_validate(sweep_input(rigs=["torch", cannot[0]]))
    planned = tools.plan_sweep(sweep)
    assert planned.can_start is False
    assert planned.plan.valid is False
    assert planned.reasons == [
        f"rigs: {cannot[0]} cannot run on this machine (it runs: {', '.join(local_rigs())}; "
        "see list_rigs)"
    ]
    with pytest.raises(Refused, match=f"nothing launched: rigs: {cannot[0]} cannot run"):
        tools.start_sweep(sweep)


def test_resources_hold_the_input_schema(stack: LocalStack) -> None:
    async def body(client: Client) -> None:
        uris = {str(r.uri) for r in (await client.list_resources()).resources}
        assert SCHEMA_URI in uris
        templates = {
            t.uri_template for t in (await client.list_resource_templates()).resource_templates
        }
        assert COMPARISON_URI in templates
        assert REPORT_URI in templates
        assert REPORT_HTML_URI in templates
        read = await client.read_resource(SCHEMA_URI)
        content = read.contents[0]
        assert isinstance(content, TextResourceContents)
        assert json.loads(content.text) == json.loads(SCHEMA_PATH.read_text())
        # A sweep that does not exist is an error that says so; the server goes on serving.
        with pytest.raises(MCPError, match="no report for sweep 'no-such-sweep'"):
            await client.read_resource(REPORT_URI.format(sweep_id="no-such-sweep"))
        assert (await client.read_resource(SCHEMA_URI)).contents

    with_client(stack, body)


def test_quotas_for_both_markets(stack: LocalStack) -> None:
    async def body(client: Client) -> None:
        quotas = await ok(client, "check_quotas", {"instance_type": "g5g.2xlarge"})
        for market, code in (("spot", "L-3819A6DF"), ("on_demand", "L-DB2E81BA")):
            check = quotas[market]
            assert check["quota_code"] == code
            assert check["quota_vcpus"] == QUOTA_VCPUS
            assert check["instance_vcpus"] == 8
            assert check["fits"] == int(check["room_vcpus"] // 8)

    with_client(stack, body)


def test_sweep_over_the_ceiling_is_refused_and_nothing_launched(stack: LocalStack) -> None:
    before = {s.sweep_id for s in stack.list_sweeps(100)}
    ec2 = stack.client("ec2")
    instances_before = ec2.describe_instances()["Reservations"]

    async def body(client: Client) -> None:
        over = sweep_input(budget_usd=CEILING_USD + 0.5, sweep_id="over-ceiling")
        message = await refused(client, "start_sweep", over)
        assert "ceiling" in message
        assert f"{CEILING_USD:g} USD" in message
        assert "nothing launched" in message
        planned = await ok(client, "plan_sweep", over)
        assert planned["within_ceiling"] is False
        assert planned["can_start"] is False
        assert any("ceiling" in r for r in planned["reasons"])
        assert planned["plan"]["valid"] is True  # the stack alone would have run it

    with_client(stack, body)
    after = stack.list_sweeps(100)
    # The plan writes nothing; no execution of the refused sweep exists.
    assert "over-ceiling" not in {s.sweep_id for s in after}
    assert all(s.status != "RUNNING" for s in after if s.sweep_id not in before)
    assert ec2.describe_instances()["Reservations"] == instances_before
    assert stack.instances() == []


def test_terminate_refuses_an_instance_the_stack_did_not_launch(stack: LocalStack) -> None:
    ec2 = stack.client("ec2")
    image = ec2.describe_images()["Images"][0]["ImageId"]
    foreign = ec2.run_instances(
        ImageId=image, MinCount=1, MaxCount=1, InstanceType="t3.micro",
        TagSpecifications=[{"ResourceType": "instance", "Tags": [
            {"Key": PROJECT_TAG, "Value": "some-other-stack"}]}],
    )["Instances"][0]["InstanceId"]  # fmt: skip

    async def body(client: Client) -> None:
        message = await refused(client, "terminate", {"instance_id": foreign})
        assert foreign in message
        assert "not terminated" in message
        listed = await ok(client, "list_instances")
        assert foreign not in {i["instance_id"] for i in listed["instances"]}

    try:
        with_client(stack, body)
        state = ec2.describe_instances(InstanceIds=[foreign])["Reservations"][0]["Instances"][0]
        assert state["State"]["Name"] == "running"
    finally:
        ec2.terminate_instances(InstanceIds=[foreign])


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_malformed_arguments_are_tool_errors_and_the_server_keeps_serving(
    stack: LocalStack, mode: str
) -> None:
    async def body(client: Client) -> None:
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("start_sweep", {"rigs": ["torch"], "budget_usd": 1}, "model"),
            ("start_sweep", sweep_input(modle="x"), "modle"),
            ("start_sweep", sweep_input(rigs=["no-such-rig"]), "rigs.0"),
            ("start_sweep", sweep_input(instance_type="p5.48xlarge"), "instance_type"),
            ("plan_sweep", sweep_input(budget_usd="lots"), "budget_usd"),
            ("plan_sweep", sweep_input(cells={"concurrency": [1], "colour": 2}), "cells.colour"),
            ("plan_sweep", {}, "rigs"),
            # Past the tool's schema: the one parse of the input, its one error and message.
            (
                "plan_sweep",
                sweep_input(rig_settings={"jax": {"max_slots": 2}}),
                "invalid sweep input: rig_settings: settings for rig 'jax'",
            ),
            ("terminate", {"instance_id": "not-an-instance"}, "instance_id"),
            ("list_sweeps", {"since": "yesterday-ish"}, "since"),
            ("query_results", {"sweep": "x", "colour": "red"}, "colour"),
            ("sweep_status", {"sweep_id": "no-such-sweep"}, "no-such-sweep"),
            ("compare", {"sweep_id": "no-such-sweep"}, "no results"),
        ]
        for tool, arguments, named in cases:
            message = await refused(client, tool, arguments)
            assert named in message, message
            # ... and the next call is served.
            assert "sweeps" in await ok(client, "list_sweeps", {"limit": 5})
        unknown = await client.call_tool("no_such_tool", {})
        assert unknown.is_error
        assert "no_such_tool" in text(unknown)
        assert (await ok(client, "list_rigs"))["rigs"]

    with_client(stack, body, mode)


def test_a_sweep_that_cannot_fit_the_quota_fails_explained(stack: LocalStack) -> None:
    # A g5g.2xlarge needs 8 vCPUs; the account's quota, lowered to 4 for this test, cannot
    # hold one: CheckQuota fails the sweep before any launch.
    too_big = sweep_input(instance_type="g5g.2xlarge", sweep_id="mcp-no-room")

    async def body(client: Client) -> None:
        planned = await ok(client, "plan_sweep", too_big)
        assert planned["plan"]["valid"] is False
        assert planned["can_start"] is False
        assert planned["within_ceiling"] is True
        assert planned["reasons"] == [planned["plan"]["error"]]
        assert "quota" in planned["plan"]["error"].lower()

        await ok(client, "start_sweep", too_big)
        deadline = time.monotonic() + 120
        while not (status := await ok(client, "sweep_status", {"sweep_id": "mcp-no-room"}))["done"]:
            assert time.monotonic() < deadline, status
            await anyio.sleep(0.5)
        assert status["progress"]["status"] == "FAILED"
        [line] = status["explained"]
        assert line.startswith("sweep mcp-no-room failed in CheckQuota: ")
        assert "8" in line
        assert status["progress"]["boots"] == []
        assert (await ok(client, "list_instances"))["instances"] == []

    quota = stack.account.quota_vcpus
    stack.account.quota_vcpus = 4
    try:
        with_client(stack, body)
    finally:
        stack.account.quota_vcpus = quota


def test_a_report_kept_as_a_file_is_written_again_from_the_bucket(stack: LocalStack) -> None:
    """Locally a report's place is a file of the home: kept when the session saves, and
    written again from what WriteReport stored in the bucket once it is gone."""
    emu = stack.session.emu
    page = "<title>rigbench sweep mcp-kept</title>"
    emu.client("s3").put_object(
        Bucket=emu.stack_refs().bucket, Key=sweep_report_key("mcp-kept"), Body=page.encode()
    )
    kept = stack.home.report("mcp-kept")
    assert not kept.exists()
    stack.session.save()
    assert kept.read_text() == page
    kept.unlink()
    assert stack.report_location("mcp-kept") == str(kept)
    assert kept.read_text() == page
    kept.unlink()


def test_a_rig_that_dies_says_why_in_the_status_the_report_and_mcp(stack: LocalStack) -> None:
    """The rig's load fails (a test-only setting) with a line as long as torch's out-of-memory
    message: its words reach every place a failed boot is shown, not "no output". (A setting
    holds no space: it goes unquoted into the rig's command line.)"""
    free = "GPU_0_has_a_total_capacity_of_79.19_GiB_of_which_2.23_GiB_is_free."
    why = "torch.OutOfMemoryError:CUDA_out_of_memory.Tried_to_allocate_4.38_GiB." + free * 9
    failing = sweep_input(
        sweep_id="mcp-rig-dies", rig_settings={"torch": {"test_fail_at_load": why}}
    )

    async def body(client: Client) -> None:
        await ok(client, "start_sweep", failing)
        deadline = time.monotonic() + SWEEP_TIMEOUT_S
        while not (status := await ok(client, "sweep_status", {"sweep_id": "mcp-rig-dies"}))[
            "done"
        ]:
            assert time.monotonic() < deadline, status
            await anyio.sleep(0.5)
        [boot] = status["progress"]["boots"]
        assert boot["error"] == "InstallFailed"
        assert "rig torch exited with code 1" in boot["cause"]
        assert why[-200:] in boot["cause"]
        assert any(why[-200:] in line for line in status["explained"])

    with_client(stack, body)

    progress = stack.describe_sweep("mcp-rig-dies")
    console = Console(record=True, width=200)
    console.print(status_table(progress))
    for line in boot_failures(progress):
        console.print(line)
    shown = console.export_text()
    assert "no output" not in shown
    assert free in shown
    report = Path(stack.report_location("mcp-rig-dies")).read_text()
    assert free in report


def test_stop_sweep_ends_a_running_sweep_and_says_an_mcp_client_stopped_it(
    stack: LocalStack,
) -> None:
    deadlines = {"ready_s": 300, "bench_s": 60, "instance_s": 900}

    async def start(client: Client) -> None:
        await ok(client, "start_sweep", sweep_input(sweep_id="mcp-stop", deadlines=deadlines))

    async def stop(client: Client) -> None:
        stopped = await ok(client, "stop_sweep", {"sweep_id": "mcp-stop"})
        assert stopped["progress"]["error"] == "StoppedByUser"
        assert "stopped by an MCP client" in stopped["progress"]["cause"]
        message = await refused(client, "stop_sweep", {"sweep_id": "mcp-stop"})
        assert "is not running" in message

    with_client(stack, start)
    wait_for(stack.instances, timeout=120, what="the boot's instance launched")
    with_client(stack, stop)
    emu = stack.session.emu
    (ended,) = emu.seams.status_changes.wait(stack.refs.execution_arn("mcp-stop"))
    assert ended["sweep_id"] == "mcp-stop"
    assert len(ended["terminated"]) == 1
    assert stack.instances() == []
    assert stack.describe_sweep("mcp-stop").status == "ABORTED"
