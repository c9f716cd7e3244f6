"""`rigbench bake RIG`: build a rig's install once on a builder instance and keep it as an AMI.

With `--dry-run` the bake state machine runs on the embedded
emulation (rigbench/emulation): the real definition and handlers, a builder "instance" in
moto whose build the BuildFleet answers instead of compiling; the image is made and
recorded in the emulated SSM, the builder terminated. It prints what would be built, on
what, for how much, and the steps the execution took.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rigbench.commands.stack_choice import DEFAULT_STACK, StackOption

if TYPE_CHECKING:
    from functions.bake_steps import BakePlan


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
    stack_name: StackOption = DEFAULT_STACK,
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
        from rigbench.bake_emulation import BuildFleet, emulated_bake

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
    from rigbench.commands.stack_choice import fail, open_stack, require_aws_credentials
    from rigbench.stack import StackError

    require_aws_credentials("bake", "nothing started (--dry-run bakes on the local emulation)")
    with open_stack(False, stack_name) as stack:
        client = stack.client  # type: ignore[attr-defined]
        described = client("cloudformation").describe_stacks(StackName=stack_name)
        outputs = described["Stacks"][0].get("Outputs", [])
        arns = {o["OutputKey"]: o["OutputValue"] for o in outputs}
        if "BakeStateMachineArn" not in arns:
            fail(StackError(f"stack {stack_name!r} has no bake state machine: redeploy it"))
        arn = client("stepfunctions").start_execution(
            stateMachineArn=arns["BakeStateMachineArn"],
            input=json.dumps(body),
            name=f"bake-{rig}-{time.strftime('%Y%m%d-%H%M%S')}",
        )["executionArn"]
    typer.echo(f"started {arn}; follow it in the Step Functions console")
