"""The fault matrix: the real state machine and handlers on the emulation, one injected fault
per case, and what each case left behind once its execution ended and (when it ended
ABORTED, TIMED_OUT or FAILED) its status-change cleanup ran, without the reaper:

    instances left       the sweep's instances still pending/running/stopping/stopped
    reservations open    the sweep's boots still holding a reservation (+1 if the sweep's
                         own reservation is not back to 0)
    unbilled seconds     what the instances really ran (launch to termination or vanishing,
                         from the emulation's own record) minus what the ledger billed
    committed delta      the month's committed spend moved by exactly the sweep's billed spend

    PYTHONPATH=$PWD python -m benchmarks.fault_matrix          # every case, a table
    PYTHONPATH=$PWD python -m benchmarks.fault_matrix stop-after-launch vanish-mid-benchmark

tests/orchestrator/test_fault_matrix.py runs the same cases and asserts on every column.
"""

import json
import logging
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rigbench.emulation import Emulation, Faults
from tests.orchestrator.scripted_fleet import ScriptedFleet

RIGS = ("torch", "vllm")
FAST = {"LambdaRetryIntervalSeconds": 1, "MinPollSeconds": 0}
ENDS_WITHOUT_FINISH = {"ABORTED", "TIMED_OUT", "FAILED"}
# AWS ends a stopped execution ABORTED; moto's parser, stopped inside an inline Map, ends it
# FAILED (States.Runtime). Either way no Finish runs and the status-change handler must.
STOPPED_IN_MAP = ("ABORTED", "FAILED")
LIVE = ["pending", "running", "stopping", "stopped"]


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
    during: Callable[[Emulation], None] = lambda emu: None  # while it runs
    body: dict[str, Any] = field(default_factory=dict)
    expect: tuple[str, ...] = ("SUCCEEDED",)  # the execution's end status


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

    def row(self) -> str:
        return (
            f"| {self.case} | {self.status} {self.error} | {self.instances_launched} | "
            f"{self.instances_left} | {self.reservations_open} | {self.unbilled_s:+.1f} | "
            f"{'yes' if self.committed_delta_ok else 'NO'} | {self.seconds:.1f} |"
        )


HEADER = (
    "| case | end | launched | instances left | reservations open | unbilled s "
    "| committed = billed | wall s |\n|---|---|---|---|---|---|---|---|"
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


def _vanish_mid_benchmark(emu: Emulation) -> None:
    fleet = emu.fleet
    assert isinstance(fleet, ScriptedFleet)
    if not fleet.bench_started.wait(60):
        raise TimeoutError("the benchmark never started")
    time.sleep(1.0)  # a few polls see it alive first
    (instance_id,) = list(fleet.alive)
    emu.seams.vanish(instance_id, emu.region)


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
         _bench_runs, _vanish_mid_benchmark, body={"waits": {
             "agent_poll_s": 0, "ready_poll_s": 0, "command_poll_s": 1}}, expect=("FAILED",)),
]  # fmt: skip
BY_NAME = {case.name: case for case in CASES}


def _sweep_id(emu: Emulation, arn: str) -> str | None:
    item = emu.client("dynamodb").get_item(
        TableName=emu.table("LedgerTable"),
        Key={"pk": {"S": f"EXECUTION#{arn}"}, "sk": {"S": "SWEEP"}},
        ConsistentRead=True,
    )
    found = item.get("Item")
    return found["sweep_id"]["S"] if found else None


def ledger(emu: Emulation, pk: str) -> dict[str, dict[str, Any]]:
    items = emu.client("dynamodb").query(
        TableName=emu.table("LedgerTable"),
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": pk}},
        ConsistentRead=True,
    )["Items"]
    return {i["sk"]["S"]: i for i in items}


def committed(emu: Emulation) -> int:
    month = time.strftime("%Y-%m", time.gmtime())
    item = ledger(emu, f"MONTH#{month}").get("TOTAL", {})
    return int(item.get("committed", {}).get("N", "0"))


def sweep_instances(emu: Emulation, sweep_id: str) -> list[str]:
    fleet = emu.fleet
    assert isinstance(fleet, ScriptedFleet)
    return [i for i, inst in fleet.instances.items() if inst.tags.get("rigbench:sweep") == sweep_id]


def left_running(emu: Emulation, sweep_id: str) -> int:
    reservations = emu.client("ec2").describe_instances(
        Filters=[
            {"Name": "tag:rigbench:sweep", "Values": [sweep_id]},
            {"Name": "instance-state-name", "Values": LIVE},
        ]
    )["Reservations"]
    return sum(len(r["Instances"]) for r in reservations)


def run_case(emu: Emulation, case: Case, timeout_s: float = 120) -> Outcome:
    fleet = emu.fleet
    assert isinstance(fleet, ScriptedFleet)
    fleet.reset()
    emu.faults.lambdas.clear()
    emu.faults.protect_on_launch = False
    started = time.monotonic()
    before = committed(emu)
    case.arrange(emu)
    arn = emu.start_execution(sweep_input(**case.body))
    case.during(emu)
    described = emu.wait(arn, timeout_s)
    cleanup_ran = False
    if described["status"] in ENDS_WITHOUT_FINISH:
        emu.seams.status_changes.wait(arn, 60)
        cleanup_ran = True
    sweep_id = _sweep_id(emu, arn)
    if sweep_id is None:  # stopped before Validate claimed a sweep: nothing could launch
        return Outcome(case.name, described["status"], str(described.get("error", "")),
                       0, 0, 0, 0.0, committed(emu) == before, cleanup_ran,
                       time.monotonic() - started)  # fmt: skip
    items = ledger(emu, f"SWEEP#{sweep_id}")
    total = items.pop("TOTAL", None)
    boots = {k: v for k, v in items.items() if k.startswith("BOOT#")}
    open_boots = sum(1 for b in boots.values() if b["status"]["S"] == "reserved")
    open_total = 1 if total and int(total["reserved"]["N"]) != 0 else 0
    billed_s = sum(float(b.get("seconds", {}).get("N", "0")) for b in boots.values())
    billed_usd = sum(int(b.get("spent", {}).get("N", "0")) for b in boots.values())
    launched = sweep_instances(emu, sweep_id)
    # EC2 reports launch times to the second: the truth is measured on the same clock.
    truth = sum(
        emu.seams.times.ended.get(i, time.time()) - int(emu.seams.times.launched[i])
        for i in launched
    )
    return Outcome(
        case=case.name,
        status=described["status"],
        error=str(described.get("error", "")),
        instances_launched=len(launched),
        instances_left=left_running(emu, sweep_id),
        reservations_open=open_boots + open_total,
        unbilled_s=round(truth - billed_s, 2),
        committed_delta_ok=committed(emu) - before == billed_usd,
        cleanup_ran=cleanup_ran,
        seconds=time.monotonic() - started,
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


def main(names: list[str]) -> int:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the moto server's request log
    cases = [BY_NAME[n] for n in names] if names else CASES
    emu = start_emulation(bundle_root())
    try:
        print(HEADER)
        outcomes = []
        for case in cases:
            outcome = run_case(emu, case)
            outcomes.append(outcome)
            print(outcome.row(), flush=True)
    finally:
        emu.stop()
    bad = [
        o.case
        for o, c in zip(outcomes, cases, strict=True)
        if o.instances_left or o.reservations_open or not o.committed_delta_ok
        or abs(o.unbilled_s) > 5 or o.status not in c.expect
    ]  # fmt: skip
    print(json.dumps({"cases": len(outcomes), "holding": len(outcomes) - len(bad), "bad": bad}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
