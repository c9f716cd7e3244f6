"""Launches that survive a busy zone: capacity and price refusals are tried in every allowed
zone, then all of them again after a backoff until the boot's ready deadline; a spot
MaxPrice with headroom that the reservation covers; `spot-or-on-demand` falls back to
on-demand, billed at the on-demand price. The refusals are scripted at the emulation's EC2
seam (moto itself never refuses a launch)."""

import json
from typing import Any

import pytest

from functions.budget import SPOT_PRICE_HEADROOM
from functions.quota import ON_DEMAND_G_VT_QUOTA
from hardware.instance_types import get_instance_type
from rigbench.emulation import Emulation
from tests.orchestrator.conftest import (
    assert_clean,
    error_of,
    fleet_of,
    ledger_items,
    result_rows,
    run_sweep,
    sweep_id_of,
    sweep_input,
)

pytestmark = pytest.mark.slow

SHORT_READY = {"ready_s": 3, "bench_s": 20, "instance_s": 600}


def describe_subnets(emu: Emulation) -> list[dict[str, Any]]:
    return list(emu.client("ec2").describe_subnets()["Subnets"])


def every_zone(emu: Emulation, code: str) -> dict[str, str]:
    return {s["AvailabilityZone"]: code for s in describe_subnets(emu)}


def test_refusals_in_the_first_two_zones_launch_in_the_third(emu: Emulation) -> None:
    fleet = fleet_of(emu)
    fleet.busy = ["InsufficientInstanceCapacity", "SpotMaxPriceTooLow"]  # the first two tried
    described = run_sweep(emu, sweep_input())
    assert described["status"] == "SUCCEEDED", described.get("cause")
    tried = [r.availability_zone for r in fleet.launch_requests]
    assert len(tried) == len(set(tried)) == 3
    rows = result_rows(emu, sweep_id_of(described))
    assert rows
    assert {r["provenance"]["availability_zone"] for r in rows} == {tried[2]}
    assert_clean(emu, sweep_id_of(described))


def test_every_zone_busy_is_tried_again_after_a_backoff_until_one_has_room(
    emu: Emulation,
) -> None:
    fleet = fleet_of(emu)
    # The first try: every zone refuses, each with another of the three errors; the second
    # try's first zone refuses too, its second launches.
    fleet.busy = [
        "InsufficientInstanceCapacity",
        "SpotMaxPriceTooLow",
        "MaxSpotInstanceCountExceeded",
        "InsufficientInstanceCapacity",
    ]
    described = run_sweep(
        emu, sweep_input(deadlines={"ready_s": 60, "bench_s": 20, "instance_s": 600})
    )
    assert described["status"] == "SUCCEEDED", described.get("cause")
    assert len(fleet.launch_requests) == 5
    assert len(fleet.instances) == 1
    assert_clean(emu, sweep_id_of(described))


def test_a_zone_busy_past_the_ready_deadline_fails_the_boot_naming_each_refusal(
    emu: Emulation,
) -> None:
    fleet = fleet_of(emu)
    fleet.refuse = every_zone(emu, "InsufficientInstanceCapacity")
    described = run_sweep(emu, sweep_input(deadlines=SHORT_READY))
    assert described["status"] == "FAILED"
    error, cause = error_of(described)
    assert error == "CapacityUnavailable", cause
    assert "the ready deadline, 3 s" in cause
    assert cause.count("InsufficientInstanceCapacity") == 3  # the last try, every subnet
    assert len(fleet.launch_requests) > 3, "the zones were tried more than once"
    assert fleet.instances == {}
    assert_clean(emu, sweep_id_of(described))


def test_spot_max_price_has_headroom_that_the_reservation_covers(emu: Emulation) -> None:
    fleet = fleet_of(emu)
    fleet.price_usd_per_hour = 0.30
    described = run_sweep(
        emu, sweep_input(deadlines={"ready_s": 20, "bench_s": 20, "instance_s": 3600})
    )
    assert described["status"] == "SUCCEEDED", described.get("cause")
    sweep_id = sweep_id_of(described)
    (instance,) = fleet.instances.values()
    assert instance.market == "spot"
    boot = ledger_items(emu, f"SWEEP#{sweep_id}")["BOOT#torch#01"]
    assert boot["price"] == 375_000  # billed at MaxPrice: the most EC2 may have charged
    assert boot["spent"] == pytest.approx(0.375 * float(boot["seconds"]) / 3600 * 1e6, abs=2)
    history = emu.client("stepfunctions").get_execution_history(
        executionArn=described["executionArn"], maxResults=1000
    )["events"]
    exited = [
        json.loads(e["stateExitedEventDetails"]["output"])
        for e in history
        if e.get("stateExitedEventDetails", {}).get("name") == "ReserveBudget"
    ]
    reservation = exited[0]["reservation"]
    max_price = 0.30 * (1 + SPOT_PRICE_HEADROOM)  # below g5g.2xlarge's on-demand $0.556
    assert reservation["max_price_usd_per_hour"] == pytest.approx(max_price)
    # x (1 h + 120 s for the one relaunch allowed)
    assert reservation["per_boot_usd"] == pytest.approx(max_price * 3720 / 3600)
    assert_clean(emu, sweep_id)


def test_spot_or_on_demand_falls_back_and_is_billed_at_the_on_demand_price(
    emu: Emulation,
) -> None:
    fleet = fleet_of(emu)
    fleet.quotas[ON_DEMAND_G_VT_QUOTA] = 8
    fleet.refuse_markets = {"spot": "InsufficientInstanceCapacity"}
    body = sweep_input(market="spot-or-on-demand")
    described = run_sweep(emu, body)
    assert described["status"] == "SUCCEEDED", described.get("cause")
    spot = [r.subnet_id for r in fleet.launch_requests if r.market == "spot"]
    assert len(spot) == len(set(spot)) == 3, "spot was tried in each of the stack's subnets"
    assert [r.market for r in fleet.launch_requests] == ["spot"] * 3 + ["on-demand"]
    sweep_id = sweep_id_of(described)
    on_demand = get_instance_type("g5g.2xlarge").price("us-east-1")
    boot = ledger_items(emu, f"SWEEP#{sweep_id}")["BOOT#torch#01"]
    assert boot["price"] == round(on_demand * 1_000_000)
    assert boot["spent"] == pytest.approx(on_demand * float(boot["seconds"]) / 3600 * 1e6, abs=2)
    rows = result_rows(emu, sweep_id)
    assert rows
    assert {r["provenance"]["market"] for r in rows} == {"on-demand"}
    assert_clean(emu, sweep_id)


def test_a_type_no_zone_sells_fails_at_once_not_at_the_deadline(emu: Emulation) -> None:
    fleet = fleet_of(emu)
    fleet.refuse = every_zone(emu, "Unsupported")
    body = sweep_input(deadlines={"ready_s": 600, "bench_s": 20, "instance_s": 900})
    described = run_sweep(emu, body, timeout_s=60)
    error, cause = error_of(described)
    assert error == "CapacityUnavailable", cause
    assert "no subnet sells it (Unsupported): not tried again" in cause
    assert len(fleet.launch_requests) == 3, "each subnet once"
    assert_clean(emu, sweep_id_of(described))
