"""A sweep's progress (`rigbench.stack.SweepProgress`) as tables: `status_table` for
`rigbench run` and `rigbench status`, `sweep_table` for the local sweep (`rigbench demo`)."""

from datetime import UTC, datetime

from rich.table import Table
from rich.text import Text

from rigbench.stack.models import BootProgress, Phase, SweepProgress


def _order(boot: BootProgress) -> tuple[str, int, int]:
    return (boot.rig, boot.boot or 0, boot.index)


def status_table(progress: SweepProgress) -> Table:
    """One row per rig and boot: phase, state, instance, outcome, cost, error."""
    table = Table(title=f"{progress.sweep_id}  {progress.status}")
    for column in ("rig", "boot", "phase", "state", "instance", "outcome", "cost $", "error"):
        table.add_column(column)
    for row in sorted(progress.boots, key=_order):
        colour = {"succeeded": "green", "failed": "red"}.get(row.outcome, "")
        table.add_row(
            row.rig, "" if row.boot is None else str(row.boot), str(row.phase), row.state,
            row.instance_id, f"[{colour}]{row.outcome}[/]" if colour else row.outcome,
            f"{row.cost_usd:.4f}" if row.cost_usd is not None else "",
            f"{row.error}: {row.cause}"[:120] if row.error else "",
        )  # fmt: skip
    return table


def sweep_table(progress: SweepProgress, title: str = "", now: datetime | None = None) -> Table:
    """One row per rig and boot with how long it has been in its phase; the sweep's own state
    in the caption."""
    now = now or datetime.now(UTC)
    table = Table(title=title or None, title_justify="left", expand=False)
    for column in ("rig", "boot", "instance", "phase", "for", "state / detail"):
        table.add_column(column)
    for boot in sorted(progress.boots, key=_order):
        style = {Phase.TERMINATED: "green", Phase.FAILED: "red"}.get(boot.phase, "")
        since = "" if boot.finished or boot.phase_since is None else (
            f"{(now - boot.phase_since).total_seconds():4.0f} s"
        )  # fmt: skip
        detail = boot.cause or boot.error or boot.state
        table.add_row(
            boot.rig,
            "" if boot.boot is None else str(boot.boot),
            boot.instance_id,
            Text(str(boot.phase), style=style),
            since,
            Text(detail[:100], style="red" if boot.error else "dim"),
        )
    caption = f"sweep: {progress.state} ({progress.status.lower()})"
    if progress.error:
        caption += f": {progress.cause or progress.error}"
    table.caption = caption
    table.caption_justify = "left"
    return table


def explain_failure(progress: SweepProgress) -> str:
    """The execution's error and its readable cause."""
    return f"{progress.error or 'failed'}: {progress.cause}"
