"""A sweep's progress (`rigbench.stack.SweepProgress`) as tables: `status_table` for
`rigbench run` and `rigbench status`, `sweep_table` for the local sweep (`rigbench demo`),
`rounds_table` and `decisions_table` for an adaptive sweep's rounds (both)."""

from datetime import UTC, datetime

from rich.console import Console
from rich.table import Table
from rich.text import Text

from analysis.metrics import heading_of
from functions.events import HeadlineComparison, Round
from rigbench.stack.models import BootProgress, Phase, SweepProgress


def failure_line(error: str, cause: str) -> str:
    """A failure in one line for a table: the error and the cause's last line, which for a
    cause that ends with a rig's log is the line that says why (the full cause is in
    `rigbench status`, the report and MCP)."""
    lines = [line for line in cause.splitlines() if line.strip()]
    if len(lines) > 1:
        return f"{error}: {lines[0][:60]} … {lines[-1].strip()}"
    return f"{error}: {cause}" if error else cause


def _order(boot: BootProgress) -> tuple[str, int, int]:
    return (boot.rig, boot.boot or 0, boot.index)


def phase_age(boot: BootProgress, now: datetime) -> str:
    """How long a boot has been in its phase ("" once it finished, or when unknown)."""
    if boot.finished or boot.phase_since is None:
        return ""
    return f"{(now - boot.phase_since).total_seconds():4.0f} s"


def status_table(progress: SweepProgress, now: datetime | None = None) -> Table:
    """One row per rig and boot: phase and how long it has been in it, state, instance,
    outcome, cost, error."""
    now = now or datetime.now(UTC)
    table = Table(title=f"{progress.sweep_id}  {progress.status}")
    columns = ("rig", "boot", "phase", "for", "state", "instance", "outcome", "cost $", "error")
    for column in columns:
        table.add_column(column)
    for row in sorted(progress.boots, key=_order):
        colour = {"succeeded": "green", "failed": "red"}.get(row.outcome, "")
        table.add_row(
            row.rig, "" if row.boot is None else str(row.boot), str(row.phase),
            phase_age(row, now), row.state,
            row.instance_id, f"[{colour}]{row.outcome}[/]" if colour else row.outcome,
            f"{row.cost_usd:.4f}" if row.cost_usd is not None else "",
            failure_line(row.error, row.cause)[:200] if row.error else "",
        )  # fmt: skip
    return table


def queued_and_eta(
    progress: SweepProgress, expected_boots: int, started_at: datetime, now: datetime
) -> str:
    """How many boots wait for a slot, and an estimate of the time left: the time so far per
    finished boot, times the boots not finished (said to be an estimate, from how many)."""
    begun = [b for b in progress.boots if b.phase != Phase.QUEUED]
    queued = max(0, expected_boots - len(begun))
    finished = sum(1 for b in progress.boots if b.finished)
    parts = [f"{queued} of {expected_boots} boots queued"] if queued else []
    if finished and finished < expected_boots:
        per_boot = (now - started_at).total_seconds() / finished
        left_min = per_boot * (expected_boots - finished) / 60
        parts.append(
            f"about {left_min:.0f} min left (estimate from {finished} finished "
            f"boot{'s' if finished > 1 else ''})"
        )
    return "; ".join(parts)


def sweep_table(
    progress: SweepProgress,
    title: str = "",
    now: datetime | None = None,
    *,
    expected_boots: int | None = None,
    started_at: datetime | None = None,
) -> Table:
    """One row per rig and boot with how long it has been in its phase; the sweep's own state,
    the boots still queued and an estimate of the time left in the caption."""
    now = now or datetime.now(UTC)
    table = Table(title=title or None, title_justify="left", expand=False)
    for column in ("rig", "boot", "instance", "phase", "for", "state / detail"):
        table.add_column(column)
    for boot in sorted(progress.boots, key=_order):
        style = {Phase.TERMINATED: "green", Phase.FAILED: "red"}.get(boot.phase, "")
        since = phase_age(boot, now)
        detail = failure_line(boot.error, boot.cause) if boot.error else boot.state
        table.add_row(
            boot.rig,
            "" if boot.boot is None else str(boot.boot),
            boot.instance_id,
            Text(str(boot.phase), style=style),
            since,
            Text(detail[:160], style="red" if boot.error else "dim"),
        )
    caption = f"sweep: {progress.state} ({progress.status.lower()})"
    if progress.error:
        caption += f": {progress.cause or progress.error}"
    if expected_boots and started_at and not progress.done:
        outlook = queued_and_eta(progress, expected_boots, started_at, now)
        caption += f"; {outlook}" if outlook else ""
    table.caption = caption
    table.caption_justify = "left"
    return table


def rounds_table(rounds: list[Round]) -> Table:
    """One row per look of an adaptive sweep: its boots, level, what was decided, the cost."""
    table = Table(
        title='rounds ("boots_per_rig": "auto")',
        title_justify="left",
        caption="each look: Welch's t-test on log boot values, Holm over the headline "
        "comparisons, at the look's Hwang-Shih-DeCani alpha-spending level; the looks "
        "together call an A/A pair different at most 5% of the time (3.8% simulated, "
        "docs/measurements.md)",
    )
    for column in ("round", "boots per rig", "level", "decided", "boots", "spent", "then"):
        table.add_column(column)
    for r in rounds:
        table.add_row(*round_row(r))
    return table


def round_row(r: Round) -> list[str]:
    """A look's row, in the terminal and the report alike."""
    return [
        str(r.round), str(r.boots_per_rig), f"{r.level:.2g}", f"{r.decided} of {r.comparisons}",
        str(r.boots), f"${r.cost_usd:.4f}", f"stopped: {r.stop}" if r.stop else "another round",
    ]  # fmt: skip


def decision_row(c: HeadlineComparison, rounds: list[Round]) -> list[str]:
    """A headline comparison's row, in the terminal and the report alike."""
    ratio = "" if c.ratio is None else f"{c.ratio:.3g}"
    return [
        c.cell, heading_of(c.metric), f"{c.rig_a} vs {c.rig_b}", c.verdict, ratio,
        decided_at(c, rounds),
    ]  # fmt: skip


def decided_at(comparison: HeadlineComparison, rounds: list[Round]) -> str:
    """When a headline comparison was decided, and what it had cost by then."""
    if comparison.decided_in_round is None:
        return "not decided"
    by_number = {r.round: r for r in rounds}
    found = by_number.get(comparison.decided_in_round)
    if found is None:
        return f"round {comparison.decided_in_round}"
    return (
        f"round {found.round}: {found.boots_per_rig} boots per rig, ${found.cost_usd:.4f} "
        f"(level {found.level:.2g})"
    )


def decisions_table(rounds: list[Round], headline: list[HeadlineComparison]) -> Table:
    """Each headline comparison: its verdict and the look that decided it."""
    table = Table(title="headline comparisons, as the last look left them", title_justify="left")
    for column in ("cell", "metric", "rigs", "verdict", "ratio", "decided"):
        table.add_column(column)
    for c in headline:
        table.add_row(*decision_row(c, rounds))
    return table


def boot_failures(progress: SweepProgress) -> list[str]:
    """Each failed boot's error and whole cause (a rig's log ends it where there was one)."""
    return [
        f"{boot.rig} boot {'?' if boot.boot is None else boot.boot}: {boot.error}: {boot.cause}"
        for boot in sorted(progress.boots, key=_order)
        if boot.error
    ]


def explain_failure(progress: SweepProgress) -> str:
    """The execution's error and its readable cause."""
    return f"{progress.error or 'failed'}: {progress.cause}"


class PhaseLines:
    """Progress for a log (output that is not a terminal): one plain line each time the sweep
    or a boot changes phase, instead of a live table that would print only at the end."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._seen: dict[int | None, str] = {}

    def __call__(self, progress: SweepProgress) -> None:
        stamp = datetime.now(UTC).strftime("%H:%M:%S")
        sweep = f"{progress.state} ({progress.status.lower()})"
        if self._seen.get(None) != sweep:
            self._seen[None] = sweep
            self.console.print(f"{stamp} sweep {progress.sweep_id}: {sweep}", highlight=False)
        for boot in sorted(progress.boots, key=_order):
            phase = str(boot.phase)
            if self._seen.get(boot.index) == phase:
                continue
            self._seen[boot.index] = phase
            where = f" on {boot.instance_id}" if boot.instance_id else ""
            why = f": {boot.error}: {boot.cause}" if boot.error else ""
            number = "?" if boot.boot is None else boot.boot
            self.console.print(
                f"{stamp} {boot.rig} boot {number}: {phase}{where}{why}", highlight=False
            )
