"""Rehearse a cloud sweep: the real state machine and handlers, quota/price/budget applied,
every launch refused at the EC2 seam, so nothing starts and nothing is spent.

The execution runs on the emulation as a cloud run would: input validation, the quota check
(emulated quota), pricing and the budget reservation (emulated spot price, the stack's caps),
then the Map. Each boot's RunInstances is recorded and refused (the launch handler moves on
through every subnet, as it would on capacity errors), and the boot ends through Finish like
any failed boot. What the dry run shows is what was asked of EC2 and what was reserved.
"""

import json
import threading
from typing import Any

from pydantic import BaseModel
from rich.console import Console, Group
from rich.table import Table

from functions.events import Quota, Reservation
from rigbench.emulation.fleet import LaunchRequest
from rigbench.local.emulated import EmulatedAccount, LocalEmulatedFleet
from rigbench.local.fleet import LocalFleet

# A capacity error the launch handler treats as "try the next subnet", so the walk covers the
# whole subnet order; no instance is created because the seam raises before moto's RunInstances.
REFUSAL = "InsufficientInstanceCapacity"


class DryRunFleet(LocalEmulatedFleet):
    """The emulated account's answers, with every launch recorded and refused."""

    def __init__(self, fleet: LocalFleet, account: EmulatedAccount) -> None:
        super().__init__(fleet, account)
        self.requests: list[LaunchRequest] = []
        self._requests_lock = threading.Lock()

    def capacity_error(self, request: LaunchRequest) -> str | None:
        with self._requests_lock:
            self.requests.append(request)
        return REFUSAL


class PlannedBoot(BaseModel):
    rig: str
    boot: int
    instance_type: str
    market: str
    subnets: list[str]  # in the order the launch would try them


class Plan(BaseModel):
    """What a cloud run of this input would do, read from the rehearsal's execution."""

    valid: bool
    error: str = ""
    sweep: dict[str, Any] = {}
    quota: Quota | None = None
    reservation: Reservation | None = None
    boots: list[PlannedBoot] = []


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
            cause = details.get("cause") or details.get("error") or "failed"
            try:
                parsed = json.loads(cause)
            except ValueError:
                return str(cause)
            if isinstance(parsed, dict) and parsed.get("errorMessage"):
                return str(parsed["errorMessage"])
            return str(cause)
    return ""


def plan_from(events: list[dict[str, Any]], requests: list[LaunchRequest]) -> Plan:
    """Fold the rehearsal's history and the recorded launch requests into a plan."""
    reserved = _exited(events, "ReserveBudget")
    if reserved is None:  # stopped before the Map: validation, quota or budget said no
        return Plan(valid=False, error=_execution_error(events) or "the sweep stopped early")
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
    return Plan(
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


def render_plan(plan: Plan, account: EmulatedAccount, zones: dict[str, str]) -> Group:
    parts: list[Any] = []
    if not plan.valid:
        parts.append(f"[red]a cloud run of this input would fail:[/] {plan.error}")
        return Group(*parts)
    sweep = plan.sweep
    deadline_h = (sweep.get("deadlines") or {}).get("instance_s", 0) / 3600
    rigs = ", ".join(sweep.get("rigs", []))
    parts.append(
        f"[green]valid[/]: sweep {sweep.get('sweep_id')}: {rigs} x {sweep.get('boots_per_rig')} "
        f"boots of {sweep.get('model')} on {sweep.get('instance_type')} ({sweep.get('market')})"
    )
    if plan.quota is not None:
        q = plan.quota
        parts.append(
            f"quota {q.quota_code}: {q.quota_vcpus:g} vCPU (emulated) - {q.used_vcpus} in use = "
            f"{q.room_vcpus:g}; {q.instance_vcpus} per instance -> at most {q.max_concurrency} "
            "instances at once"
        )
    if plan.reservation is not None:
        r = plan.reservation
        parts.append(
            f"price ${r.price_usd_per_hour:.4f}/h ({r.price_source}; emulated spot price "
            f"${account.spot_price_usd_per_hour:.4f}/h) x {deadline_h:g} h deadline = "
            f"${r.per_boot_usd:.2f} per boot; {len(plan.boots)} boots reserve "
            f"${r.total_usd:.2f} of the ${float(sweep.get('budget_usd', 0)):.2f} budget ({r.month})"
        )
    per_boot = f"${plan.reservation.per_boot_usd:.2f}" if plan.reservation else "?"
    table = Table(title="would launch", title_justify="left")
    for column in ("rig", "boot", "instance type", "market", "reserved"):
        table.add_column(column)
    for boot in plan.boots:
        table.add_row(boot.rig, str(boot.boot), boot.instance_type, boot.market, per_boot)
    parts.append(table)
    if plan.boots:
        order = ", ".join(f"{s} ({zones.get(s, '?')})" for s in plan.boots[0].subnets)
        parts.append(f"each launch tries the subnets in this order on capacity errors: {order}")
    parts.append("[dim]dry run: no instance was launched and nothing was spent[/]")
    return Group(*parts)


def print_plan(
    console: Console, plan: Plan, account: EmulatedAccount, zones: dict[str, str]
) -> None:
    console.print(render_plan(plan, account, zones))
