"""The one place the orchestrator meets the instance bootstrap owned by `rigs/bootstrap`:
the user data an instance boots with, and the SSM command that asks whether it is ready."""

from dataclasses import dataclass, field

from functions.events import BootPlan, BootState
from functions.report_keys import instances_prefix
from functions.settings import Settings
from rigs.bootstrap.user_data import BootstrapSpec, ready_check_command, render_user_data
from rigs.sources import pinned_spec

# Where rigs/bootstrap installs on the instance (BootstrapSpec.root): bundle/ and venv/.
RIGBENCH_HOME = BootstrapSpec.model_fields["root"].default


@dataclass(frozen=True)
class InstancePlan:
    rig: str
    model: str
    bucket: str
    bundle_key: str
    region: str
    token_secret_arn: str
    deadline_epoch: int  # the instance powers itself off at this time, whatever happens
    boot: BootPlan | None = field(default=None)  # dtype, settings, GPU the rig is served with
    log_key_prefix: str = ""  # where the instance uploads its logs, less its id ("": nowhere)


def instance_plan(state: BootState, settings: Settings, deadline_at: float) -> InstancePlan:
    return InstancePlan(
        boot=state.plan,
        rig=state.rig,
        # the revision Validate pinned (a hub model's commit), part of the spec the rig loads
        model=pinned_spec(state.sweep.model, state.sweep.model_revision),
        bucket=settings.bucket,
        bundle_key=state.sweep.bundle.key,
        region=settings.region,
        token_secret_arn=settings.token_secret_arn,
        deadline_epoch=int(deadline_at),
        log_key_prefix=instances_prefix(
            state.sweep.sweep_id, state.rig, state.boot, settings.instance_arn_prefix
        )
        if settings.instance_arn_prefix
        else "",
    )


def bootstrap_spec(plan: InstancePlan) -> BootstrapSpec:
    return BootstrapSpec(
        rig=plan.rig,
        model=plan.model,
        deadline_epoch=plan.deadline_epoch,
        bundle_s3_uri=f"s3://{plan.bucket}/{plan.bundle_key}",
        region=plan.region,
        hf_token_secret_id=plan.token_secret_arn or None,
        dtype=plan.boot.dtype if plan.boot else None,
        settings=dict(plan.boot.settings) if plan.boot else {},
        expected_compute_capability=plan.boot.compute_capability if plan.boot else "7.5",
        log_s3_prefix=f"s3://{plan.bucket}/{plan.log_key_prefix}" if plan.log_key_prefix else None,
    )


def user_data(plan: InstancePlan) -> str:
    return render_user_data(bootstrap_spec(plan))


def readiness_command(plan: InstancePlan) -> str:
    return ready_check_command(bootstrap_spec(plan))
