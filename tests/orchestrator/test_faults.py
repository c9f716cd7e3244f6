"""The fault matrix: each step in turn fails the way it fails in life. After every case no
instance is left running, the ledger is reconciled, rows already stored are intact, and the
execution's error says what happened."""

import json
import threading
import time
from typing import Any

import pytest

from functions.quota import SPOT_G_VT_QUOTA
from rigbench.emulation import Emulation
from tests.orchestrator.conftest import (
    assert_clean,
    error_of,
    fleet_of,
    result_rows,
    run_sweep,
    sweep_id_of,
    sweep_input,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def earlier_rows(emulation: Emulation) -> tuple[str, list[dict[str, Any]]]:
    """A sweep stored before the faults; every case checks its rows are untouched."""
    fleet_of(emulation).reset()
    described = run_sweep(emulation, sweep_input())
    assert described["status"] == "SUCCEEDED", described.get("cause")
    sweep_id = sweep_id_of(described)
    return sweep_id, result_rows(emulation, sweep_id)


def check_failed(
    emu: Emulation,
    described: dict[str, Any],
    earlier: tuple[str, list[dict[str, Any]]],
    error: str,
    *cause_parts: str,
) -> str:
    assert described["status"] == "FAILED"
    got_error, cause = error_of(described)
    assert got_error == error, cause
    for part in cause_parts:
        assert part in cause, cause
    sweep_id = sweep_id_of(described)
    assert_clean(emu, sweep_id)
    earlier_id, rows = earlier
    assert result_rows(emu, earlier_id) == rows
    return cause


# Capacity refusals (every zone, some zones, retried, on-demand fallback): test_busy_zones.py.


def test_quota_zero_fails_before_anything_is_reserved_or_launched(
    emu: Emulation, earlier_rows: Any
) -> None:
    fleet = fleet_of(emu)
    fleet.quotas[SPOT_G_VT_QUOTA] = 0
    described = run_sweep(emu, sweep_input())
    assert described["status"] == "FAILED"
    error, cause = error_of(described)
    assert error == "QuotaExhausted"
    assert "L-3819A6DF is 0" in cause
    assert "needs 8" in cause
    assert fleet.launch_requests == []
    assert_clean(emu, sweep_id_of(described), reserved=False)


def test_agent_never_online(emu: Emulation, earlier_rows: Any) -> None:
    fleet_of(emu).agent_after = None
    body = sweep_input(
        deadlines={"ready_s": 2, "bench_s": 20, "instance_s": 600},
        waits={"agent_poll_s": 1, "ready_poll_s": 0, "command_poll_s": 0},
    )
    described = run_sweep(emu, body)
    check_failed(emu, described, earlier_rows, "AgentNeverOnline", "never came online within 2 s")


def test_rig_never_ready(emu: Emulation, earlier_rows: Any) -> None:
    fleet_of(emu).ready_after = None
    body = sweep_input(
        deadlines={"ready_s": 4, "bench_s": 20, "instance_s": 600},
        waits={"agent_poll_s": 0, "ready_poll_s": 1, "command_poll_s": 0},
    )
    described = run_sweep(emu, body)
    check_failed(
        emu,
        described,
        earlier_rows,
        "RigNeverReady",
        "no real completion within 4 s",
        "ConnectError",
    )


def test_install_failure_fails_fast_not_at_the_deadline(emu: Emulation, earlier_rows: Any) -> None:
    fleet_of(emu).install_error = "pip: no matching distribution for vllm==0.27.2"
    body = sweep_input(deadlines={"ready_s": 300, "bench_s": 20, "instance_s": 600})
    started = time.monotonic()
    described = run_sweep(emu, body)
    assert time.monotonic() - started < 60
    check_failed(emu, described, earlier_rows, "InstallFailed", "no matching distribution for vllm")


def test_harness_command_failed(emu: Emulation, earlier_rows: Any) -> None:
    fleet_of(emu).bench = "failed"
    described = run_sweep(emu, sweep_input())
    check_failed(emu, described, earlier_rows, "CommandFailed", "exit code 1", "connection refused")


def test_harness_command_timed_out(emu: Emulation, earlier_rows: Any) -> None:
    fleet_of(emu).bench = "timed_out"
    described = run_sweep(emu, sweep_input())
    check_failed(emu, described, earlier_rows, "CommandTimedOut", "TimedOut")


def test_harness_report_unreadable(emu: Emulation, earlier_rows: Any) -> None:
    fleet_of(emu).bench = "bad_report"
    described = run_sweep(emu, sweep_input())
    check_failed(emu, described, earlier_rows, "ReportInvalid", "does not parse")


def test_spot_interruption_past_the_boot_s_limit_fails_it(
    emu: Emulation, earlier_rows: Any
) -> None:
    fleet = fleet_of(emu)
    fleet.bench = "running"
    body = sweep_input(
        waits={"agent_poll_s": 0, "ready_poll_s": 0, "command_poll_s": 1},
        max_interruptions_per_boot=0,
    )
    arn = emu.start_execution(body)
    assert fleet.bench_started.wait(60), "the benchmark never started"
    (instance_id,) = fleet.instances
    assert emu.interrupt_spot(instance_id) == [{"recorded": True}]
    described = emu.wait(arn, 60)
    check_failed(
        emu, described, earlier_rows, "InstanceInterrupted", "spot interruption", instance_id
    )


def test_one_boot_failing_keeps_the_rows_other_boots_stored(
    emu: Emulation, earlier_rows: Any
) -> None:
    fleet = fleet_of(emu)
    fleet.quotas[SPOT_G_VT_QUOTA] = 8  # room for one instance: boots run one after another
    fleet.bench_by_rig = {"vllm": "failed"}
    described = run_sweep(emu, sweep_input(rigs=["torch", "vllm"]))
    cause = check_failed(
        emu, described, earlier_rows, "CommandFailed", "1 of 2 boots failed", "vllm boot 1"
    )
    assert "torch boot" not in cause
    rows = result_rows(emu, sweep_id_of(described))
    assert sorted(r["row_key"] for r in rows) == ["torch#01#c00001", "torch#01#c00004"]


def test_dynamodb_throttling_is_retried_and_rows_are_written_once(
    emu: Emulation, earlier_rows: Any
) -> None:
    emu.faults.throttle_dynamodb(emu.table("ResultsTable"), times=3)  # beyond the client's retries
    described = run_sweep(emu, sweep_input())
    assert described["status"] == "SUCCEEDED", described.get("cause")
    assert emu.faults.throttles[emu.table("ResultsTable")] == 0
    rows = result_rows(emu, sweep_id_of(described))
    assert sorted(r["row_key"] for r in rows) == ["torch#01#c00001", "torch#01#c00004"]
    assert_clean(emu, sweep_id_of(described))


def test_dynamodb_throttling_that_persists_fails_the_boot_cleanly(
    emu: Emulation, earlier_rows: Any
) -> None:
    emu.faults.throttle_dynamodb(emu.table("ResultsTable"), times=1000)
    try:
        described = run_sweep(emu, sweep_input())
    finally:
        emu.faults.throttles.clear()
    check_failed(
        emu, described, earlier_rows, "ProvisionedThroughputExceededException", "throughput"
    )


@pytest.mark.parametrize(
    "step",
    [
        "CheckAgentFunction",
        "CheckReadyFunction",
        "DispatchFunction",
        "PollFunction",
        "StoreFunction",
    ],
)
def test_a_step_that_raises_still_terminates(emu: Emulation, earlier_rows: Any, step: str) -> None:
    emu.faults.fail_lambda(step, "raise")
    described = run_sweep(emu, sweep_input())
    check_failed(emu, described, earlier_rows, "RuntimeError", f"injected failure in {step}")


@pytest.mark.parametrize("step", ["CheckReadyFunction", "PollFunction"])
def test_a_step_that_times_out_still_terminates(
    emu: Emulation, earlier_rows: Any, step: str
) -> None:
    emu.faults.fail_lambda(step, "timeout")
    described = run_sweep(emu, sweep_input())
    check_failed(emu, described, earlier_rows, "Sandbox.Timedout", "timed out")


def test_lambda_service_errors_are_retried(emu: Emulation, earlier_rows: Any) -> None:
    emu.faults.fail_lambda("LaunchFunction", "service")
    emu.faults.fail_lambda("FinishFunction", "service")
    described = run_sweep(emu, sweep_input())
    assert described["status"] == "SUCCEEDED", described.get("cause")
    assert len(fleet_of(emu).instances) == 1
    assert_clean(emu, sweep_id_of(described))


def test_terminate_failing_once_is_retried(emu: Emulation, earlier_rows: Any) -> None:
    emu.faults.fail_lambda("FinishFunction", "raise")
    described = run_sweep(emu, sweep_input())
    assert described["status"] == "SUCCEEDED", described.get("cause")
    assert_clean(emu, sweep_id_of(described))


def test_concurrent_boots_never_exceed_quota_room(emu: Emulation, earlier_rows: Any) -> None:
    fleet = fleet_of(emu)
    fleet.quotas[SPOT_G_VT_QUOTA] = 16  # two g5g.2xlarge at a time
    peak = 0
    stop = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, len(fleet.alive))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        described = run_sweep(emu, sweep_input(rigs=["torch", "vllm"], boots_per_rig=2))
    finally:
        stop.set()
        watcher.join()
    assert described["status"] == "SUCCEEDED", described.get("cause")
    assert 1 <= peak <= 2
    assert_clean(emu, sweep_id_of(described))


def _boot_executions(emu: Emulation, sweep_id: str) -> dict[str, str]:
    """The sweep's boot executions: name -> status."""
    pages = emu.client("stepfunctions").get_paginator("list_executions")
    return {
        e["name"]: e["status"]
        for page in pages.paginate(stateMachineArn=emu.physical["BootStateMachine"])
        for e in page["executions"]
        if e["name"].startswith(f"{sweep_id}-")
    }


def _until(what: str, check: Any, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what} did not happen in {timeout_s} s"
        time.sleep(0.05)


def test_a_stopped_sweep_stops_its_boot_executions_and_ends_their_boots(
    emu: Emulation, earlier_rows: Any
) -> None:
    fleet = fleet_of(emu)
    fleet.bench = "running"
    fleet.quotas[SPOT_G_VT_QUOTA] = 32  # the four boots at once
    arn = emu.start_execution(sweep_input(rigs=["torch", "vllm"], boots_per_rig=2))
    _until("every benchmark", lambda: fleet.bench_commands() == 4)
    sweep_id = arn.rsplit(":", 1)[1]
    assert set(_boot_executions(emu, sweep_id).values()) == {"RUNNING"}
    emu.client("stepfunctions").stop_execution(executionArn=arn)
    (ended,) = emu.seams.status_changes.wait(arn, 60)
    assert emu.wait(arn)["status"] == "ABORTED"
    # the sweep's end handler stopped them: moto's parser leaves a stopped parent's .sync child
    assert len(ended["stopped"]) == 4
    assert sorted(ended["boots_closed"]) == ["torch#1", "torch#2", "vllm#1", "vllm#2"]
    emu.seams.idle(60)
    assert set(_boot_executions(emu, sweep_id).values()) == {"ABORTED"}
    # the status-change rule names the sweep's state machine, not the boots'
    assert not set(ended["stopped"]) & set(emu.seams.status_changes.results)
    assert len(fleet.instances) == 4
    assert_clean(emu, sweep_id)  # no instance running, every boot reconciled, nothing reserved
    earlier_id, rows = earlier_rows
    assert result_rows(emu, earlier_id) == rows


def test_a_boot_execution_stopped_on_its_own_is_finished_by_the_sweep(
    emu: Emulation, earlier_rows: Any
) -> None:
    fleet = fleet_of(emu)
    fleet.bench = "running"
    arn = emu.start_execution(sweep_input())
    assert fleet.bench_started.wait(60)
    sweep_id = arn.rsplit(":", 1)[1]
    (name,) = _boot_executions(emu, sweep_id)
    boot_arn = emu.physical["BootStateMachine"].replace(":stateMachine:", ":execution:")
    emu.client("stepfunctions").stop_execution(
        executionArn=f"{boot_arn}:{name}", error="ByHand", cause="stopped by an operator"
    )
    described = emu.wait(arn, 90)
    cause = check_failed(emu, described, earlier_rows, "BootExecutionAborted")
    assert f"execution {name} ended ABORTED: ByHand: stopped by an operator" in cause


def test_a_boot_execution_that_times_out_is_finished_by_the_sweep(
    emu: Emulation, earlier_rows: Any
) -> None:
    fleet_of(emu).bench = "running"
    sfn = emu.client("stepfunctions")
    machine = emu.physical["BootStateMachine"]
    original = sfn.describe_state_machine(stateMachineArn=machine)["definition"]
    sfn.update_state_machine(
        stateMachineArn=machine,
        definition=json.dumps({**json.loads(original), "TimeoutSeconds": 3}),
    )
    try:
        described = run_sweep(emu, sweep_input())
    finally:
        sfn.update_state_machine(stateMachineArn=machine, definition=original)
    cause = check_failed(emu, described, earlier_rows, "BootExecutionTimedOut")
    assert "ended TIMED_OUT" in cause
