"""An embedded AWS account for the orchestrator: moto plus seams a fleet fills."""

from rigbench.emulation.environ import EnvironOverride
from rigbench.emulation.fleet import (
    CommandNotDelivered,
    CommandResult,
    Fleet,
    LaunchedInstance,
    LaunchRequest,
)
from rigbench.emulation.seams import Faults, LaunchHold
from rigbench.emulation.stack import Emulation

__all__ = [
    "CommandNotDelivered",
    "CommandResult",
    "Emulation",
    "EnvironOverride",
    "Faults",
    "Fleet",
    "LaunchHold",
    "LaunchRequest",
    "LaunchedInstance",
]
