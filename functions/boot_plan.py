"""What one boot of a rig runs with on an instance type: image, dtype and serve settings.

Planned once per rig, by the validate step, before anything is spent (with the stack's
image); the plan rides in each boot's state (`BootItem.plan`, `BootState.plan`): launch boots
its image, the user data serves its dtype and settings, store records it beside the results.

    image:    the rig's baked image for the instance's architecture when rig.toml names one
              (`prebuilt_ami`, written by `rigbench bake`), else the stack's base image:
              the Deep Learning AMI of that architecture;
    dtype:    float16 below compute capability 8.0 (no bfloat16 datapath), else the rig's;
    settings: the rig's declared defaults, its concurrency setting set to the sweep's
              `max_concurrent_sequences` (the same for every rig), then the input's
              `rig_settings` for that entry (`jax@b` runs rig `jax` with its own settings).
"""

from __future__ import annotations

from typing import Any

from functions.errors import InvalidInput, error_code
from functions.events import BootPlan
from functions.execution_input import SweepInput
from hardware.instance_types import DLAMI_PARAMETERS, get_instance_type
from rigs.contract import Scalar
from rigs.registry import get_rig


def base_image(arch: str, stack_ami_parameter: str) -> str:
    """The stack's image for an architecture: the DLAMI of that architecture, unless the
    stack was deployed with an image of its own (AmiParameter that is not a DLAMI one)."""
    if not stack_ami_parameter or stack_ami_parameter in DLAMI_PARAMETERS.values():
        return DLAMI_PARAMETERS[arch]  # type: ignore[index]
    return stack_ami_parameter


def plan_boot(sweep: SweepInput, rig_name: str, stack_ami_parameter: str = "") -> BootPlan:
    rig = get_rig(rig_name)
    itype = get_instance_type(sweep.instance_type)
    if itype.compute_capability is None:
        raise InvalidInput(f"instance type {itype.name} has no GPU")
    if itype.arch not in rig.architectures:
        raise InvalidInput(f"rig {rig.name} does not run on {itype.arch} ({itype.name})")
    baked = rig.install.prebuilt_ami.get(itype.arch)
    forced = itype.dtype
    if forced is not None:
        if forced not in rig.serve.dtypes:
            raise InvalidInput(f"rig {rig.name} cannot serve {forced}, which {itype.name} needs")
        dtype = forced
        reason = f"compute capability {itype.compute_capability} has no bfloat16"
    else:
        dtype = rig.pick_dtype(None, itype.compute_capability)
        reason = "the rig's default"
    settings: dict[str, Scalar] = dict(rig.serve.settings)
    if rig.serve.concurrency_setting is not None:
        settings[rig.serve.concurrency_setting] = sweep.concurrent_sequences()
    settings.update(sweep.rig_settings.get(rig_name, {}))  # by the entry: jax@b has its own
    return BootPlan(
        rig=rig.name,
        instance_type=itype.name,
        arch=itype.arch,
        compute_capability=itype.compute_capability,
        image=baked or base_image(itype.arch, stack_ami_parameter),
        image_source="baked" if baked else "base",
        dtype=dtype,
        dtype_reason=reason,
        settings=settings,
    )


def require_baked_images(ssm: Any, plans: list[BootPlan]) -> None:
    """Refuse, before any launch, a sweep whose rig needs a baked image that does not exist."""
    # Here, not at the top: the state models import this module, and the CLI loads no botocore.
    from botocore.exceptions import ClientError

    missing = []
    for plan in plans:
        if plan.image_source != "baked" or plan.image.startswith("ami-"):
            continue
        try:
            ssm.get_parameter(Name=plan.image)
        except ClientError as exc:
            if error_code(exc) != "ParameterNotFound":
                raise
            missing.append(
                f"rig {plan.rig} on {plan.instance_type} ({plan.arch}) needs the baked image "
                f"named by SSM parameter {plan.image}, which does not exist: "
                f"run `rigbench bake {plan.rig} --arch {plan.arch}` first"
            )
    if missing:
        raise InvalidInput("; ".join(missing))
