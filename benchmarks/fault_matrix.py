"""The fault matrix: the real state machine and handlers on the emulation, one injected fault
per case, and what each case left behind once its execution ended and (when it ended
ABORTED, TIMED_OUT or FAILED) its status-change cleanup ran, without the reaper:

    instances left       the sweep's instances still pending/running/stopping/stopped
                         (and, not a column: its boot executions still running, held at 0)
    reservations open    the sweep's boots still holding a reservation (+1 if the sweep's
                         own reservation is not back to 0)
    unbilled seconds     what the instances really ran (launch to termination or vanishing,
                         from the emulation's own record) minus what the ledger billed
    committed delta      the month's committed spend moved by exactly the sweep's billed spend

    PYTHONPATH=$PWD python -m benchmarks.fault_matrix          # every case, a table
    PYTHONPATH=$PWD python -m benchmarks.fault_matrix stop-after-launch vanish-mid-benchmark

A case with an execution timeout runs on the state machine updated with that timeout
(UpdateStateMachine), restored after. A case's `during` may hand cleanup to the reaper, as its
schedule would (the rows say so); its note gives what the case measured besides the columns.

tests/orchestrator/test_fault_matrix.py runs the same cases and asserts on every column.
"""

import argparse
import json
import logging
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from functions.budget import month_committed, sweep_of_execution
from functions.tables import ledger
from rigbench.emulation import Emulation, Faults, LaunchHold
from tests.orchestrator.scripted_fleet import ScriptedFleet

RIGS = ("torch", "vllm")
FAST = {"LambdaRetryIntervalSeconds": 1, "MinPollSeconds": 0}
ENDS_WITHOUT_FINISH = {"ABORTED", "TIMED_OUT", "FAILED"}
# AWS ends a stopped execution ABORTED; moto's parser, stopped inside an inline Map, ends it
# FAILED (States.Runtime). Either way no Finish runs and the status-change handler must.
STOPPED_IN_MAP = ("ABORTED", "FAILED")
LIVE = ["pending", "running", "stopping", "stopped"]
FINISH_ATTEMPTS = 5  # Finish's States.ALL retrier: MaxAttempts 4 after the first call
REAPED_BOOTS = 10
SLOW_POLL = {"agent_poll_s": 0, "ready_poll_s": 0, "command_poll_s": 1}
CALM_POLL = {"agent_poll_s": 1, "ready_poll_s": 1, "command_poll_s": 1}  # for many boots
ROOMY = {"ready_s": 60, "bench_s": 30, "instance_s": 600}  # many boots on a loaded machine
# Two rigs, rounds at 3 and 4 boots per rig: the first round runs, the second is reserved.
ADAPTIVE = {"rigs": ["torch", "vllm"], "boots_per_rig": "auto", "max_boots_per_rig": 4}


def sweep_input(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "rigs": ["torch"],
        "model": "random:tiny",
        "boots_per_rig": 1,
        "budget_usd": 5,
        "cells": {"concurrency": [1], "requests_per_cell": 2, "output_tokens": 8},
        "waits": {"agent_poll_s": 0, "ready_poll_s": 0, "command_poll_s": 0},
        "deadlines": {"ready_s": 20, "bench_s": 20, "instance_s": 600},
    }
    base.update(overrides)
    return base


@dataclass(frozen=True)
class Case:
    name: str
    what: str  # the fault, in words
    arrange: Callable[[Emulation], None] = lambda emu: None  # before the execution starts
    # While it runs (given the execution's ARN); may return a note on what it measured.
    during: Callable[[Emulation, str], str | None] = lambda emu, arn: None
    body: dict[str, Any] = field(default_factory=dict)
    expect: tuple[str, ...] = ("SUCCEEDED",)  # the execution's end status
    execution_timeout_s: int | None = None  # the state machine's TimeoutSeconds for the case


@dataclass
class Outcome:
    case: str
    status: str
    error: str
    instances_launched: int
    instances_left: int
    reservations_open: int
    unbilled_s: float
    committed_delta_ok: bool
    cleanup_ran: bool
    seconds: float
    interruptions: int = 0  # spot reclaims the sweep's boots were relaunched after
    note: str = ""
    within_reservation: bool = True  # every boot billed at most what it reserved
    month_within_cap: bool = True  # the month's committed total at most its cap
    # A live instance is billed to when its TerminateInstances call returned, which is up to
    # this much (summed over instances) after the emulation saw it end: the call's latency.
    terminate_latency_s: float = 0.0
    boot_executions_left: int = 0  # the sweep's boot executions still running

    def billed_within_tolerance(self) -> bool:
        """Unbilled at most 1 s per instance; billed beyond the truth by at most that plus the
        terminate calls' latency (a loaded machine can make a call take over a second)."""
        tolerance = UNBILLED_PER_INSTANCE_S * max(1, self.instances_launched)
        return -(tolerance + self.terminate_latency_s) <= self.unbilled_s <= tolerance

    def holds(self, case: Case) -> bool:
        """Nothing running or open, committed = billed, billed within tolerance."""
        return (
            self.status in case.expect
            and not self.instances_left
            and not self.boot_executions_left
            and not self.reservations_open
            and self.committed_delta_ok
            and self.billed_within_tolerance()
            and self.within_reservation
            and self.month_within_cap
        )

    def row(self) -> str:
        return (
            f"| {self.case} | {self.status} {self.error} | {self.instances_launched} | "
            f"{self.instances_left} | {self.reservations_open} | {self.unbilled_s:+.1f} | "
            f"{self.terminate_latency_s:.1f} | "
            f"{'yes' if self.committed_delta_ok else 'NO'} | {self.seconds:.1f} | {self.note} |"
        )


# EC2 reports times to the second; a vanished instance is billed to its last sighting.
UNBILLED_PER_INSTANCE_S = 1.0
HEADER = (
    "| case | end | launched | instances left | reservations open | unbilled s "
    "| terminate latency s | committed = billed | wall s | note |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def _fail(step: str, kind: Any, times: int = 1) -> Callable[[Emulation], None]:
    return lambda emu: emu.faults.fail_lambda(step, kind, times)


def _protect(emu: Emulation) -> None:
    emu.faults.protect_on_launch = True


def _stop_after(step: str, protect: bool = False) -> Callable[[Emulation], None]:
    def arrange(emu: Emulation) -> None:
        emu.faults.fail_lambda(step, "stop")
        emu.faults.protect_on_launch = protect

    return arrange


def _bench_runs(emu: Emulation) -> None:
    fleet = emu.fleet
    assert isinstance(fleet, ScriptedFleet)
    fleet.bench = "running"


def _scripted(emu: Emulation) -> ScriptedFleet:
    fleet = emu.fleet
    assert isinstance(fleet, ScriptedFleet)
    return fleet


def _vanish_mid_benchmark(emu: Emulation, arn: str) -> None:
    fleet = _scripted(emu)
    if not fleet.bench_started.wait(60):
        raise TimeoutError("the benchmark never started")
    time.sleep(1.0)  # a few polls see it alive first
    (instance_id,) = list(fleet.alive)
    emu.seams.vanish(instance_id, emu.region)


def _until(what: str, check: Callable[[], Any], timeout_s: float = 90) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen in {timeout_s} s")
        time.sleep(0.1)
    return found


def _finish_gives_up_arrange(emu: Emulation) -> None:
    _scripted(emu).bench_by_rig = {"vllm": "running"}
    emu.faults.fail_lambda("FinishFunction", "raise", FINISH_ATTEMPTS)  # torch's, all of them


def _finish_gives_up_mid_sweep(emu: Emulation, arn: str) -> str:
    """torch's Finish fails every attempt while the vllm boot still runs its benchmark; the
    reaper's next pass (every minute on AWS) ends the instance of the marked boot."""
    fleet = _scripted(emu)
    sweep_id = _until("Validate", lambda: _sweep_id(emu, arn))
    mark = _until(
        "MarkFinishFailed",
        lambda: ledger_items(emu, ledger.sweep_pk(sweep_id)).get(
            ledger.finish_failed_sk("torch", 1)
        ),
    )
    gave_up = _iso_epoch(mark["failed_at"]["S"])
    (torch,) = [i for i, inst in fleet.instances.items() if inst.tags["rigbench:rig"] == "torch"]
    (vllm,) = [i for i, inst in fleet.instances.items() if inst.tags["rigbench:rig"] == "vllm"]
    reaped = emu.run_scheduled("ReaperFunction")
    if reaped.get("reaped") != [torch] or vllm not in fleet.alive:
        raise AssertionError(f"the reaper should end torch's instance alone: {reaped}")
    ended_after = emu.seams.times.ended[torch] - gave_up
    fleet.bench_by_rig = {}  # the vllm boot's benchmark now completes
    return f"torch's instance ended {ended_after:.1f} s after Finish gave up; vllm ran on"


def _iso_epoch(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _hold_launch(emu: Emulation) -> None:
    emu.faults.hold_launch = LaunchHold()


def _end_while_launching(stop: bool) -> Callable[[Emulation, str], str]:
    def during(emu: Emulation, arn: str) -> str:
        hold = emu.faults.hold_launch
        assert hold is not None
        if not hold.entered.wait(60):
            raise TimeoutError("Launch never reached RunInstances")
        if stop:
            emu.client("stepfunctions").stop_execution(executionArn=arn)
        results = emu.seams.status_changes.wait(arn, 60)  # cleanup ran: boot closed at 0 s
        hold.release.set()  # RunInstances returns into a closed boot
        return f"cleanup closed {results[0].get('boots_closed')} before RunInstances returned"

    return during


def _reaper_arrange(emu: Emulation) -> None:
    fleet = _scripted(emu)
    fleet.bench = "running"
    fleet.quotas = {k: 8.0 * REAPED_BOOTS for k in fleet.quotas}  # every boot at once
    emu.faults.fail_lambda("SweepEndFunction", "raise")  # the status-change handler fails


def _reaper_ends_them(emu: Emulation, arn: str) -> str:
    fleet = _scripted(emu)
    sfn = emu.client("stepfunctions")

    def all_benchmarking() -> bool:
        if sfn.describe_execution(executionArn=arn)["status"] != "RUNNING":
            raise AssertionError(f"the sweep ended before its benchmarks: {emu.wait(arn)}")
        return fleet.bench_commands() >= REAPED_BOOTS

    _until("every benchmark", all_benchmarking, 300)
    sfn.stop_execution(executionArn=arn)
    emu.seams.status_changes.wait(arn, 60)
    emu.wait(arn, 60)
    started = time.monotonic()
    reaped = emu.run_scheduled("ReaperFunction")
    took = time.monotonic() - started
    if len(reaped.get("reaped", [])) != REAPED_BOOTS:
        raise AssertionError(f"the reaper should end {REAPED_BOOTS} instances: {reaped}")
    return f"the reaper ended {REAPED_BOOTS} instances in one pass of {took:.1f} s"


def _released_note(emu: Emulation, arn: str) -> str:
    """How the adaptive sweep's worst-case reservation ended: boot items by status."""
    emu.wait(arn, 120)
    if _ended_without_finish(emu, arn):
        emu.seams.status_changes.wait(arn, 30)  # what the status-change cleanup closed too
    sweep_id = _until("Validate", lambda: _sweep_id(emu, arn))
    items = ledger_items(emu, ledger.sweep_pk(sweep_id))
    statuses = [i["status"]["S"] for sk, i in items.items() if sk.startswith(ledger.BOOT_PREFIX)]
    counts = ", ".join(f"{statuses.count(s)} {s}" for s in sorted(set(statuses)))
    return f"{len(statuses)} boots reserved for the worst case: {counts}"


def _ended_without_finish(emu: Emulation, arn: str) -> bool:
    status = emu.client("stepfunctions").describe_execution(executionArn=arn)["status"]
    return status in ENDS_WITHOUT_FINISH


def _warned_never_reclaimed(emu: Emulation, arn: str) -> str:
    """The interruption warning arrives mid-benchmark and EC2 never reclaims the instance (the
    slowest reclaim there is): the relaunch itself must end it."""
    fleet = _scripted(emu)
    if not fleet.bench_started.wait(60):
        raise TimeoutError("the benchmark never started")
    time.sleep(1.0)
    (warned,) = list(fleet.alive)
    emu.interrupt_spot(warned)
    fleet.bench = "success"
    # Launch returns before the replacement's agent is first checked: by then it must be gone.
    deadline = time.monotonic() + 60
    while not any(n for i, n in fleet.agent_checks.items() if i != warned):
        if time.monotonic() > deadline:
            return f"{warned} warned, never reclaimed; no replacement was checked"
        time.sleep(0.01)
    still_running = warned in fleet.alive
    emu.wait(arn, 120)
    times = emu.seams.times
    replacement = max((i for i in fleet.instances if i != warned), key=times.launched.__getitem__)
    overlap = times.ended[warned] - times.launched[replacement]
    how = "still running" if still_running else "ended by the relaunch"
    return (
        f"{warned} warned, never reclaimed: {how} when its replacement's agent was first "
        f"checked ({overlap:.1f} s after the replacement launched)"
    )


def _reclaim_arrange(emu: Emulation) -> None:
    _scripted(emu).bench = "running"


def _reclaim_mid_benchmark(emu: Emulation, arn: str) -> str:
    fleet = _scripted(emu)
    if not fleet.bench_started.wait(60):
        raise TimeoutError("the benchmark never started")
    time.sleep(1.0)  # a few polls see it alive first
    (instance_id,) = list(fleet.alive)
    emu.reclaim_spot(instance_id)
    fleet.bench = "success"  # the relaunched instance's benchmark completes
    return f"{instance_id} reclaimed mid-benchmark"


CASES: list[Case] = [
    Case("happy-path", "no fault"),
    Case("launch-lost-response", "Launch ran RunInstances, then its response was lost "
         "(Sandbox.Timedout)", _fail("LaunchFunction", "after")),
    Case("launch-timeout-before", "Launch hung before doing anything",
         _fail("LaunchFunction", "timeout")),
    Case("launch-duplicate", "a second Launch of the same boot while the first is in flight",
         _fail("LaunchFunction", "duplicate")),
    Case("launch-throttled", "Lambda.TooManyRequestsException x1 on Launch",
         _fail("LaunchFunction", "throttle")),
    Case("dispatch-lost-response", "RunHarness sent the command, then its response was lost",
         _fail("DispatchFunction", "after")),
    Case("poll-throttled", "Lambda.TooManyRequestsException x1 on PollHarness",
         _fail("PollFunction", "throttle")),
    Case("finish-throttled", "Lambda.TooManyRequestsException x2 on Finish",
         _fail("FinishFunction", "throttle", 2)),
    Case("finish-keeps-failing", "Finish raises on every attempt (retries exhausted)",
         _fail("FinishFunction", "raise", 10), expect=("FAILED",)),
    Case("finish-lost-response", "Finish terminated and reconciled, then its response was lost",
         _fail("FinishFunction", "after"), expect=("SUCCEEDED",)),
    Case("reserve-lost-response", "ReserveBudget reserved, then its response was lost",
         _fail("ReserveBudgetFunction", "after"), expect=("FAILED",)),
    Case("stop-after-validate", "StopExecution right after Validate",
         _stop_after("ValidateFunction"), expect=("ABORTED",)),
    Case("stop-after-reserve", "StopExecution right after ReserveBudget",
         _stop_after("ReserveBudgetFunction"), expect=("ABORTED",)),
    Case("stop-after-launch", "StopExecution right after Launch",
         _stop_after("LaunchFunction"), expect=STOPPED_IN_MAP),
    Case("stop-waiting-for-agent", "StopExecution during the agent wait",
         _stop_after("CheckAgentFunction"), expect=STOPPED_IN_MAP),
    Case("stop-waiting-for-rig", "StopExecution during the readiness wait",
         _stop_after("CheckReadyFunction"), expect=STOPPED_IN_MAP),
    Case("stop-after-dispatch", "StopExecution right after the harness was sent",
         _stop_after("DispatchFunction"), expect=STOPPED_IN_MAP),
    Case("stop-mid-benchmark", "StopExecution while polling the harness",
         _stop_after("PollFunction"), expect=STOPPED_IN_MAP),
    Case("stop-after-store", "StopExecution right after the rows were stored",
         _stop_after("StoreFunction"), expect=STOPPED_IN_MAP),
    Case("stop-during-finish", "StopExecution as Finish returns",
         _stop_after("FinishFunction"), expect=STOPPED_IN_MAP),
    Case("protected-instance", "the instance comes up protected from termination", _protect),
    Case("protected-and-stopped", "protected from termination, then StopExecution",
         _stop_after("CheckReadyFunction", protect=True), expect=STOPPED_IN_MAP),
    Case("vanish-mid-benchmark", "the instance disappears from EC2 during the benchmark",
         _bench_runs, _vanish_mid_benchmark, expect=("FAILED",)),
    Case("finish-gives-up-mid-sweep", "torch's Finish fails every retry while the vllm boot "
         "still benchmarks; the reaper's next pass runs", _finish_gives_up_arrange,
         _finish_gives_up_mid_sweep, body={"rigs": ["torch", "vllm"], "waits": SLOW_POLL},
         expect=("FAILED",)),
    Case("stop-while-launching", "StopExecution while RunInstances is in flight; the "
         "status-change cleanup closes the boot before it returns", _hold_launch,
         _end_while_launching(stop=True), expect=STOPPED_IN_MAP),
    Case("timed-out-while-launching", "the execution times out while RunInstances is in "
         "flight; the status-change cleanup closes the boot before it returns", _hold_launch,
         _end_while_launching(stop=False), expect=("TIMED_OUT",),
         execution_timeout_s=10),
    Case(f"reaper-ends-{REAPED_BOOTS}", f"{REAPED_BOOTS} boots benchmarking, StopExecution, the "
         "status-change handler fails; the reaper's pass ends them", _reaper_arrange,
         _reaper_ends_them, body={"rigs": ["torch", "vllm"], "boots_per_rig": REAPED_BOOTS // 2,
                                  "waits": CALM_POLL, "deadlines": ROOMY,
                                  "max_interruptions_per_boot": 0},
         expect=STOPPED_IN_MAP),
    Case("spot-reclaim-relaunched", "EC2 reclaims the spot instance mid-benchmark; the boot "
         "relaunches and completes", _reclaim_arrange, _reclaim_mid_benchmark,
         body={"waits": SLOW_POLL}),
    Case("late-warning-slow-reclaim", "the spot warning arrives mid-benchmark and EC2 never "
         "reclaims; the relaunch ends the warned instance, the boot stays within its "
         "reservation", _reclaim_arrange, _warned_never_reclaimed, body={"waits": SLOW_POLL}),
    Case("decide-round-fails", "an adaptive sweep's DecideRound raises after the first round's "
         "boots were stored; the sweep ends with its report, the unlaunched boots released",
         _fail("DecideRoundFunction", "raise"), _released_note, body=ADAPTIVE,
         expect=("FAILED",)),
    Case("stop-at-round-boundary", "StopExecution as an adaptive sweep's DecideRound returns "
         "(the next round's boots reserved, none launched)", _stop_after("DecideRoundFunction"),
         _released_note, body=ADAPTIVE, expect=("ABORTED",)),
]  # fmt: skip
BY_NAME = {case.name: case for case in CASES}


def _sweep_id(emu: Emulation, arn: str) -> str | None:
    return sweep_of_execution(emu.client("dynamodb"), emu.table("LedgerTable"), arn)


def ledger_items(emu: Emulation, pk: str) -> dict[str, dict[str, Any]]:
    items = emu.client("dynamodb").query(
        TableName=emu.table("LedgerTable"),
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": pk}},
        ConsistentRead=True,
    )["Items"]
    return {i["sk"]["S"]: i for i in items}


def committed(emu: Emulation) -> int:
    month = ledger.month_of(datetime.now(UTC))
    return month_committed(emu.client("dynamodb"), emu.table("LedgerTable"), month)


def sweep_instances(emu: Emulation, sweep_id: str) -> list[str]:
    fleet = emu.fleet
    assert isinstance(fleet, ScriptedFleet)
    return [i for i, inst in fleet.instances.items() if inst.tags.get("rigbench:sweep") == sweep_id]


def boot_executions_left(emu: Emulation, sweep_id: str) -> int:
    """The sweep's boot executions (named `<sweep>-<rig>-<boot>`) still running."""
    pages = emu.client("stepfunctions").get_paginator("list_executions")
    return sum(
        1
        for page in pages.paginate(
            stateMachineArn=emu.physical["BootStateMachine"], statusFilter="RUNNING"
        )
        for e in page["executions"]
        if e["name"].startswith(f"{sweep_id}-")
    )


def left_running(emu: Emulation, sweep_id: str) -> int:
    reservations = emu.client("ec2").describe_instances(
        Filters=[
            {"Name": "tag:rigbench:sweep", "Values": [sweep_id]},
            {"Name": "instance-state-name", "Values": LIVE},
        ]
    )["Reservations"]
    return sum(len(r["Instances"]) for r in reservations)


@contextmanager
def execution_timeout(emu: Emulation, seconds: int | None) -> Iterator[None]:
    """Executions started inside time out after `seconds` (the definition's TimeoutSeconds)."""
    if seconds is None:
        yield
        return
    sfn = emu.client("stepfunctions")
    original = sfn.describe_state_machine(stateMachineArn=emu.state_machine_arn)["definition"]
    definition = {**json.loads(original), "TimeoutSeconds": seconds}
    sfn.update_state_machine(
        stateMachineArn=emu.state_machine_arn, definition=json.dumps(definition)
    )
    try:
        yield
    finally:
        sfn.update_state_machine(stateMachineArn=emu.state_machine_arn, definition=original)


def run_case(emu: Emulation, case: Case, timeout_s: float = 120) -> Outcome:
    fleet = emu.fleet
    assert isinstance(fleet, ScriptedFleet)
    fleet.reset()
    emu.faults.lambdas.clear()
    emu.faults.protect_on_launch = False
    emu.faults.hold_launch = None
    started = time.monotonic()
    before = committed(emu)
    case.arrange(emu)
    with execution_timeout(emu, case.execution_timeout_s):
        arn = emu.start_execution(sweep_input(**case.body))
    note = case.during(emu, arn) or ""
    described = emu.wait(arn, timeout_s)
    cleanup_ran = False
    if described["status"] in ENDS_WITHOUT_FINISH:
        emu.seams.status_changes.wait(arn, 60)
        cleanup_ran = True
    emu.seams.idle(60)  # a handler that outlived its execution (Launch in flight) is done
    sweep_id = _sweep_id(emu, arn)
    if sweep_id is None:  # stopped before Validate claimed a sweep: nothing could launch
        return Outcome(case.name, described["status"], str(described.get("error", "")),
                       0, 0, 0, 0.0, committed(emu) == before, cleanup_ran,
                       time.monotonic() - started)  # fmt: skip
    items = ledger_items(emu, ledger.sweep_pk(sweep_id))
    total = items.pop(ledger.TOTAL, None)
    boots = {k: v for k, v in items.items() if k.startswith(ledger.BOOT_PREFIX)}
    open_boots = sum(1 for b in boots.values() if b["status"]["S"] == "reserved")
    open_total = 1 if total and int(total["reserved"]["N"]) != 0 else 0
    billed_s = sum(float(b.get("seconds", {}).get("N", "0")) for b in boots.values())
    billed_usd = sum(int(b.get("spent", {}).get("N", "0")) for b in boots.values())
    launched = sweep_instances(emu, sweep_id)
    # EC2 reports launch times to the second: the truth is measured on the same clock.
    times = emu.seams.times
    truth = sum(times.ended.get(i, time.time()) - int(times.launched[i]) for i in launched)
    latency = sum(times.answered[i] - times.ended[i] for i in launched if i in times.answered)
    month = ledger_items(emu, ledger.month_pk(ledger.month_of(datetime.now(UTC))))[ledger.TOTAL]
    return Outcome(
        case=case.name,
        status=described["status"],
        error=str(described.get("error", "")),
        instances_launched=len(launched),
        instances_left=left_running(emu, sweep_id),
        boot_executions_left=boot_executions_left(emu, sweep_id),
        reservations_open=open_boots + open_total,
        unbilled_s=round(truth - billed_s, 2),
        committed_delta_ok=committed(emu) - before == billed_usd,
        cleanup_ran=cleanup_ran,
        seconds=time.monotonic() - started,
        interruptions=int(json.loads(described.get("output") or "{}").get("interruptions", 0)),
        note=note,
        terminate_latency_s=round(latency, 3),
        within_reservation=all(
            int(b.get("spent", {}).get("N", "0")) <= int(b["reserved"]["N"]) for b in boots.values()
        ),
        month_within_cap=int(month["committed"]["N"]) <= int(month["cap"]["N"]),
    )


def bundle_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="rigbench-faults-"))
    for rig in RIGS:
        (root / "rigs" / rig).mkdir(parents=True)
        (root / "rigs" / rig / "rig.toml").write_text(f'name = "{rig}"\n')
    (root / "harness").mkdir()
    (root / "harness" / "__init__.py").write_text("")
    return root


def start_emulation(root: Path) -> Emulation:
    emulation = Emulation(
        ScriptedFleet(), bundle_root=root, faults=Faults(hang_s=0.5), parameters=dict(FAST)
    )
    emulation.start()
    return emulation


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fault_matrix",
        description="The fault matrix on the emulation: one injected fault per case.",
    )
    parser.add_argument("cases", nargs="*", metavar="CASE", help=f"any of: {', '.join(BY_NAME)}")
    names = parser.parse_args(argv).cases
    if unknown := [n for n in names if n not in BY_NAME]:
        parser.error(f"no such case: {', '.join(unknown)} (cases: {', '.join(BY_NAME)})")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the moto server's request log
    logging.getLogger("moto").setLevel(logging.CRITICAL)  # the parser logs every caught error
    cases = [BY_NAME[n] for n in names] if names else CASES
    emu = start_emulation(bundle_root())
    outcomes = []
    try:
        print(HEADER)
        for case in cases:
            outcome = run_case(emu, case)
            outcomes.append(outcome)
            print(outcome.row(), flush=True)
    finally:
        emu.stop()
    bad = [o.case for o, c in zip(outcomes, cases, strict=True) if not o.holds(c)]
    print(json.dumps({"cases": len(outcomes), "holding": len(outcomes) - len(bad), "bad": bad}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
