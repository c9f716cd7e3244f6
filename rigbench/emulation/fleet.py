"""The seam between the emulated control plane and whatever plays the instances.

moto runs EC2, SSM and Service Quotas calls but cannot know what an instance would do: it
has no capacity errors, no G-instance quotas, a fixed spot price, no SSM agent, and every
command "succeeds" with empty output. The emulation routes exactly those questions to a
`Fleet`: the local fleet of processes (rigbench.local.fleet), or in the orchestrator tests
a fleet whose every answer the test scripts (tests/orchestrator/scripted_fleet.py).
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol


@dataclass(frozen=True)
class LaunchRequest:
    instance_type: str
    subnet_id: str
    availability_zone: str
    market: Literal["spot", "on-demand"]


@dataclass(frozen=True)
class LaunchedInstance:
    instance_id: str
    instance_type: str
    availability_zone: str
    market: Literal["spot", "on-demand"]
    user_data: str
    tags: dict[str, str]


@dataclass(frozen=True)
class CommandResult:
    """What GetCommandInvocation reports (Status is one of SSM's invocation statuses)."""

    status: str
    stdout: str = ""
    stderr: str = ""
    response_code: int = -1


class CommandNotDelivered(Exception):
    """The invocation does not exist yet; SSM answers InvocationDoesNotExist."""


class Fleet(Protocol):
    def bind(self, aws_env: dict[str, str]) -> None:
        """Called once the emulation runs: the environment an instance uses to reach AWS."""

    def quota_vcpus(self, quota_code: str) -> float: ...

    def spot_price_history(
        self, instance_type: str, availability_zone: str
    ) -> list[tuple[datetime, float]]:
        """The type's spot prices in the zone: (when each took effect, USD per hour)."""

    def capacity_error(self, request: LaunchRequest) -> str | None:
        """An EC2 error code to refuse this launch with (InsufficientInstanceCapacity, ...)."""

    def launched(self, instance: LaunchedInstance) -> None: ...

    def agent_online(self, instance_id: str) -> bool: ...

    def send_command(
        self, command_id: str, instance_id: str, commands: list[str], timeout_s: int
    ) -> None: ...

    def command_result(self, command_id: str, instance_id: str) -> CommandResult:
        """Raise CommandNotDelivered when SSM would not know the invocation yet."""

    def terminated(self, instance_id: str) -> None: ...
