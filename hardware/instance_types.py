"""The instance types rigbench knows: architecture, GPU, compute capability, size, price, AMI.

One table, read by the sweep (quota, on-demand price, AMI, dtype), the bake (builder type,
price, AMI) and `rig check` (which GPU code a rig's install must carry). A type missing here
is not supported: the sweep refuses it by name before anything is spent.

Prices are on-demand Linux list prices (USD/h) per region, the one price table of sweeps and
bakes: a region a type lacks is refused by name, never priced as another region's (prices
differ); the spot price is read at run time (functions/budget.py). AMIs are the AWS Deep
Learning AMIs with the NVIDIA driver, resolved at launch from AWS's public SSM parameters, one
per architecture.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Architecture = Literal["x86_64", "aarch64"]

# AWS's public SSM parameters for the Deep Learning AMI (Ubuntu 22.04, NVIDIA driver, PyTorch
# built for the instance families of that architecture; the arm64 one for G5g).
_DLAMI = (
    "/aws/service/deeplearning/ami/{}/oss-nvidia-driver-gpu-pytorch-2.7-ubuntu-22.04/latest/ami-id"
)
DLAMI_PARAMETERS: dict[Architecture, str] = {
    "aarch64": _DLAMI.format("arm64"),
    "x86_64": _DLAMI.format("x86_64"),
}
# Where the DLAMI keeps its PyTorch (a conda-free venv in the 2.x DLAMIs).
DLAMI_PYTORCH_VENV = "/opt/pytorch"
BFLOAT16_MIN_CC = "8.0"  # Ampere: below it (Turing 7.5) there is no bfloat16 datapath


def cc_number(compute_capability: str) -> int:
    """ "7.5" -> 75 ("12.0" -> 120)."""
    major, sep, minor = compute_capability.partition(".")
    if not sep or not major.isdigit() or not minor.isdigit():
        raise ValueError(f"compute capability {compute_capability!r} is not MAJOR.MINOR")
    return int(major) * 10 + int(minor)


class InstanceType(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    arch: Architecture
    vcpus: int
    memory_gib: int
    gpu: str | None  # None: a CPU instance (a bake builder)
    gpu_memory_mib: int = 0
    compute_capability: str | None = None
    on_demand_usd_per_hour: dict[str, float]  # region -> USD/h

    @property
    def ami_parameter(self) -> str:
        return DLAMI_PARAMETERS[self.arch]

    @property
    def dtype(self) -> str | None:
        """The dtype every rig serves here when the GPU forces one: float16 below Ampere."""
        if self.compute_capability is None:
            return None
        if cc_number(self.compute_capability) < cc_number(BFLOAT16_MIN_CC):
            return "float16"
        return None

    def price(self, region: str) -> float:
        if region not in self.on_demand_usd_per_hour:
            known = ", ".join(sorted(self.on_demand_usd_per_hour))
            raise UnknownInstanceType(
                f"no on-demand price for {self.name} in {region} (known regions: {known})"
            )
        return self.on_demand_usd_per_hour[region]


class UnknownInstanceType(ValueError):
    """An instance type (or region) the catalog does not describe."""


# USD/h: these types list at one price in both regions.
_REGIONS = ("us-east-1", "us-west-2")
# name, arch, vCPUs, memory GiB, GPU, GPU memory MiB (as nvidia-smi reports it), compute
# capability, on-demand USD/h. The targets first: Graviton2 with one T4G (Turing), and the same
# GPU on x86_64, where stock wheels already carry sm_75. Then other sizes and GPUs a stack may
# allow (AllowedInstanceTypes): the A10G (Ampere, sm_86) and the L4 (Ada, sm_89).
_GPU_TYPES: list[tuple[str, Architecture, int, int, str, int, str, float]] = [
    ("g5g.2xlarge", "aarch64", 8, 16, "T4G", 15360, "7.5", 0.556),
    ("g4dn.xlarge", "x86_64", 4, 16, "T4", 15360, "7.5", 0.526),
    ("g5g.xlarge", "aarch64", 4, 8, "T4G", 15360, "7.5", 0.42),
    ("g5g.4xlarge", "aarch64", 16, 32, "T4G", 15360, "7.5", 0.828),
    ("g5g.8xlarge", "aarch64", 32, 64, "T4G", 15360, "7.5", 1.372),
    ("g4dn.2xlarge", "x86_64", 8, 32, "T4", 15360, "7.5", 0.752),
    ("g5.xlarge", "x86_64", 4, 16, "A10G", 23028, "8.6", 1.006),
    ("g5.2xlarge", "x86_64", 8, 32, "A10G", 23028, "8.6", 1.212),
    ("g6.xlarge", "x86_64", 4, 16, "L4", 23034, "8.9", 0.8048),
    ("g6.2xlarge", "x86_64", 8, 32, "L4", 23034, "8.9", 0.9776),
]

CATALOG: dict[str, InstanceType] = {
    t.name: t
    for t in [
        *(
            InstanceType(
                name=name,
                arch=arch,
                vcpus=vcpus,
                memory_gib=memory,
                gpu=gpu,
                gpu_memory_mib=gpu_memory,
                compute_capability=cc,
                on_demand_usd_per_hour=dict.fromkeys(_REGIONS, price),
            )
            for name, arch, vcpus, memory, gpu, gpu_memory, cc, price in _GPU_TYPES
        ),
        # Bake builders: compiling for sm_75 needs nvcc and memory, not a GPU.
        InstanceType(
            name="c7g.4xlarge",
            arch="aarch64",
            vcpus=16,
            memory_gib=32,
            gpu=None,
            on_demand_usd_per_hour={"us-east-1": 0.58, "us-west-2": 0.58},
        ),
        InstanceType(
            name="c6i.4xlarge",
            arch="x86_64",
            vcpus=16,
            memory_gib=32,
            gpu=None,
            on_demand_usd_per_hour={"us-east-1": 0.68, "us-west-2": 0.68},
        ),
    ]
}
GPU_TYPES = [name for name, t in CATALOG.items() if t.gpu is not None]
BUILDERS: dict[Architecture, str] = {"aarch64": "c7g.4xlarge", "x86_64": "c6i.4xlarge"}


def get_instance_type(name: str) -> InstanceType:
    if name not in CATALOG:
        raise UnknownInstanceType(
            f"instance type {name!r} is not supported (supported GPU types: {', '.join(GPU_TYPES)})"
        )
    return CATALOG[name]
