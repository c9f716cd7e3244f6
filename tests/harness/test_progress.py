"""What `rigbench bench` shows while it runs: a line per finished cell, plain when piped, under
a live bar on a terminal."""

import io

from rich.console import Console

from harness.metrics import cell_report
from harness.progress import CellProgress
from harness.schemas import BenchmarkConfig, BenchmarkReport
from tests.harness.test_metrics import streamed


def report_with(cells: int) -> BenchmarkReport:
    return BenchmarkReport(
        harness_version="test", url="http://x", model="m", started_at="now",
        endpoint="completions", config=BenchmarkConfig(url="http://x", model="m"),
        cells=[cell_report([streamed(0.0)], concurrency=c + 1) for c in range(cells)],
        harness_ceiling_note="",
    )  # fmt: skip


def shown(terminal: bool) -> str:
    out = io.StringIO()
    console = Console(file=out, force_terminal=terminal, width=120)
    with CellProgress(2, console) as progress:
        progress.update(report_with(0))  # after the warm-up: nothing yet
        progress.update(report_with(1))
        progress.update(report_with(2))
    return out.getvalue()


def test_piped_output_is_one_plain_line_per_cell() -> None:
    lines = shown(terminal=False).splitlines()
    assert [line.split(":")[0] for line in lines] == ["cell 1/2 c=1", "cell 2/2 c=2"]
    assert "1 ok, 0 failed" in lines[0]
    assert "\x1b[" not in "".join(lines)  # no escape codes in a pipe


def test_a_terminal_gets_the_same_lines_under_a_live_bar() -> None:
    text = shown(terminal=True)
    assert "cell 1/2 c=1: 1 ok" in text
    assert "cell 2/2 c=2: 1 ok" in text
    assert "cells" in text  # the bar, drawn (and cleared at the end: it is transient)
    assert "cells" not in shown(terminal=False)
