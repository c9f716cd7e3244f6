"""The bake: build a rig's install on a builder instance once, keep it as an AMI.

    plan      validate the input, pick the builder (hardware.instance_types.BUILDERS),
              check quota, price the deadline and reserve it in the ledger (the sweep's
              rows and monthly cap: the reaper and the cap see bakes as sweeps)
    launch    one on-demand builder of the rig's architecture, the DLAMI (it has nvcc), a
              user data that arms the dead-man timer, installs with RIGBENCH_BAKE=1 and
              verifies the kernels (`rigbench rig check --venv`)
    check     ask the builder (SSM) how the build goes: building | built | failed
    image     create the AMI from the builder; then wait until it is available
    record    write the AMI id to the SSM parameter rig.toml's prebuilt_ami names
    terminate end the builder, found by its tags (not by what the state carries), and
              replace the reservation by the actual cost; runs on every path after launch

Thin handlers live in functions/bake_handlers.py; these are the plain functions.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import jinja2
from botocore.exceptions import ClientError
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from functions.boot_plan import base_image
from functions.budget import claim_sweep, close_sweep
from functions.budget import reserve as reserve_boots
from functions.cleanup import end_boot
from functions.errors import (
    CapacityUnavailable,
    InvalidInput,
    OverBudget,
    QuotaExhausted,
    error_code,
)
from functions.launch import CAPACITY_ERRORS, encrypted_root, launch_image
from functions.settings import (
    BAKE_TAG,
    BOOT_TAG,
    DEADLINE_TAG,
    PROJECT_TAG,
    RIG_TAG,
    SWEEP_TAG,
    Settings,
)
from functions.tables.ledger import month_of, to_micro
from hardware.instance_types import BUILDERS, Architecture, get_instance_type
from rigs.registry import get_rig

STANDARD_ON_DEMAND_QUOTA = "L-1216C47A"  # Running On-Demand Standard (A, C, D, H, I, M, R, T, Z)
STATUS_FILE = "/var/lib/rigbench/bake-status.json"
# The bake is a one-boot sweep in the ledger and in its builder's tags (sweeps count from 1).
BAKE_BOOT = 1
USER_DATA = Path(__file__).with_name("bake_user_data.sh.j2")
BAKE_ID_PATTERN = r"^bake-[a-z0-9][a-z0-9-]{0,57}$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _State(BaseModel):
    model_config = ConfigDict(extra="ignore")


class BakeWaits(_Strict):
    build_poll_s: int = Field(default=300, ge=0, le=3600)
    image_poll_s: int = Field(default=60, ge=0, le=3600)


class BakeInput(_Strict):
    """`rigbench bake RIG` sends this; the first state validates it."""

    rig: str
    arch: Architecture = "aarch64"
    target_instance_type: str = "g5g.2xlarge"  # whose GPU the image is verified for
    budget_usd: float = Field(gt=0, le=1000)
    # torch and vLLM from source on 16 vCPUs: hours, not minutes.
    deadline_s: int = Field(default=6 * 3600, ge=600, le=12 * 3600)
    subnets: list[str] | None = Field(default=None, min_length=1)
    waits: BakeWaits = BakeWaits()


class BakePlan(_State):
    bake_id: str
    rig: str
    version: str
    arch: Architecture
    target_instance_type: str
    compute_capability: str
    builder_type: str
    base_image: str
    parameter: str  # the SSM parameter rig.toml's prebuilt_ami names
    image_name: str
    price_usd_per_hour: float
    estimate_usd: float
    deadline_s: int
    subnets: list[str]
    bundle_key: str
    execution_arn: str = ""
    waits: BakeWaits = BakeWaits()


class Builder(_State):
    instance_id: str
    subnet_id: str
    image_id: str
    launched_at: float
    deadline_at: float


class BuildCheck(_State):
    phase: Literal["booting", "installing", "verifying", "built", "failed"] = "booting"
    detail: str = ""
    command_id: str | None = None
    checks: int = 0
    timed_out: bool = False


class Image(_State):
    image_id: str
    state: str = "pending"


class Finished(_State):
    terminated: list[str]
    spent_usd: float


class BakeState(_State):
    plan: BakePlan
    builder: Builder | None = None
    build: BuildCheck | None = None
    image: Image | None = None
    recorded: str | None = None
    finished: Finished | None = None
    error: dict[str, Any] | None = None


def bake_id_from(execution_name: str) -> str:
    tail = re.sub(r"[^a-z0-9-]+", "-", execution_name.lower()).strip("-")[:57] or "x"
    return tail if tail.startswith("bake-") else f"bake-{tail}"[:63]


def plan_bake(
    raw: Any,
    execution_name: str,
    execution_arn: str,
    bundle_key: str,
    clients: Any,
    settings: Settings,
) -> BakeState:
    try:
        bake = BakeInput.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '(input)'}: {e['msg']}" for e in exc.errors()
        )
        raise InvalidInput(f"invalid bake input: {problems}") from exc
    rig = get_rig(bake.rig)
    parameter = rig.install.prebuilt_ami.get(bake.arch)
    if parameter is None or parameter.startswith("ami-"):
        raise InvalidInput(
            f"rig {rig.name} names no SSM parameter for a baked {bake.arch} image in its "
            "rig.toml (install.prebuilt_ami): it has nothing to bake there"
        )
    target = get_instance_type(bake.target_instance_type)
    if target.arch != bake.arch or target.compute_capability is None:
        raise InvalidInput(
            f"target {target.name} is not a GPU instance of {bake.arch}: cannot verify for it"
        )
    builder = get_instance_type(BUILDERS[bake.arch])
    subnets = bake.subnets or settings.subnet_ids
    if not subnets:
        raise InvalidInput("invalid bake input: subnets: none given and the stack has none")
    quota = float(
        clients.service_quotas.get_service_quota(
            ServiceCode="ec2", QuotaCode=STANDARD_ON_DEMAND_QUOTA
        )["Quota"]["Value"]
    )
    if quota < builder.vcpus:
        raise QuotaExhausted(
            f"on-demand standard vCPU quota {STANDARD_ON_DEMAND_QUOTA} is {quota:g}; the "
            f"builder {builder.name} needs {builder.vcpus}: request an increase"
        )
    price = builder.price(settings.region)
    hours = bake.deadline_s / 3600
    estimate = price * hours
    if estimate > bake.budget_usd:
        raise OverBudget(
            f"bake estimate ${estimate:.2f} ({builder.name} ${price:.4f}/h x {hours:g} h "
            f"deadline) is over the budget ${bake.budget_usd:.2f}"
        )
    if settings.sweep_budget_usd and estimate > settings.sweep_budget_usd:
        raise OverBudget(
            f"bake estimate ${estimate:.2f} is over the stack's per-sweep budget "
            f"${settings.sweep_budget_usd:.2f}"
        )
    plan = BakePlan(
        bake_id=bake_id_from(execution_name),
        rig=rig.name,
        version=rig.version,
        arch=bake.arch,
        target_instance_type=target.name,
        compute_capability=target.compute_capability,
        builder_type=builder.name,
        base_image=base_image(bake.arch, settings.ami_parameter),
        parameter=parameter,
        image_name=f"rigbench-{rig.name}-{rig.version}-{bake.arch}-{int(time.time())}",
        price_usd_per_hour=price,
        estimate_usd=round(estimate, 4),
        deadline_s=bake.deadline_s,
        subnets=subnets,
        bundle_key=bundle_key,
        execution_arn=execution_arn,
        waits=bake.waits,
    )
    reserve(clients.dynamodb, settings, plan)
    return BakeState(plan=plan)


def reserve(ddb: Any, settings: Settings, plan: BakePlan) -> None:
    """The bake's ledger rows, as a one-boot sweep's (`functions.budget.reserve`): the monthly
    cap holds, and the reaper, which finds the bake's execution through the id's owner, ends
    and bills an aborted bake as it does a sweep's boot."""
    now = datetime.now(UTC)
    created_at = now.isoformat(timespec="seconds")
    claim_sweep(ddb, settings.ledger_table, plan.bake_id, plan.execution_arn, created_at)
    estimate = to_micro(plan.estimate_usd)
    reserve_boots(
        ddb, settings, sweep_id=plan.bake_id, execution_arn=plan.execution_arn,
        month=month_of(now), boots=[(plan.rig, BAKE_BOOT)], per_boot=estimate, budget=estimate,
        price=plan.price_usd_per_hour, created_at=created_at,
    )  # fmt: skip


def builder_tags(plan: BakePlan, settings: Settings, deadline_at: float) -> list[dict[str, str]]:
    return [
        {"Key": PROJECT_TAG, "Value": settings.project},
        {"Key": SWEEP_TAG, "Value": plan.bake_id},
        {"Key": RIG_TAG, "Value": plan.rig},
        {"Key": BAKE_TAG, "Value": plan.arch},
        {"Key": BOOT_TAG, "Value": str(BAKE_BOOT)},
        {"Key": DEADLINE_TAG, "Value": str(int(deadline_at))},
        {"Key": "Name", "Value": f"rigbench-{plan.bake_id}-{plan.rig}-builder"},
    ]


def render_builder_user_data(plan: BakePlan, settings: Settings, deadline_at: float) -> str:
    rig = get_rig(plan.rig)
    root = "/opt/rigbench"
    install = rig.render_install(
        rig_venv=f"{root}/venvs/{rig.name}", bundle_dir=f"{root}/bundle", python_version="3.12"
    )
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False
    )
    env.filters["q"] = shlex.quote
    return env.from_string(USER_DATA.read_text()).render(
        deadline_epoch=int(deadline_at),
        region=settings.region,
        bundle_uri=f"s3://{settings.bucket}/{plan.bundle_key}",
        root=root,
        rig=rig.name,
        target=plan.target_instance_type,
        status_file=STATUS_FILE,
        install_script=install.rstrip("\n"),
    )


def launch_builder(state: BakeState, clients: Any, settings: Settings) -> Builder:
    plan = state.plan
    image = launch_image(clients.ec2, clients.ssm, plan.base_image)
    refused = []
    for subnet in plan.subnets:
        deadline_at = time.time() + plan.deadline_s
        tags = builder_tags(plan, settings, deadline_at)
        token = hashlib.sha256(f"{plan.bake_id}/{subnet}".encode()).hexdigest()[:64]
        try:
            response = clients.ec2.run_instances(
                ImageId=image.image_id,
                InstanceType=plan.builder_type,
                MinCount=1,
                MaxCount=1,
                SubnetId=subnet,
                SecurityGroupIds=[settings.security_group_id],
                IamInstanceProfile={"Arn": settings.instance_profile_arn},
                UserData=render_builder_user_data(plan, settings, deadline_at),
                InstanceInitiatedShutdownBehavior="terminate",
                MetadataOptions={"HttpTokens": "required", "HttpEndpoint": "enabled"},
                # The build writes tens of GiB (torch and vLLM sources, objects, wheels).
                BlockDeviceMappings=[encrypted_root(image, size_gib=200)],
                TagSpecifications=[
                    {"ResourceType": "instance", "Tags": tags},
                    {"ResourceType": "volume", "Tags": tags},
                ],
                ClientToken=token,
            )
        except ClientError as exc:
            code = error_code(exc)
            if code not in CAPACITY_ERRORS:
                raise
            refused.append(f"{subnet}: {code}")
            continue
        launched = response["Instances"][0]
        launched_at = launched["LaunchTime"].timestamp()
        return Builder(
            instance_id=launched["InstanceId"],
            subnet_id=subnet,
            image_id=image.image_id,
            launched_at=launched_at,
            deadline_at=launched_at + plan.deadline_s,
        )
    raise CapacityUnavailable(f"no {plan.builder_type} capacity: " + "; ".join(refused))


def status_command() -> str:
    return f'cat {STATUS_FILE} 2>/dev/null || echo \'{{"phase": "booting"}}\''


def check_build(state: BakeState, clients: Any, now: float | None = None) -> BuildCheck:
    """Read the answer to the last status command, then send the next one."""
    assert state.builder is not None
    now = time.time() if now is None else now
    previous = state.build or BuildCheck()
    phase, detail = previous.phase, previous.detail
    if previous.command_id is not None:
        try:
            invocation = clients.ssm.get_command_invocation(
                CommandId=previous.command_id, InstanceId=state.builder.instance_id
            )
        except ClientError as exc:
            if error_code(exc) != "InvocationDoesNotExist":
                raise
            invocation = {"Status": "Pending"}
        if invocation["Status"] == "Success":
            try:
                found = json.loads(invocation.get("StandardOutputContent", "") or "{}")
                phase = found.get("phase", phase)
                detail = found.get("error") or found.get("detail") or ""
            except json.JSONDecodeError:
                detail = "unreadable status: " + invocation.get("StandardOutputContent", "")[:200]
    checks = previous.checks + 1
    if phase in ("built", "failed"):
        return BuildCheck(phase=phase, detail=detail, checks=checks)
    if now >= state.builder.deadline_at:
        return BuildCheck(
            phase="failed", detail="the build ran past its deadline", checks=checks, timed_out=True
        )
    command = clients.ssm.send_command(
        InstanceIds=[state.builder.instance_id],
        DocumentName="AWS-RunShellScript",
        Parameters={"commands": [status_command()], "executionTimeout": ["60"]},
        Comment=f"rigbench {state.plan.bake_id} build status",
    )["Command"]["CommandId"]
    return BuildCheck(phase=phase, detail=detail, command_id=command, checks=checks)


def create_image(state: BakeState, clients: Any, settings: Settings) -> Image:
    assert state.builder is not None
    plan = state.plan
    existing = clients.ec2.describe_images(
        Owners=["self"], Filters=[{"Name": "name", "Values": [plan.image_name]}]
    )["Images"]
    if existing:  # a retried step: the image is already being made
        return Image(image_id=existing[0]["ImageId"], state=existing[0]["State"])
    tags = [
        {"Key": PROJECT_TAG, "Value": settings.project},
        {"Key": RIG_TAG, "Value": plan.rig},
        {"Key": "rigbench:version", "Value": plan.version},
        {"Key": "rigbench:compute-capability", "Value": plan.compute_capability},
    ]
    image_id = clients.ec2.create_image(
        InstanceId=state.builder.instance_id,
        Name=plan.image_name,
        Description=f"rigbench {plan.rig} {plan.version} for {plan.target_instance_type}",
        TagSpecifications=[{"ResourceType": "image", "Tags": tags}],
    )["ImageId"]
    return Image(image_id=image_id)


def check_image(state: BakeState, clients: Any) -> Image:
    assert state.image is not None
    images = clients.ec2.describe_images(ImageIds=[state.image.image_id])["Images"]
    found = images[0]["State"] if images else "missing"
    if found in ("failed", "invalid", "deregistered", "missing"):
        raise RuntimeError(f"image {state.image.image_id} is {found}")
    return Image(image_id=state.image.image_id, state=found)


def record_image(state: BakeState, clients: Any) -> str:
    assert state.image is not None
    assert state.image.state == "available"
    clients.ssm.put_parameter(
        Name=state.plan.parameter,
        Value=state.image.image_id,
        Type="String",
        DataType="aws:ec2:image",
        Overwrite=True,
        Description=f"rigbench {state.plan.rig} {state.plan.version} ({state.plan.bake_id})",
    )
    return state.plan.parameter


def terminate_builder(plan: BakePlan, clients: Any, settings: Settings) -> Finished:
    """End every instance tagged with this bake (whatever the state says) and bill it, as
    Finish ends a sweep's boot (`functions.cleanup.end_boot`): the reservation is replaced by
    each instance's seconds x the builder's price, in one transaction; then close the bake."""
    ended = end_boot(
        clients.ec2, clients.dynamodb, settings.ledger_table, settings.project, plan.bake_id,
        plan.rig, BAKE_BOOT,
    )  # fmt: skip
    close_sweep(clients.dynamodb, settings.ledger_table, plan.bake_id)
    return Finished(terminated=ended.terminated, spent_usd=ended.cost_usd)
