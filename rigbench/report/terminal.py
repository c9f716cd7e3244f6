"""A comparison and its output agreement as terminal tables (rich): what `rigbench compare`, a
local sweep's end and `python -m rigbench.commands.compare_reports` print. The words are the
comparison's own (analysis.compare, analysis.agreement), as the report page shows them."""

from __future__ import annotations

import io
from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from analysis.agreement import (
    AGREEMENT_CAPTION,
    PairAgreement,
    basis_words,
    counts_words,
    first_words,
    pair_name,
)
from analysis.compare import (
    LOAD_SHORT,
    NO_VERDICTS,
    Comparison,
    MetricComparison,
    RigResult,
    capacity_header,
    caption,
    footnotes,
    rig_heading,
    value_words,
)
from analysis.stats import Verdict

_VERDICT_STYLE = {
    Verdict.FASTER: "bold green",
    Verdict.SLOWER: "bold red",
    Verdict.INDISTINGUISHABLE: "dim",
    Verdict.NO_VERDICT: "yellow",
}


def _rig_cell(result: RigResult, baseline: str, alone: bool = False) -> Text:
    agg = result.aggregate
    if agg is None:
        return Text("no data", style="dim")
    text = Text(value_words(agg))
    text.append(f"\n{agg.interval_words}", style="dim")
    if result.rig == baseline and not alone:
        text.append("\nbaseline", style="dim")
    elif result.words:
        style = _VERDICT_STYLE[result.verdict] if result.verdict is not None else "dim"
        text.append(f"\n{result.words}", style=style)
    return text


def _ranking_cell(metric: MetricComparison) -> Text:
    if metric.withheld:
        return Text(metric.withheld, style="yellow")
    text = Text(metric.ranking)
    if metric.flip_words:
        text.append(f"\n{metric.flip_words}", style="bold yellow")
    return text


ONE_BOOT_CAPTION = (
    "one boot per rig: each figure is that boot's value; no interval and no verdict (the boot "
    "is the unit of replication: run more boots to compare)"
)


def render(comparison: Comparison) -> Table:
    alone = len(comparison.rigs) == 1
    one_boot = all(
        r.aggregate is None or r.aggregate.n_boots <= 1
        for c in comparison.cells
        for m in c.metrics
        for r in m.results
    )
    table = Table(
        title=f"rigbench comparison (one rig: {comparison.baseline})"
        if alone
        else f"rigbench comparison (baseline {comparison.baseline})",
        caption=Text(ONE_BOOT_CAPTION if one_boot else caption(comparison)),
        show_lines=True,
    )
    table.add_column("cell")
    table.add_column("metric")
    for rig in comparison.rigs:
        table.add_column(rig_heading(comparison, rig), justify="right")
    table.add_column("ranking")
    for cell in comparison.cells:
        for row, metric in enumerate(cell.metrics):
            by_rig = {r.rig: r for r in metric.results}
            label = Text(cell.cell)
            if cell.load_short and row == 0:  # once per cell; the footnote says whose and how far
                label.append(f"\n{LOAD_SHORT}", style="yellow")
            table.add_row(
                label,
                metric.metric.heading,
                *(_rig_cell(by_rig[rig], comparison.baseline, alone) for rig in comparison.rigs),
                _ranking_cell(metric),
            )
    return table


def print_comparison(console: Console, comparison: Comparison) -> None:
    """The capacity lines, the table, then its footnotes: what the terminal shows of a
    comparison."""
    for line in capacity_header(comparison):
        console.print(Text(line, style="bold"))
    console.print(render(comparison))
    for line in footnotes(comparison):
        warning = ("not like for like", "local emulation", LOAD_SHORT, NO_VERDICTS)
        style = "yellow" if line.startswith(warning) else ""
        console.print(Text(line, style=style))
    if comparison.output_agreement:
        console.print(render_agreement(comparison.output_agreement))


def render_text(comparison: Comparison, width: int = 160) -> str:
    """The table and its footnotes as plain text (no colour codes), for logs and tests."""
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    print_comparison(console, comparison)
    return console.export_text()


def render_agreement(pairs: Sequence[PairAgreement]) -> Table:
    table = Table(title="output agreement", caption=AGREEMENT_CAPTION, caption_justify="left")
    for column in ("rigs", "verdict", "prompts", "first divergence", "basis"):
        table.add_column(column, overflow="fold")
    for pair in pairs:
        style = "green" if pair.verdict == "agree" else "bold red"
        mean = (
            f"mean token {pair.mean_first_divergence:.1f}"
            if pair.mean_first_divergence is not None
            else "none"
        )
        first = first_words(pair)
        table.add_row(
            pair_name(pair),
            Text(pair.words, style=style),
            counts_words(pair),
            mean + (f"; {first}" if first else ""),
            basis_words(pair),
        )
    return table
