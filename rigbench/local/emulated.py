"""The local fleet as the emulation's `Fleet`: what moto cannot answer, answered here.

Quota and spot price are emulated figures (set by flags or environment, so a rehearsal can
try a quota of 0 or a price that busts the budget); capacity is never refused locally;
launches, SSM commands and terminations go to the `LocalFleet` of processes.
"""

import contextlib
import os
import re
import threading

from pydantic import BaseModel, Field

from rigbench.emulation.fleet import (
    CommandNotDelivered,
    CommandResult,
    LaunchedInstance,
    LaunchRequest,
)
from rigbench.local.fleet import LocalFleet, UnknownInstanceError, UnknownInvocationError
from rigbench.local.home import PRICE_ENV, QUOTA_ENV

RIG_TAG = "rigbench:rig"
SWEEP_TAG = "rigbench:sweep"
# One g5g.2xlarge (8 vCPU) at a time per 4 cores here: rigs measured side by side on a small
# machine would measure each other.
DEFAULT_QUOTA_VCPUS = 8.0 * max(1, (os.cpu_count() or 1) // 4)
DEFAULT_SPOT_PRICE = 0.30  # USD/h, g5g.2xlarge spot in us-east-1 (DESIGN.md: $0.26-0.41)
# In a rehearsal, every launch is refused with a capacity error the launch handler treats as
# "try the next subnet", so the walk covers the whole subnet order; no instance is created
# because the seam raises before moto's RunInstances.
REFUSAL = "InsufficientInstanceCapacity"
_MODEL_IN_USER_DATA = re.compile(r"--model[= ]+['\"]?([^'\"\s]+)")


class EmulatedAccount(BaseModel):
    """The figures an AWS account would give: vCPU quota per quota code, spot price."""

    quota_vcpus: float = Field(default=DEFAULT_QUOTA_VCPUS, ge=0)
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


class LocalEmulatedFleet:
    """Implements `rigbench.emulation.Fleet` over a `LocalFleet` of processes."""

    def __init__(
        self, fleet: LocalFleet, account: EmulatedAccount, default_model: str = "random:tiny"
    ) -> None:
        self.fleet = fleet
        self.account = account
        self.default_model = default_model
        self.models: dict[str, str] = {}  # sweep id -> model spec (the runner knows its input)
        # (sweep id, rig) -> rig settings sized to this host
        self.settings: dict[tuple[str, str], dict[str, str]] = {}
        self.launched_ids: list[str] = []
        self._rehearsal: list[LaunchRequest] | None = None
        self._lock = threading.Lock()

    def rehearse(self, on: bool = True) -> list[LaunchRequest]:
        """While on, every launch is recorded (in the list returned) and refused."""
        with self._lock:
            self._rehearsal = [] if on else None
            return self._rehearsal if self._rehearsal is not None else []

    def bind(self, aws_env: dict[str, str]) -> None:
        self.fleet.set_env(aws_env)

    def quota_vcpus(self, quota_code: str) -> float:
        return self.account.quota_vcpus

    def spot_price(self, instance_type: str, availability_zone: str) -> float:
        return self.account.spot_price_usd_per_hour

    def capacity_error(self, request: LaunchRequest) -> str | None:
        with self._lock:
            if self._rehearsal is None:
                return None
            self._rehearsal.append(request)
            return REFUSAL

    def model_for(self, instance: LaunchedInstance) -> str:
        sweep = instance.tags.get(SWEEP_TAG, "")
        if sweep in self.models:
            return self.models[sweep]
        match = _MODEL_IN_USER_DATA.search(instance.user_data)
        return match.group(1) if match else self.default_model

    def launched(self, instance: LaunchedInstance) -> None:
        rig = instance.tags.get(RIG_TAG)
        if rig is None:
            return  # not a rig instance: nothing to play
        settings = self.settings.get((instance.tags.get(SWEEP_TAG, ""), rig), {})
        self.fleet.launch(instance.instance_id, rig, self.model_for(instance), settings)
        with self._lock:
            self.launched_ids.append(instance.instance_id)

    def agent_online(self, instance_id: str) -> bool:
        return self.fleet.agent_online(instance_id)

    def send_command(
        self, command_id: str, instance_id: str, commands: list[str], timeout_s: int
    ) -> None:
        # Undeliverable: the invocation will never exist, as SSM would answer.
        with contextlib.suppress(UnknownInstanceError):
            self.fleet.send_command(command_id, instance_id, commands, timeout_s)

    def command_result(self, command_id: str, instance_id: str) -> CommandResult:
        try:
            invocation = self.fleet.invocation(command_id, instance_id)
        except (UnknownInstanceError, UnknownInvocationError) as exc:
            raise CommandNotDelivered(command_id) from exc
        return CommandResult(
            status=invocation.Status,
            stdout=invocation.StandardOutputContent,
            stderr=invocation.StandardErrorContent,
            response_code=invocation.ResponseCode,
        )

    def terminated(self, instance_id: str) -> None:
        self.fleet.terminate(instance_id)
