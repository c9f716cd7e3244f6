"""The emulated account's figures: what an AWS account would answer about quota and price
(set by flags or environment, so a rehearsal can try a quota of 0 or a price that busts the
budget)."""

import os

from pydantic import BaseModel, Field

from hardware.local_host import gpu_count
from rigbench.local.home import PRICE_ENV, QUOTA_ENV

INSTANCE_VCPUS = 8.0  # a g5g.2xlarge


def default_quota_vcpus() -> float:
    """One instance per GPU where this machine has GPUs (two rigs on one GPU run out of its
    memory: XLA alone takes most of it); else one per 4 cores, since rigs measured side by
    side on a small machine would measure each other."""
    gpus = gpu_count()
    return INSTANCE_VCPUS * (gpus or max(1, (os.cpu_count() or 1) // 4))


DEFAULT_SPOT_PRICE = 0.30  # USD/h, g5g.2xlarge spot in us-east-1 (docs/design.md: $0.26-0.41)
# In a rehearsal, every launch is refused with the error the launch handler treats as "not
# sold in this zone": it tries the next subnet, so the walk covers the whole subnet order, and
# never tries again after a backoff; no instance is created because the seam raises before
# moto's RunInstances.
REFUSAL = "Unsupported"
# Every GPU held by a running instance: a busy zone, which Launch tries again after a backoff
# (until the ready deadline), so a boot waits for a GPU to be freed.
NO_FREE_GPU = "InsufficientInstanceCapacity"


class EmulatedAccount(BaseModel):
    """The figures an AWS account would give: vCPU quota per quota code, spot price."""

    quota_vcpus: float = Field(default_factory=default_quota_vcpus, ge=0)
    spot_price_usd_per_hour: float = Field(default=DEFAULT_SPOT_PRICE, gt=0)

    @classmethod
    def from_env(
        cls, quota_vcpus: float | None = None, spot_price: float | None = None
    ) -> "EmulatedAccount":
        """Explicit values first, then RIGBENCH_LOCAL_QUOTA_VCPUS / _SPOT_PRICE, then defaults."""
        values: dict[str, float] = {}
        quota = quota_vcpus if quota_vcpus is not None else _env_float(QUOTA_ENV)
        price = spot_price if spot_price is not None else _env_float(PRICE_ENV)
        if quota is not None:
            values["quota_vcpus"] = quota
        if price is not None:
            values["spot_price_usd_per_hour"] = price
        return cls(**values)


def _env_float(name: str) -> float | None:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return None
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None
