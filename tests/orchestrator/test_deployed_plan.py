"""A dry run against the deployed stack (an emulation stands in for the AWS account): the
deployed functions' settings, the account's quota, instances, spot price and the month's
committed spend are applied, and nothing is written to the account."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from functions.quota import SPOT_G_VT_QUOTA
from rigbench.emulation import Emulation
from rigbench.mcp.tools import SweepTools
from rigbench.stack import parse_sweep
from rigbench.stack.boto import BotoStack
from tests.orchestrator.conftest import error_of, start_emulation, sweep_input
from tests.orchestrator.scripted_fleet import ScriptedFleet

pytestmark = pytest.mark.slow

MONTHLY_CAP_USD = 1.0
HOURS_2 = {"ready_s": 20, "bench_s": 600, "instance_s": 7200}


@pytest.fixture(scope="module")
def deployed(bundle_root: Path) -> Iterator[Emulation]:
    emu = start_emulation(
        bundle_root,
        parameters={"MonthlyCapUsd": MONTHLY_CAP_USD, "AllowedInstanceTypes": "g5g.2xlarge"},
    )
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture
def fleet(deployed: Emulation) -> ScriptedFleet:
    assert isinstance(deployed.fleet, ScriptedFleet)
    deployed.fleet.reset()
    return deployed.fleet


def account_state(emu: Emulation) -> dict[str, Any]:
    """Everything a plan could write: table items, objects, executions, instances."""
    ddb, s3, sfn = emu.client("dynamodb"), emu.client("s3"), emu.client("stepfunctions")
    refs = emu.stack_refs()
    # Less `last_seen`: a sweep running alongside writes it at every poll, as its heartbeat.
    tables = {
        name: sorted(
            str({k: v for k, v in item.items() if not k.startswith("last_seen")})
            for item in ddb.scan(TableName=name)["Items"]
        )
        for name in ddb.list_tables()["TableNames"]
    }
    objects = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=refs.bucket).get("Contents", []))
    executions = sfn.list_executions(stateMachineArn=refs.state_machine_arn)["executions"]
    return {
        "tables": tables,
        "objects": objects,
        "executions": sorted(e["executionArn"] for e in executions),
        "instances": sorted(emu.running_instances()),
    }


def launch_spot_g(emu: Emulation, instance_type: str) -> str:
    """A G instance already running in the account (not the stack's): it takes quota."""
    ec2 = emu.client("ec2")
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    reservation = ec2.run_instances(
        ImageId="ami-0e1a7ed0000000000", MinCount=1, MaxCount=1, InstanceType=instance_type,
        SubnetId=subnet, InstanceMarketOptions={"MarketType": "spot"},
    )  # fmt: skip
    return str(reservation["Instances"][0]["InstanceId"])


def test_a_plan_applies_the_deployed_quota_price_and_settings(
    deployed: Emulation, fleet: ScriptedFleet
) -> None:
    fleet.quotas[SPOT_G_VT_QUOTA] = 24.0
    fleet.price_usd_per_hour = 0.41
    other = launch_spot_g(deployed, "g5g.2xlarge")
    asked = list(fleet.launch_requests)
    try:
        before = account_state(deployed)
        stack = BotoStack(deployed.session(), deployed.stack_refs())
        plan = stack.plan(parse_sweep(sweep_input(rigs=["torch", "vllm"], boots_per_rig=2)))
        assert account_state(deployed) == before, "a plan writes nothing to the account"
    finally:
        deployed.client("ec2").terminate_instances(InstanceIds=[other])

    assert plan.valid, plan.error
    assert "deployed stack 'rigbench'" in plan.planned_against
    assert plan.quota is not None
    assert (plan.quota.quota_vcpus, plan.quota.used_vcpus) == (24.0, 8)
    assert (plan.quota.room_vcpus, plan.quota.max_concurrency) == (16.0, 2)
    assert plan.reservation is not None
    assert plan.reservation.price_usd_per_hour == pytest.approx(0.41)
    assert plan.reservation.max_price_usd_per_hour == pytest.approx(0.41 * 1.25)  # headroom
    # 4 boots x MaxPrice x (600 s deadline + 120 s for the one relaunch allowed)
    assert plan.reservation.total_usd == pytest.approx(4 * 0.41 * 1.25 * 720 / 3600, abs=1e-5)
    assert plan.month is not None
    assert plan.month.cap_usd == MONTHLY_CAP_USD
    stack_subnets = [s["SubnetId"] for s in deployed.client("ec2").describe_subnets()["Subnets"]]
    assert [(b.rig, b.boot) for b in plan.boots] == [
        ("torch", 1), ("vllm", 1), ("torch", 2), ("vllm", 2),
    ]  # fmt: skip
    assert plan.boots[0].subnets
    assert set(plan.boots[0].subnets) <= set(stack_subnets)
    assert fleet.launch_requests == asked, "a plan asks EC2 for nothing"


def test_a_plan_refuses_an_instance_type_the_deployed_stack_does_not_allow(
    deployed: Emulation, fleet: ScriptedFleet
) -> None:
    stack = BotoStack(deployed.session(), deployed.stack_refs())
    # The client side knows the type; the template's default stack allows only g5g.2xlarge.
    plan = stack.plan(parse_sweep(sweep_input(instance_type="g4dn.xlarge")))
    assert not plan.valid
    assert "instance_type" in plan.error
    assert "g4dn.xlarge" in plan.error


def test_a_plan_counts_the_month_already_committed_against_the_deployed_cap(
    deployed: Emulation, fleet: ScriptedFleet
) -> None:
    fleet.bench = "running"
    waits = {"agent_poll_s": 0, "ready_poll_s": 0, "command_poll_s": 1}
    # No relaunch: at 0 s polls for 2 h, a second attempt's polls would not fit the history.
    body = sweep_input(deadlines=HOURS_2, waits=waits, max_interruptions_per_boot=0)
    holding = deployed.start_execution(body)
    try:
        assert fleet.bench_started.wait(60)
        before = account_state(deployed)
        stack = BotoStack(deployed.session(), deployed.stack_refs())
        plan = stack.plan(parse_sweep(body))
        tools = SweepTools(stack, ceiling_usd=10.0)
        report = tools.plan_sweep(parse_sweep(body))
        assert account_state(deployed) == before, "a plan writes nothing to the account"
    finally:
        fleet.bench = "failed"  # let the holding sweep end
        assert error_of(deployed.wait(holding, 60))[0] == "CommandFailed"

    assert not plan.valid
    assert "monthly cap $1.00 would be exceeded by $0.50: $0.75 already committed" in plan.error, (
        plan.error
    )
    assert not report.can_start
    assert report.reasons == [report.plan.error]
    assert "monthly cap $1.00" in report.plan.error


def test_a_plan_refuses_an_estimate_over_the_deployed_cap_alone(
    deployed: Emulation, fleet: ScriptedFleet
) -> None:
    stack = BotoStack(deployed.session(), deployed.stack_refs())
    plan = stack.plan(  # 2 boots x 2 h x $0.375 (MaxPrice) = $1.50
        parse_sweep(sweep_input(boots_per_rig=2, deadlines=HOURS_2, max_interruptions_per_boot=0))
    )
    assert not plan.valid
    assert "alone is over the monthly cap $1.00 by $0.50" in plan.error
