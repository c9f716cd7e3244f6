"""What one boot of a rig runs with on an instance type: image, dtype and serve settings.

Planned once per rig, by the validate step, before anything is spent (with the stack's
image); the plan rides in each boot's state (`BootItem.plan`, `BootState.plan`): launch boots
its image, the user data serves its dtype and settings, store records it beside the results.

    image:    the rig's baked image for the instance's architecture when rig.toml names one
              (`prebuilt_ami`, written by `rigbench bake`), else the stack's base image:
              the Deep Learning AMI of that architecture;
    dtype:    float16 below compute capability 8.0 (no bfloat16 datapath), float32 on a CPU,
              else the rig's;
    settings: the rig's declared defaults, its concurrency setting set to the sweep's
              `max_concurrent_sequences` (the same for every rig), on a CPU a context no longer
              than the sweep's cells need (each longer bucket is minutes of compilation there
              for nothing the sweep uses), then the input's `rig_settings` for that entry
              (`jax@b` runs rig `jax` with its own settings).

A stack whose instances are local processes (`InstanceHost` local: the local fleet) plans for
this machine (hardware/local_host.py), with or without a GPU, and the local instance serves
that plan as an instance's user data serves it.
"""

from __future__ import annotations

from typing import Any

from functions.errors import InvalidInput, error_code
from functions.events import BootPlan
from functions.execution_input import SweepInput
from hardware.instance_types import DLAMI_PARAMETERS, InstanceType, get_instance_type
from hardware.local_host import LOCAL_INSTANCE_TYPE, InstanceHost, local_host
from rigs.contract import PROBE_CONTEXT_TOKENS, RigDefinition, RigDefinitionError, Scalar
from rigs.registry import get_rig


def base_image(arch: str, stack_ami_parameter: str) -> str:
    """The stack's image for an architecture: the DLAMI of that architecture, unless the
    stack was deployed with an image of its own (AmiParameter that is not a DLAMI one)."""
    if not stack_ami_parameter or stack_ami_parameter in DLAMI_PARAMETERS.values():
        return DLAMI_PARAMETERS[arch]  # type: ignore[index]
    return stack_ami_parameter


CPU_DTYPE = "float32"  # every rig serves it; a CPU has no half-precision datapath worth having
WAITING_SETTING = "max_waiting"  # a rig server's bound on requests waiting for a slot


def plan_boot(
    sweep: SweepInput,
    rig_name: str,
    stack_ami_parameter: str = "",
    instance_host: InstanceHost = "ec2",
) -> BootPlan:
    """The plan for `sweep.instance_type`, or for this machine when instances are local."""
    itype = local_host() if instance_host == "local" else get_instance_type(sweep.instance_type)
    return plan_for(sweep, rig_name, itype, stack_ami_parameter)


def cpu_context(sweep: SweepInput, rig: RigDefinition) -> dict[str, Scalar]:
    """A CPU's `max_model_len`: the power of two that holds the longest request and the
    agreement probe every boot answers, up to the rig's own (the rig's own for a dataset,
    whose lengths only its tokenizer knows)."""
    declared = rig.setting_defaults().get("max_model_len")
    longest = sweep.longest_request_tokens()
    if not isinstance(declared, int) or longest is None:
        return {}
    need = max(longest, PROBE_CONTEXT_TOKENS)
    return {"max_model_len": min(declared, 1 << (need - 1).bit_length())}


def plan_for(
    sweep: SweepInput, rig_name: str, itype: InstanceType, stack_ami_parameter: str = ""
) -> BootPlan:
    rig = get_rig(rig_name)
    if itype.compute_capability is None and itype.name != LOCAL_INSTANCE_TYPE:
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
    elif itype.compute_capability is None:
        if CPU_DTYPE not in rig.serve.dtypes:
            raise InvalidInput(f"rig {rig.name} cannot serve {CPU_DTYPE}, which a CPU needs")
        dtype, reason = CPU_DTYPE, "a CPU, no GPU"
    else:
        dtype = rig.pick_dtype(None, itype.compute_capability)
        reason = "the rig's default"
    settings = rig.setting_defaults()
    if rig.serve.concurrency_setting is not None:
        settings[rig.serve.concurrency_setting] = sweep.concurrent_sequences()
    if itype.compute_capability is None:
        settings.update(cpu_context(sweep, rig))
    settings.update(sweep.rig_settings.get(rig_name, {}))  # by the entry: jax@b has its own
    if isinstance(waiting := settings.get(WAITING_SETTING), int):  # no cell is ever refused
        settings[WAITING_SETTING] = max(waiting, *sweep.cells.concurrency)
    try:  # the values the boot serves, each within its rig.toml declaration
        rig.check_settings(settings)
    except RigDefinitionError as err:
        raise InvalidInput(f"invalid sweep input: rig_settings: {err}") from None
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
