"""Regression alerts as a table: `rigbench regressions` and the end of a local sweep."""

from typing import Any

from rich.markup import escape
from rich.table import Table

from analysis.metrics import heading_of
from functions.regressions import METHOD, Regression


def regressions_table(regressions: list[Regression], title: str) -> Table:
    table = Table(title=title, caption=f"{METHOD}; now and history: geometric means of boots")
    for header in ("sweep", "started", "rig", "model / type", "cell", "metric"):
        table.add_column(header, overflow="fold")
    for header in ("now", "history", "worse by"):
        table.add_column(header, justify="right")
    table.add_column("rests on", overflow="fold")
    for r in regressions:
        table.add_row(
            r.sweep_id, r.sweep_started_at[:16].replace("T", " "), r.rig,
            f"{r.model} / {r.instance_type}", r.cell_label, heading_of(r.metric),
            f"{r.now:.4g}", f"{r.history:.4g}", f"{r.worse_by:.2f}x (> {r.threshold:g}x)",
            f"{r.n_now} boots vs {r.n_history} in {len(r.history_sweeps)} sweep(s), "
            f"Holm p={r.p_holm:.2g} of {r.family}",
        )  # fmt: skip
    return table


def check_lines(
    alerts: list[Regression], output: dict[str, Any], ratio: float, kept_in: str
) -> list[str | Table]:
    """What a finished sweep's regression check says: its alerts, or what it compared, or why
    it compared nothing (`output`: the execution's output, Summarize's summary)."""
    if alerts:
        title = f"{len(alerts)} regression alert(s): worse than the rig's own history"
        return [regressions_table(alerts, title), f"kept in {kept_in}"]
    if output.get("regressions_missing"):
        return [f"[yellow]regression check did not run:[/] {escape(output['regressions_missing'])}"]
    tested = int(output.get("regressions_tested") or 0)
    untested = output.get("regressions_untested") or {}
    skipped = "; ".join(f"{reason}: {n}" for reason, n in sorted(untested.items()))
    if tested:
        line = (
            f"no regression: {tested} comparisons with the rigs' earlier sweeps, none worse by "
            f"more than {ratio:g}x ({METHOD})"
        )
        return [line + (f"; not compared: {skipped}" if skipped else "")]
    return [f"no regression check possible: {skipped or 'nothing to compare'}"]
