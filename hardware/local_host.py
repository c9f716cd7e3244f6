"""This machine as an instance type: what a local instance (a process of the local fleet) runs
on, so that a local boot is planned for the hardware it really has (functions/boot_plan.py).

Its architecture, CPU count and memory, and its first NVIDIA GPU when `nvidia-smi` shows one;
no price (the local fleet's price is the emulated account's, not this machine's).
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
from typing import Literal

from hardware.instance_types import Architecture, InstanceType

LOCAL_INSTANCE_TYPE = "local"
# What plays a stack's instances (template.yaml's InstanceHost): EC2, or this machine.
InstanceHost = Literal["ec2", "local"]


def host_arch() -> Architecture:
    machine = platform.machine().lower()
    return "aarch64" if machine in ("aarch64", "arm64") else "x86_64"


def _query_gpus(fields: str) -> list[list[str]]:
    """Each GPU's `fields` (nvidia-smi --query-gpu), none without an NVIDIA GPU."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return [[part.strip() for part in line.split(",")] for line in out.strip().splitlines()]


def _query_gpu(fields: str) -> list[str] | None:
    """The first GPU's `fields`, or None without an NVIDIA GPU."""
    gpus = _query_gpus(fields)
    return gpus[0] if gpus else None


@functools.cache
def gpu_count() -> int:
    """How many NVIDIA GPUs this machine has (0 without nvidia-smi or a GPU)."""
    return len(_query_gpus("index"))


def compute_capability() -> str | None:
    """The first GPU's compute capability ("7.5"), or None without an NVIDIA GPU."""
    found = _query_gpu("compute_cap")
    return (found[0] or None) if found else None


def local_host() -> InstanceType:
    """This machine, described as the catalog describes an instance type."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    gpu = _query_gpu("name,memory.total,compute_cap")
    return InstanceType(
        name=LOCAL_INSTANCE_TYPE,
        arch=host_arch(),
        vcpus=os.cpu_count() or 1,
        memory_gib=max(1, memory >> 30),
        gpu=gpu[0] if gpu else None,
        gpu_memory_mib=int(float(gpu[1])) if gpu else 0,
        compute_capability=gpu[2] if gpu else None,
        on_demand_usd_per_hour={},
    )
