"""Rehearse a cloud sweep: the real state machine and handlers, quota/price/budget applied,
every launch refused at the EC2 seam, so nothing starts and nothing is spent.

The execution runs on the emulation as a cloud run would: input validation, the quota check
(emulated quota), pricing and the budget reservation (emulated spot price, the stack's caps),
then the Map. Each boot's RunInstances is recorded and refused (the launch handler moves on
through every subnet, as it would on capacity errors), and the boot ends through Finish like
any failed boot. What the dry run shows is what was asked of EC2 and what was reserved.
"""

import json
from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table

from functions.errors import error_message
from functions.events import Quota, Reservation
from functions.execution_input import DEFAULT_BOOTS_PER_RIG
from rigbench.emulation.fleet import LaunchRequest
from rigbench.local.emulated import EmulatedAccount
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


def render_plan(plan: SweepPlan, account: EmulatedAccount, zones: dict[str, str]) -> Group:
    parts: list[Any] = []
    if not plan.valid:
        parts.append(f"[red]a cloud run of this input would fail:[/] {escape(plan.error)}")
        return Group(*parts)
    sweep = plan.sweep
    deadline_h = (sweep.get("deadlines") or {}).get("instance_s", 0) / 3600
    rigs = ", ".join(sweep.get("rigs", []))
    parts.append(
        f"[green]valid[/]: sweep {sweep.get('sweep_id')}: {rigs} x {sweep.get('boots_per_rig')} "
        f"boots of {sweep.get('model')} on {sweep.get('instance_type')} ({sweep.get('market')})"
    )
    boots = int(sweep.get("boots_per_rig") or 0)
    if boots == 1:
        parts.append(
            "[yellow]1 boot per rig: the comparison can give no verdict (it needs 2 or more; "
            f"{DEFAULT_BOOTS_PER_RIG}, the default, tells one 1.5x difference at 10% spread about "
            "9 times in 10)[/]"
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
    console: Console, plan: SweepPlan, account: EmulatedAccount, zones: dict[str, str]
) -> None:
    console.print(render_plan(plan, account, zones))
