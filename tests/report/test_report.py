"""The sweep report of a real local sweep (the state machine, handlers, the jax and torch rigs
on CPU, the harness), opened in real headless Chromium; and what it says about bad input."""

import html
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from analysis.agreement import agreement_line, counts_words
from analysis.boot_values import START_CELL
from analysis.compare import Comparison, footnotes
from rigbench.cli import app
from rigbench.commands.local import local_stack
from rigbench.report.agreement import agreement_of
from rigbench.report.comparison import LOCAL_EMULATION, comparison_of
from rigbench.report.data import ReportError, SweepData, gather
from rigbench.report.html import render_page
from rigbench.report.sweep import sweep_page
from rigbench.report.terminal import render_text
from rigbench.report.trend import trend_page
from rigbench.report.writer import store_from
from tests.report.chromium import Chromium
from tests.shared_sweep import (
    SHARED_SWEEP_GROUP,
    SHARED_SWEEP_ID,
    SHARED_SWEEP_TIMEOUT_S,
    TERMINAL_WIDTH,
    FinishedSweep,
)

SWEEP = SHARED_SWEEP_ID
pytestmark = [
    pytest.mark.timeout(SHARED_SWEEP_TIMEOUT_S),
    pytest.mark.xdist_group(SHARED_SWEEP_GROUP),
]
PLOTS = ("plot-pareto", "plot-throughput", "plot-latency", "plot-cdf", "plot-tradeoff", "plot-cost",
         "plot-timeline")  # fmt: skip
# Marks plotly drew: line and fill paths of scatter traces, marker points, bar rectangles.
# The page unpacks plotly.js and draws its figures after load: window.rigbenchDrawn settles then.
MARKS_JS = """(async () => {
  await window.rigbenchDrawn;
  const out = {};
  for (const div of document.querySelectorAll('.js-plotly-plot')) {
    const drawn = [...div.querySelectorAll(
      '.scatterlayer .trace path.js-line, .scatterlayer .trace .points path.point,'
      + ' .barlayer .trace .point path')].filter(p => (p.getAttribute('d') || '').length > 4);
    out[div.id] = drawn.length;
  }
  return out;
})()"""


@pytest.fixture(scope="module")
def sweep(finished_sweep: FinishedSweep, tmp_path_factory: pytest.TempPathFactory) -> FinishedSweep:
    """The run's shared sweep, in a home of this module's own (its tests write reports)."""
    assert finished_sweep.code == 0, finished_sweep.terminal
    return finished_sweep.copy_to(tmp_path_factory.mktemp("report") / "home")


@pytest.fixture(scope="module")
def gathered(sweep: FinishedSweep) -> SweepData:
    """The sweep as a later `rigbench report --local` reads it (its execution is gone)."""
    with local_stack(sweep.home) as stack:
        return gather(store_from(stack.client, stack.refs), SWEEP)


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    chromium = Chromium()
    try:
        yield chromium
    finally:
        chromium.close()


def _interval_words(comparison: Comparison) -> set[str]:
    return {
        r.aggregate.interval_words
        for c in comparison.cells
        for m in c.metrics
        for r in m.results
        if r.aggregate is not None
    }


def _text(page: str) -> str:
    """The page's visible words: tags dropped, entities decoded, whitespace squeezed."""
    body = page.split("</head>", 1)[1]
    body = re.sub(r"<script.*?</script>", " ", body, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


@pytest.mark.slow
def test_sweep_ends_by_printing_the_report_path(finished_sweep: FinishedSweep) -> None:
    last = finished_sweep.terminal.strip().splitlines()[-1]
    assert last == f"report: {finished_sweep.report} (open it in a browser)"
    assert finished_sweep.report.is_file()


@pytest.mark.slow
def test_terminal_table_and_report_say_the_same_things(
    sweep: FinishedSweep, gathered: SweepData
) -> None:
    comparison = comparison_of(gathered, local=True)
    assert comparison is not None
    words = [r.words for c in comparison.cells for m in c.metrics for r in m.results if r.words] + [
        m.ranking for c in comparison.cells for m in c.metrics if m.ranking
    ]
    withheld = [m.withheld for c in comparison.cells for m in c.metrics if m.withheld]
    intervals = _interval_words(comparison)
    assert words
    assert intervals == {"1 boot, no interval"}  # what 1 boot gives, said so
    table = render_text(comparison, width=TERMINAL_WIDTH)
    page = _text(sweep.report.read_text())
    terminal = " ".join(sweep.terminal.split())
    for phrase in [*words, *withheld, *intervals, *footnotes(comparison)]:
        assert phrase in table
        assert phrase in page, phrase
        assert " ".join(phrase.split()) in terminal, phrase
    # What ran is said wherever a price, cost, zone or AMI appears, and by the terminal.
    assert LOCAL_EMULATION in footnotes(comparison)
    for section in ("Sweep", "Cost per million output tokens", "Provenance"):
        after = page.rsplit(f" {section} ", 1)[1]  # the heading, after the page's nav
        assert LOCAL_EMULATION in after[:2000], section
    # Each rig's batching, slots and dtype head its column, in both.
    for rig, setup in comparison.setups.items():
        # the torch rig's default is like jax's; torch@wrong batches (its perturbation needs it)
        assert setup.batching == ("batched" if rig == "torch@wrong" else "continuous"), rig
        assert setup.words() in table
        assert setup.words() in page
    assert "bootstrap" not in table + page
    # Ratios, never signed percentages with "slower"; the ranking column is filled.
    assert not re.search(r"[+-]\d+(\.\d+)?% (slower|faster)", table + page)
    assert re.search(r"(\d+(\.\d)?x|\d+%) (higher|lower) ", page)
    # A rig whose tokens came in bursts gets TPOT verdicts and no ITL verdict.
    for cell in (c for c in comparison.cells if c.cell != START_CELL):  # the load cells
        itl = next(m for m in cell.metrics if m.metric.key == "itl_ms.p50")
        assert bool(cell.burst_rigs) == bool(itl.withheld)
        if cell.burst_rigs:
            assert all(r.verdict is None for r in itl.results)


@pytest.mark.slow
def test_compare_command_prints_the_reports_comparison(
    sweep: FinishedSweep, gathered: SweepData
) -> None:
    runner = CliRunner()
    args = ["compare", SWEEP, "--local", "--home", str(sweep.home)]
    shown = runner.invoke(app, [*args, "--format", "json"])
    assert shown.exit_code == 0, shown.output
    assert Comparison.model_validate_json(shown.stdout) == comparison_of(gathered, local=True)
    table = runner.invoke(app, args, env={"COLUMNS": "320"})
    assert table.exit_code == 0, table.output
    assert "rigbench comparison (baseline jax)" in table.stdout
    assert LOCAL_EMULATION in table.stdout
    missing = runner.invoke(app, ["compare", "no-such-sweep", "--local", "--home", str(sweep.home)])
    assert missing.exit_code == 2
    assert "no sweep 'no-such-sweep'" in missing.output


@pytest.mark.slow
def test_float32_torch_and_jax_outputs_agree_in_the_table_and_the_report(
    sweep: FinishedSweep, gathered: SweepData
) -> None:
    pairs = {p.rigs: p for p in agreement_of(gathered)}
    assert {("jax", "torch"), ("jax", "torch@wrong"), ("torch", "torch@wrong")} <= set(pairs)
    pair = pairs[("jax", "torch")]
    assert pair.verdict == "agree", pair
    assert pair.threshold_nats == 1e-3  # both rigs said float32
    assert pair.prompts == 16
    assert pair.identical + (pair.near_tie or 0) == 16
    # Both rigs give logprobs (torch's slots score too): the pair's own rounding noise is far
    # below the threshold (JAX's logprobs are within 1e-4 of transformers', tests/rigs/jax, so
    # a top-2 margin within 2e-4).
    assert pair.near_tie is not None
    assert pair.margin_shift_max is not None
    assert pair.margin_shift_max < pair.threshold_nats / 4
    line = agreement_line(pair)
    assert line.startswith("jax vs torch: outputs agree (")
    assert "output agreement" in sweep.terminal
    assert "jax vs torch" in sweep.terminal
    assert "outputs agree" in sweep.terminal
    page = _text(sweep.report.read_text())
    assert "Output agreement" in page
    assert counts_words(pair) in page
    assert "of a boot's instance time" in page  # the probe's cost, per rig
    for boot in gathered.boots:
        probe = (boot.report or {})["agreement"]
        assert probe["duration_s"] > 0
        assert all(a["error"] is None for a in probe["answers"])


@pytest.mark.slow
def test_report_opens_offline_and_draws_every_plot(sweep: FinishedSweep, browser: Chromium) -> None:
    page = sweep.report.read_text()
    assert not re.search(r"<(script|link)[^>]+(src|href)=\"?https?:", page)  # nothing fetched
    text = _text(page)
    for heading in ("Sweep", "Comparison", "Plots", "Cost per million output tokens",
                    "Provenance"):  # fmt: skip
        assert f"{heading}" in text
    assert "jax, torch, torch@wrong serving random:tiny" in text
    assert "cost (spend ledger) $" in text
    assert "rigbench run --local sweep.json" in text  # the command to reproduce

    # At most 2 MB: plotly.js travels once, compressed; no more than that and the figures.
    assert sweep.report.stat().st_size <= 2_000_000
    assert page.count('id="plotly-packed"') == 1
    # The comparison carries the tails beside the medians; one date format throughout.
    for label in ("TTFT p50", "TTFT p90", "TTFT p99", "TPOT p90", "E2E p99"):
        assert label in text
    assert re.search(r"started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", text)
    assert "<thead><tr><th></th>" not in page  # no empty header row

    browser.open(sweep.report)
    marks = browser.evaluate(MARKS_JS)
    assert set(marks) == set(PLOTS), marks
    assert all(count > 0 for count in marks.values()), marks
    assert browser.errors() == []
    shot = browser.screenshot(sweep.report.with_suffix(".png"))
    assert shot.stat().st_size > 50_000
    if os.environ.get("RIGBENCH_REPORT_SHOT"):  # a copy for a person to look at
        shutil.copy(shot, os.environ["RIGBENCH_REPORT_SHOT"])


@pytest.mark.slow
def test_report_command_later_says_what_it_cannot_know(
    sweep: FinishedSweep, tmp_path: Path, browser: Chromium
) -> None:
    out = tmp_path / "again.html"
    runner = CliRunner()
    home = str(sweep.home)
    made = runner.invoke(app, ["report", SWEEP, "--local", "--home", home, "--out", str(out)])
    assert made.exit_code == 0, made.output
    assert f"report: {out}" in made.output
    text = _text(out.read_text())
    assert "execution is no longer available" in text
    assert "c=1" in text
    assert "c=2" in text

    unknown = runner.invoke(app, ["report", "no-such-sweep", "--local", "--home", home])
    assert unknown.exit_code == 2
    assert "no sweep 'no-such-sweep'" in unknown.output

    wrong_cell = runner.invoke(
        app, ["report", SWEEP, "--local", "--home", home, "--out", str(out), "--cell", "c=64"]
    )
    assert wrong_cell.exit_code == 2
    assert "no cell 'c=64' in this sweep (cells: c=1, c=2)" in wrong_cell.output

    trend = tmp_path / "trend.html"
    args = ["report", "--trend", "--rig", "torch", "--model", "random:tiny", "--local"]
    made = runner.invoke(app, [*args, "--home", home, "--out", str(trend)])
    assert made.exit_code == 0, made.output
    assert f"Only one sweep ({SWEEP}) so far" in _text(trend.read_text())
    browser.open(trend)
    assert browser.evaluate(MARKS_JS)["plot-trend"] > 0
    assert browser.errors() == []

    nothing = runner.invoke(app, [*args[:3], "vllm", *args[4:], "--home", home])
    assert nothing.exit_code == 2
    assert "no results for vllm serving random:tiny" in nothing.output


def _two_boots_each(data: SweepData, **changes: Any) -> list[Any]:
    """The sweep's boots (one per rig) and a second of each, a copy of its first, with
    `changes` (keyed rig and boot, "torch2") applied."""
    boots = [*data.boots, *(b.model_copy(update={"boot": 2}) for b in data.boots)]
    return [b.model_copy(update=changes.get(f"{b.rig}{b.boot}", {})) for b in boots]


@pytest.mark.slow
def test_two_boots_give_an_interval_named_with_its_n(gathered: SweepData) -> None:
    twice = gathered.model_copy(update={"boots": _two_boots_each(gathered)})
    comparison = comparison_of(twice, local=True)
    assert comparison is not None
    intervals = _interval_words(comparison)
    assert intervals == {"2 equal boots"}  # each boot twice: no spread, and said so
    assert "2 equal boots" in render_text(comparison, width=TERMINAL_WIDTH)


@pytest.mark.slow
def test_failed_boot_running_sweep_and_single_rig_are_said_plainly(gathered: SweepData) -> None:
    why = "RigNotReady: the rig did not answer a completion within 300 s"
    log = (
        "https://us-east-1.console.aws.amazon.com/s3/object/bucket?region=us-east-1&prefix="
        "reports/s/torch/02/arn:aws:ec2:us-east-1:1:instance/i-0abc/rig.log"
    )
    failed = gathered.model_copy(
        update={
            "status": "FAILED",
            "boots": _two_boots_each(
                gathered,
                torch2={"report": None, "outcome": "failed", "error": why, "logs": [log]},
            ),
        }
    )
    page = render_page(sweep_page(failed))
    text = _text(page)
    assert f"1 of 6 boots failed: torch boot 2: {why}" in text
    assert "Failed boots" in text
    assert "torch 1 reported, 1 failed, 2 in all" in text
    # Its logs: a link to each one its instance uploaded, and the command that prints them.
    assert f'<a href="{log.replace("&", "&amp;")}">i-0abc/rig.log</a>' in page
    assert f"rigbench logs {SWEEP} --rig torch --boot 2" in text

    running = gathered.model_copy(
        update={"status": "RUNNING", "boots": _two_boots_each(gathered, jax2={"report": None})}
    )
    text = _text(render_page(sweep_page(running)))
    assert "The sweep is still running: 5 of 6 boots have stored a report so far" in text

    alone = gathered.model_copy(
        update={"rigs": ["torch"], "boots": [b for b in gathered.boots if b.rig == "torch"]}
    )
    page = render_page(sweep_page(alone))
    assert "Only one rig (torch) has results: there is nothing to compare it with" in _text(page)
    for verdict in ("better", "worse", "noise"):  # no rig is judged: there is no other rig
        assert f'<span class="{verdict}">' not in page

    # A sweep that stored nothing has no figures: its page carries no plotting library.
    nothing = gathered.model_copy(
        update={
            "status": "FAILED",
            "boots": [
                # no report, so no rows: no phases either
                b.model_copy(update={"report": None, "outcome": "failed", "timing": None})
                for b in gathered.boots
            ],
        }
    )
    page = render_page(sweep_page(nothing))
    assert "plotly-packed" not in page
    assert len(page.encode()) < 100_000
    assert "No boot stored a report" in _text(page)

    with pytest.raises(ReportError, match="no results for torch serving nothing"):
        trend_page([], "torch", "nothing", None)
