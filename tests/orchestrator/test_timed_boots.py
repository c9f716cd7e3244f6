"""Timed boots on the emulated account: each boot's phases and start cost stored with its
rows, and the cost per token at the price the instance paid (its zone's spot price history),
not at the reservation's bound."""

import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from analysis.capacity import usd_per_million_tokens
from functions.settings import sweep_report_key
from harness.boot_phases import BootTiming
from rigbench.emulation import Emulation
from rigbench.report import analysis
from rigbench.report.data import gather
from rigbench.report.writer import store_from
from tests.orchestrator.conftest import (
    assert_clean,
    fleet_of,
    result_rows,
    run_sweep,
    sweep_id_of,
    sweep_input,
)

pytestmark = pytest.mark.slow

RIG_MARKS = {"model_on_disk": 5.0, "weights_loaded": 12.0, "compiled": 25.0, "ready": 30.0}


def test_rows_keep_the_boot_s_phases_and_cost_per_token_is_at_the_price_paid(
    emu: Emulation,
) -> None:
    fleet = fleet_of(emu)
    ec2 = emu.client("ec2")
    (stack,) = emu.client("cloudformation").describe_stacks(StackName=emu.stack_name)["Stacks"]
    subnets = next(p for p in stack["Parameters"] if p["ParameterKey"] == "SubnetIds")
    ids = re.findall(r"subnet-[0-9a-f]+", subnets["ParameterValue"])
    found = ec2.describe_subnets(SubnetIds=ids)["Subnets"]
    subnet_zones = {s["AvailabilityZone"] for s in found}  # the zones a sweep may launch in
    offered = ec2.describe_spot_price_history(InstanceTypes=["g5g.2xlarge"])["SpotPriceHistory"]
    zones = sorted(subnet_zones & {entry["AvailabilityZone"] for entry in offered})
    assert len(zones) >= 2
    now = datetime.now(UTC)
    dear = zones[-1]  # the reservation is bounded by the dearest zone the sweep may launch in
    fleet.price_history = {
        zone: [(now - timedelta(hours=3), 0.90), (now - timedelta(hours=1), 0.25)]
        for zone in zones[:-1]
    }
    fleet.price_history[dear] = [(now - timedelta(hours=1), 0.60)]
    fleet.refuse[dear] = "InsufficientInstanceCapacity"  # so the instance runs at 0.25
    fleet.rig_marks_after_launch = RIG_MARKS

    described = run_sweep(emu, sweep_input())

    assert described["status"] == "SUCCEEDED", described.get("cause")
    sweep_id = sweep_id_of(described)
    rows = result_rows(emu, sweep_id)
    timings = [BootTiming.of_row(row) for row in rows]
    assert timings[0] == timings[1]  # every row of the boot carries its start
    timing = timings[0]
    assert timing.price_usd_per_hour == 0.25
    assert timing.price_source.startswith("spot price history")
    phases = timing.phases
    # EC2's LaunchTime (whole seconds) is the zero: the rig's marks are their offsets from the
    # fleet's own launch, which comes within the same second or after.
    assert 30.0 <= phases["ready"] < 31.5
    assert timing.ready_s == phases["ready"]
    assert timing.startup_usd == pytest.approx(0.25 * phases["ready"] / 3600)
    assert list(phases) == [
        "launch_requested", "agent_online", "model_on_disk", "weights_loaded", "compiled",
        "ready", "bench_started",
    ]  # fmt: skip
    assert phases["launch_requested"] <= phases["agent_online"]
    marks = [phases[m] for m in ("model_on_disk", "weights_loaded", "compiled", "ready")]
    assert marks == sorted(marks)
    assert timing.warm_starts == []
    assert timing.warm_ready_s is None

    data = gather(store_from(emu.client, emu.stack_refs()), sweep_id)
    (boot,) = data.boots
    assert boot.price_usd_per_hour == 0.60  # the ledger's reservation: the bound
    assert boot.price_paid == 0.25
    assert boot.timing is not None
    assert boot.timing.phases["terminated"] == boot.instance_seconds
    tok_s = {row["metrics"]["concurrency"]: row["metrics"]["output_tok_s"] for row in rows}
    (points,) = analysis.cost_series(data).values()
    assert {p.cell: p.aggregate.value for p in points} == {
        f"c={c}": pytest.approx(usd_per_million_tokens(0.25, t)) for c, t in tok_s.items()
    }

    summary = json.loads(described["output"])
    stored = emu.client("s3").get_object(
        Bucket=emu.stack_refs().bucket, Key=sweep_report_key(sweep_id)
    )
    page = stored["Body"].read().decode()
    assert summary["report_key"] == sweep_report_key(sweep_id)
    assert "Time to ready" in page
    assert 'id="plot-timeline"' in page
    assert_clean(emu, sweep_id)


def test_rows_from_a_rig_without_a_record_of_its_start_have_no_ready_time(
    emu: Emulation,
) -> None:
    described = run_sweep(emu, sweep_input())  # the scripted rig reports no marks

    assert described["status"] == "SUCCEEDED", described.get("cause")
    (row, _) = result_rows(emu, sweep_id_of(described))
    timing = BootTiming.of_row(row)
    assert "ready" not in timing.phases
    assert timing.ready_s is None
    assert timing.startup_usd is None
    assert "launch_requested" in timing.phases  # what the state machine saw is still there
