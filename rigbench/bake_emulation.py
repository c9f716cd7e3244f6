"""The bake on the embedded emulation: `rigbench bake --dry-run` and the bake's tests.

The BuildFleet answers for the builder (its status file), moto does the rest: the builder
is a moto instance, the image a moto AMI, the recorded id a moto SSM parameter.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from functions.bake_steps import BakePlan, status_command
from rigbench.emulation.fleet import (
    CommandNotDelivered,
    CommandResult,
    LaunchedInstance,
    LaunchRequest,
)

BuildOutcome = Literal["built", "failed", "never"]


@dataclass
class BuildFleet:
    """The emulated builder: online at once; its build ends as `build` after `build_checks`
    status reads ("never": it keeps building until the deadline)."""

    build: BuildOutcome = "built"
    build_checks: int = 1
    quota_vcpus_value: float = 64.0
    refuse_launch: str | None = None
    launch_delay_s: float = 0.0  # the launch call outlives its Lambda (tests: lost responses)
    launched_instances: list[LaunchedInstance] = field(default_factory=list)
    alive: set[str] = field(default_factory=set)
    checks: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._commands: dict[tuple[str, str], list[str]] = {}

    def bind(self, aws_env: dict[str, str]) -> None:
        return None

    def quota_vcpus(self, quota_code: str) -> float:
        return self.quota_vcpus_value

    def spot_price_history(
        self, instance_type: str, availability_zone: str
    ) -> list[tuple[datetime, float]]:
        return [(datetime.now(UTC), 0.0)]  # a builder is on-demand: its price is the catalog's

    def capacity_error(self, request: LaunchRequest) -> str | None:
        return self.refuse_launch

    def launched(self, instance: LaunchedInstance) -> None:
        time.sleep(self.launch_delay_s)
        with self._lock:
            self.launched_instances.append(instance)
            self.alive.add(instance.instance_id)

    def agent_online(self, instance_id: str) -> bool:
        return instance_id in self.alive

    def send_command(
        self, command_id: str, instance_id: str, commands: list[str], timeout_s: int
    ) -> None:
        with self._lock:
            self._commands[(command_id, instance_id)] = commands

    def command_result(self, command_id: str, instance_id: str) -> CommandResult:
        with self._lock:
            commands = self._commands.get((command_id, instance_id))
            if commands is None:
                raise CommandNotDelivered(command_id)
            if commands != [status_command()] or instance_id not in self.alive:
                return CommandResult(status="Failed", stderr="unexpected command", response_code=1)
            self.checks += 1
            if self.build == "never" or self.checks < self.build_checks:
                phase, detail = "installing", ""
            elif self.build == "built":
                phase, detail = "built", "vllm on g5g.2xlarge: runs (emulated build)"
            else:
                phase, detail = "failed", "kernel check: no code for this GPU (emulated)"
        body = json.dumps({"phase": phase, "detail": detail, "updated": time.time()})
        return CommandResult(status="Success", stdout=body, response_code=0)

    def terminated(self, instance_id: str) -> None:
        with self._lock:
            self.alive.discard(instance_id)


@dataclass
class BakeRun:
    status: str
    plan: BakePlan | None
    states: list[str]
    output: dict[str, Any]
    error: str
    builders_alive: list[str]
    recorded: str | None
    ledger: dict[tuple[str, str], dict[str, Any]]  # every ledger item by (pk, sk), at the end


def _visited(sfn: Any, arn: str) -> tuple[list[str], str]:
    events = sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
    states = [
        e["stateEnteredEventDetails"]["name"] for e in events if "stateEnteredEventDetails" in e
    ]
    errors = [
        e[key].get("cause") or e[key].get("error", "")
        for e in events
        for key in (
            "taskFailedEventDetails",
            "executionFailedEventDetails",
            "lambdaFunctionFailedEventDetails",
        )
        if key in e
    ]
    cause = errors[0] if errors else ""
    with contextlib.suppress(json.JSONDecodeError, AttributeError):
        cause = json.loads(cause).get("errorMessage", cause)
    return states, cause


def emulated_bake(body: dict[str, Any], fleet: BuildFleet, **emulation: Any) -> BakeRun:
    """Run the bake state machine on the embedded emulation (`--dry-run`, tests)."""
    from rigbench.emulation.stack import Emulation

    with Emulation(fleet=fleet, **emulation) as emu:
        sfn = emu.client("stepfunctions")
        arn = sfn.start_execution(
            stateMachineArn=emu.physical["BakeStateMachine"],
            input=json.dumps(body),
            name=f"bake-{body.get('rig', 'x')}-{uuid.uuid4().hex[:8]}",
        )["executionArn"]
        described = emu.wait(arn, timeout_s=300)
        states, error = _visited(sfn, arn)
        output = json.loads(described.get("output") or "{}")
        plan_raw = output.get("plan")
        if plan_raw is None:  # failed: the plan is in the first task's result
            for event in sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]:
                details = event.get("taskSucceededEventDetails") or {}
                payload = json.loads(details.get("output") or "{}").get("Payload") or {}
                if "plan" in payload:
                    plan_raw = payload["plan"]
                    break
        plan = BakePlan.model_validate(plan_raw) if plan_raw else None
        recorded = None
        if plan is not None:
            try:
                recorded = emu.client("ssm").get_parameter(Name=plan.parameter)["Parameter"][
                    "Value"
                ]
            except emu.client("ssm").exceptions.ParameterNotFound:
                recorded = None
        running = emu.client("ec2").describe_instances(
            Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
        )["Reservations"]
        alive = [i["InstanceId"] for r in running for i in r["Instances"]]
        items = emu.client("dynamodb").scan(TableName=emu.table("LedgerTable"))["Items"]
        ledger = {(i["pk"]["S"], i["sk"]["S"]): i for i in items}
        return BakeRun(described["status"], plan, states, output, error, alive, recorded, ledger)
