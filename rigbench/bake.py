"""`rigbench bake RIG`: build a rig's install once on a builder instance and keep it as an AMI.

With `--dry-run` (or without AWS credentials) the bake state machine runs on the embedded
emulation (rigbench/emulation): the real definition and handlers, a builder "instance" in
moto whose build the BuildFleet answers instead of compiling; the image is made and
recorded in the emulated SSM, the builder terminated. It prints what would be built, on
what, for how much, and the steps the execution took.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import typer

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

    def spot_price(self, instance_type: str, availability_zone: str) -> float:
        return 0.0  # a builder is on-demand: its price is the catalog's

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
        return BakeRun(described["status"], plan, states, output, error, alive, recorded)


def describe_plan(plan: BakePlan) -> list[str]:
    from rigs.registry import get_rig

    rig = get_rig(plan.rig)
    pins = ", ".join(
        f"{k}={v}" for k, v in sorted(rig.install.vars.items()) if k.endswith("version")
    )
    hours = plan.deadline_s / 3600
    return [
        f"bake {plan.bake_id}: rig {plan.rig} {plan.version} for {plan.target_instance_type} "
        f"(compute capability {plan.compute_capability}, {plan.arch})",
        f"  build: {', '.join(rig.install.gpu_code.get(plan.arch, []))}; pins {pins}",
        f"  builder: {plan.builder_type} on-demand, from {plan.base_image}",
        f"  cost: at most ${plan.estimate_usd:.2f} ({plan.builder_type} "
        f"${plan.price_usd_per_hour:.4f}/h x {hours:g} h deadline), reserved in the ledger",
        f"  image: {plan.image_name}, its id recorded in SSM {plan.parameter}",
    ]


def bake_command(
    rig: Annotated[str, typer.Argument(help="the rig to bake, e.g. vllm")],
    arch: Annotated[str, typer.Option(help="x86_64 or aarch64")] = "aarch64",
    target: Annotated[str, typer.Option(help="the instance type to verify for")] = "g5g.2xlarge",
    budget: Annotated[float, typer.Option(help="USD this bake may spend")] = 5.0,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="run the bake on the local emulation")
    ] = False,
    stack_name: Annotated[str, typer.Option(help="the deployed stack")] = "rigbench",
) -> None:
    """Build RIG's install on a builder, verify its GPU code, keep it as an AMI (the builder
    is always terminated)."""
    body: dict[str, Any] = {
        "rig": rig, "arch": arch, "target_instance_type": target, "budget_usd": budget,
    }  # fmt: skip
    if dry_run:
        # moto's parser logs each caught failure with the whole definition, werkzeug every call.
        logging.getLogger("moto").setLevel(logging.CRITICAL)
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        body["waits"] = {"build_poll_s": 0, "image_poll_s": 0}
        run = emulated_bake(body, BuildFleet())
        for line in describe_plan(run.plan) if run.plan else []:
            typer.echo(line)
        typer.echo("  steps: " + " -> ".join(run.states))
        typer.echo(f"  outcome: {run.status}" + (f" ({run.error})" if run.error else ""))
        if run.recorded:
            typer.echo(f"  recorded: {run.plan.parameter if run.plan else '?'} = {run.recorded}")
        finished = run.output.get("finished") or {}
        typer.echo(
            f"  builder: terminated {', '.join(finished.get('terminated', [])) or 'none'}; "
            f"still running: {', '.join(run.builders_alive) or 'none'}"
        )
        raise typer.Exit(0 if run.status == "SUCCEEDED" and not run.builders_alive else 1)
    from rigbench.cloud import CloudError, resolve_or_exit

    session, _refs = resolve_or_exit(stack_name)
    outputs = session.client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"][0]
    arns = {o["OutputKey"]: o["OutputValue"] for o in outputs.get("Outputs", [])}
    if "BakeStateMachineArn" not in arns:
        raise CloudError(f"stack {stack_name!r} has no bake state machine: redeploy it")
    arn = session.client("stepfunctions").start_execution(
        stateMachineArn=arns["BakeStateMachineArn"],
        input=json.dumps(body),
        name=f"bake-{rig}-{time.strftime('%Y%m%d-%H%M%S')}",
    )["executionArn"]
    typer.echo(f"started {arn}; follow it in the Step Functions console")
