"""Adaptive boots on the real state machine and handlers (emulated account): rounds until the
headline comparisons are decided, the worst case reserved and the unlaunched released."""

import json
from typing import Any

import pytest

from functions.rounds import ALL_DECIDED, AT_CAP
from functions.settings import sweep_report_key
from functions.summarize import ROUND_FAILED
from rigbench.emulation import Emulation
from tests.orchestrator.conftest import (
    error_of,
    fleet_of,
    ledger_items,
    result_rows,
    run_sweep,
    sweep_id_of,
    sweep_input,
)

pytestmark = pytest.mark.slow

AUTO = {"rigs": ["torch", "vllm"], "boots_per_rig": "auto", "max_boots_per_rig": 5}


def output_of(described: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(described["output"]))


def boots_ledger(emu: Emulation, sweep_id: str) -> dict[str, dict[str, Any]]:
    items = ledger_items(emu, f"SWEEP#{sweep_id}")
    return {sk: item for sk, item in items.items() if sk.startswith("BOOT#")}


def assert_settled(emu: Emulation, sweep_id: str, launched: int, released: int) -> None:
    """Nothing running; every boot billed or released; nothing left reserved; sweep closed."""
    assert emu.running_instances() == []
    boots = boots_ledger(emu, sweep_id)
    statuses = [b["status"] for b in boots.values()]
    assert statuses.count("reconciled") == launched
    assert statuses.count("released") == released
    assert len(boots) == launched + released  # the worst case was reserved up front
    total = ledger_items(emu, f"SWEEP#{sweep_id}")["TOTAL"]
    assert total["reserved"] == 0
    assert total["spent"] == sum(b["spent"] for b in boots.values())
    assert all(b["spent"] == 0 for b in boots.values() if b["status"] == "released")
    assert "open" not in total


def test_a_large_difference_stops_at_the_first_look(emu: Emulation) -> None:
    fleet = fleet_of(emu)
    fleet.slowdown_by_rig = {"vllm": 2.0}
    fleet.boot_spread = 0.02
    described = run_sweep(emu, sweep_input(**AUTO), timeout_s=180)

    assert described["status"] == "SUCCEEDED", described.get("cause")
    sweep_id = sweep_id_of(described)
    output = output_of(described)
    [first] = output["rounds"]
    assert (first["round"], first["boots_per_rig"], first["boots"]) == (1, 3, 6)
    assert first["stop"] == ALL_DECIDED
    # 2 cells x 3 headline metrics, each decided at the first look, vllm the slower
    assert first["decided"] == first["comparisons"] == 6
    assert {c["verdict"] for c in output["headline"]} == {"faster"}  # torch against vllm
    assert {c["decided_in_round"] for c in output["headline"]} == {1}
    assert first["cost_usd"] == pytest.approx(output["cost_usd"])
    assert len(fleet.instances) == 6
    assert {r["boot"] for r in result_rows(emu, sweep_id)} == {1, 2, 3}
    # boots 4 and 5 of each rig were reserved for the worst case and given back
    assert output["released"] == 4
    assert_settled(emu, sweep_id, launched=6, released=4)


def test_an_a_a_sweep_runs_to_its_cap_and_decides_nothing(emu: Emulation) -> None:
    fleet_of(emu).boot_spread = 0.02
    described = run_sweep(emu, sweep_input(**AUTO), timeout_s=300)

    assert described["status"] == "SUCCEEDED", described.get("cause")
    sweep_id = sweep_id_of(described)
    output = output_of(described)
    rounds = output["rounds"]
    assert [(r["round"], r["boots_per_rig"], r["boots"]) for r in rounds] == [(1, 3, 6), (2, 5, 10)]
    assert [r["decided"] for r in rounds] == [0, 0]
    assert [r["stop"] for r in rounds] == ["", AT_CAP]
    # the levels spent at 3 and 5 of 5 boots sum to 5%
    assert sum(r["level"] for r in rounds) == pytest.approx(0.05)
    assert {c["verdict"] for c in output["headline"]} == {"indistinguishable"}
    assert len(fleet_of(emu).instances) == 10
    assert output["boots"] == 10
    assert output["released"] == 0
    assert_settled(emu, sweep_id, launched=10, released=0)


def test_a_fixed_sweep_runs_one_round_without_a_look(emu: Emulation) -> None:
    described = run_sweep(emu, sweep_input(rigs=["torch", "vllm"], boots_per_rig=1))

    assert described["status"] == "SUCCEEDED", described.get("cause")
    output = output_of(described)
    assert output["rounds"] == []
    assert output["headline"] == []
    assert output["released"] == 0
    assert_settled(emu, sweep_id_of(described), launched=2, released=0)


def test_a_failed_decision_ends_with_a_report_and_nothing_leaks(emu: Emulation) -> None:
    fleet_of(emu).boot_spread = 0.02
    emu.faults.fail_lambda("DecideRoundFunction", "raise")
    described = run_sweep(emu, sweep_input(**AUTO), timeout_s=180)

    assert described["status"] == "FAILED"
    error, cause = error_of(described)
    assert error == ROUND_FAILED
    assert "deciding after round 1 failed" in cause
    sweep_id = sweep_id_of(described)
    # the first round's boots ran, were stored and billed; the rest given back
    assert len(fleet_of(emu).instances) == 6
    assert {r["boot"] for r in result_rows(emu, sweep_id)} == {1, 2, 3}
    assert_settled(emu, sweep_id, launched=6, released=4)
    key = sweep_report_key(sweep_id)
    listed = emu.client("s3").list_objects_v2(Bucket=emu.stack_refs().bucket, Prefix=key)
    assert [o["Key"] for o in listed.get("Contents", [])] == [key]
    page = emu.client("s3").get_object(Bucket=emu.stack_refs().bucket, Key=key)["Body"].read()
    assert f"failed: {ROUND_FAILED}".encode() in page
    assert b"The sweep failed: RoundDecisionFailed: deciding after round 1 failed" in page


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"boots_per_rig": "auto", "max_boots_per_rig": 2}, "max_boots_per_rig"),
        ({"boots_per_rig": 3, "max_boots_per_rig": 5}, "max_boots_per_rig"),
        ({"boots_per_rig": "sometimes"}, "boots_per_rig"),
        ({"boots_per_rig": "auto", "rigs": ["torch"]}, "boots_per_rig"),
        # a boot whose worst case overflows its own execution's history at 1 s polls
        (
            {
                "boots_per_rig": "auto",
                "max_boots_per_rig": 10,
                "waits": {"agent_poll_s": 1, "ready_poll_s": 1, "command_poll_s": 1},
                "deadlines": {"ready_s": 1800, "bench_s": 3600, "instance_s": 7200},
            },
            "25000 events",
        ),
    ],
)
def test_bad_adaptive_input_fails_validation_naming_the_field(
    emu: Emulation, given: dict[str, Any], named: str
) -> None:
    described = run_sweep(emu, sweep_input(**{"rigs": ["torch", "vllm"], **given}))
    assert described["status"] == "FAILED"
    error, cause = error_of(described)
    assert error == "InvalidInput"
    assert named in cause
    assert emu.running_instances() == []
    assert not fleet_of(emu).instances
