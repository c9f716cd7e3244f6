"""The plan of a cloud sweep, read from its rehearsal on the emulation (`--dry-run`).

The execution runs on the emulation as a cloud run would: input validation, the quota check
(emulated quota), pricing and the budget reservation (emulated spot price, the stack's caps),
then the Map. Each boot's RunInstances is recorded and refused (the launch handler moves on
through every subnet, as it would on capacity errors), and the boot ends through Finish like
any failed boot. What the dry run shows is what was asked of EC2 and what was reserved.
"""

import json
from typing import Any

from functions.errors import error_message
from functions.events import Quota, Reservation
from rigbench.emulation.fleet import LaunchRequest
from rigbench.stack.models import PlannedBoot, SweepPlan


def _exited(events: list[dict[str, Any]], state: str) -> dict[str, Any] | None:
    for event in events:
        details = event.get("stateExitedEventDetails")
        if details and details.get("name") == state:
            output = json.loads(details.get("output") or "null")
            return output if isinstance(output, dict) else None
    return None


def _execution_error(events: list[dict[str, Any]]) -> str:
    for event in reversed(events):
        details = event.get("executionFailedEventDetails")
        if details:
            return error_message(str(details.get("cause") or details.get("error") or "failed"))
    return ""


def plan_from(events: list[dict[str, Any]], requests: list[LaunchRequest]) -> SweepPlan:
    """Fold the rehearsal's history and the recorded launch requests into a plan."""
    reserved = _exited(events, "ReserveBudget")
    if reserved is None:  # stopped before the Map: validation, quota or budget said no
        return SweepPlan(valid=False, error=_execution_error(events) or "the sweep stopped early")
    sweep = reserved.get("sweep") or {}
    subnets = list(sweep.get("subnets") or [])
    boots = [
        PlannedBoot(
            rig=item["rig"],
            boot=int(item["boot"]),
            instance_type=str(sweep.get("instance_type")),
            market=str(sweep.get("market")),
            subnets=subnets,
        )
        for item in reserved.get("items") or []
    ]
    tried = {(r.instance_type, r.subnet_id) for r in requests}
    untried = [b for b in boots if not all((b.instance_type, s) in tried for s in b.subnets)]
    error = ""
    if untried:
        error = f"{len(untried)} boots never reached launch: " + _execution_error(events)
    return SweepPlan(
        valid=not untried,
        error=error,
        sweep=sweep,
        quota=Quota.model_validate(reserved["quota"]) if reserved.get("quota") else None,
        reservation=(
            Reservation.model_validate(reserved["reservation"])
            if reserved.get("reservation")
            else None
        ),
        boots=boots,
    )
