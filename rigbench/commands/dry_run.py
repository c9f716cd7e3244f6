"""Print a cloud sweep's plan: locally its rehearsal (the real state machine and handlers,
quota/price/budget applied, every launch refused at the EC2 seam; `rigbench.stack.rehearsal`
reads the plan from the rehearsal's history) on the emulated account; with AWS credentials the
deployed stack's own checks against the account's quota, spot price and the month's spend
(`rigbench.stack.deployed_plan`). Either way nothing starts and nothing is spent."""

from typing import Any

from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table

from functions.budget import boot_seconds_text
from functions.events import SweepConfig
from functions.execution_input import DEFAULT_BOOTS_PER_RIG
from rigbench.stack.models import SweepPlan


def render_plan(plan: SweepPlan, zones: dict[str, str], *, emulated: bool) -> Group:
    """`emulated`: rehearsed on the emulated account's figures, not the AWS account's."""
    parts: list[Any] = []
    figures = "emulated" if emulated else "the account's"
    if plan.planned_against:
        parts.append(f"planned against {escape(plan.planned_against)} ({figures} figures)")
    if not plan.valid:
        parts.append(f"[red]a cloud run of this input would fail:[/] {escape(plan.error)}")
        return Group(*parts)
    sweep = SweepConfig.model_validate(plan.sweep)
    boots = (
        f"up to {sweep.boots_cap()} boots (auto: rounds at {sweep.looks()} per rig)"
        if sweep.adaptive
        else f"{sweep.boots_per_rig} boots"
    )
    parts.append(
        f"[green]valid[/]: sweep {sweep.sweep_id}: {', '.join(sweep.rigs)} x {boots} "
        f"of {sweep.model} on {sweep.instance_type} ({sweep.market})"
    )
    if sweep.boots_per_rig == 1:
        parts.append(
            "[yellow]1 boot per rig: the comparison can give no verdict (it needs 2 or more; "
            f"{DEFAULT_BOOTS_PER_RIG}, the default, tells one 1.5x difference at 10% spread about "
            "9 times in 10)[/]"
        )
    if plan.quota is not None:
        q = plan.quota
        parts.append(
            f"quota {q.quota_code}: {q.quota_vcpus:g} vCPU ({figures}) - {q.used_vcpus} in use = "
            f"{q.room_vcpus:g}; {q.instance_vcpus} per instance -> at most {q.max_concurrency} "
            "instances at once"
        )
    if plan.reservation is not None:
        r = plan.reservation
        rate = max(r.price_usd_per_hour, r.max_price_usd_per_hour, r.fallback_usd_per_hour)
        parts.append(
            f"price ${r.price_usd_per_hour:.4f}/h ({escape(r.price_source)}); each boot "
            f"reserves ${rate:.4f}/h x {boot_seconds_text(sweep)} = ${r.per_boot_usd:.2f}; "
            f"{sweep.boot_count()} boots reserve ${r.total_usd:.2f} of the "
            f"${sweep.budget_usd:.2f} budget ({r.month})"
        )
    if plan.month is not None:
        m = plan.month
        parts.append(
            f"month {m.month}: ${m.committed_usd:.2f} already committed of the "
            f"${m.cap_usd:.2f} monthly cap; this sweep would bring it to "
            f"${m.committed_usd + (plan.reservation.total_usd if plan.reservation else 0):.2f}"
        )
    per_boot = f"${plan.reservation.per_boot_usd:.2f}" if plan.reservation else "?"
    title = "the first round would launch" if sweep.adaptive else "would launch"
    table = Table(title=title, title_justify="left")
    for column in ("rig", "boot", "instance type", "market", "reserved"):
        table.add_column(column)
    for boot in plan.boots:
        table.add_row(boot.rig, str(boot.boot), boot.instance_type, boot.market, per_boot)
    parts.append(table)
    if sweep.adaptive:
        later = sweep.boot_count() - len(plan.boots)
        parts.append(
            f"later rounds launch up to {later} more boots, only while a headline comparison is "
            "undecided; the reservation covers them all, and Summarize releases what no round "
            "launched"
        )
    if plan.boots:
        order = ", ".join(f"{s} ({zones.get(s, '?')})" for s in plan.boots[0].subnets)
        parts.append(f"each launch tries the subnets in this order on capacity errors: {order}")
    parts.append("[dim]dry run: no instance was launched and nothing was spent[/]")
    return Group(*parts)


def print_plan(console: Console, plan: SweepPlan, zones: dict[str, str], *, emulated: bool) -> None:
    console.print(render_plan(plan, zones, emulated=emulated))
