"""What `rigbench bench` prints while it runs: a line per cell as it completes, under a live
bar on a terminal (rich), plain lines when the output is piped."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from harness.schemas import BenchmarkReport, CellReport, cell_label


def cell_line(index: int, cells: int, cell: CellReport) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} ms"

    rate = "-" if cell.achieved_request_rate is None else f"{cell.achieved_request_rate:.1f}"
    where = f"cell {index}/{cells}" if index <= cells else "capacity"
    line = (
        f"{where} {cell_label(cell)}: {cell.requests_ok} ok, "
        f"{cell.requests_failed} failed, {rate} req/s, {cell.output_tok_s:.1f} out tok/s, "
        f"TTFT p50 {ms(cell.ttft_ms.p50)}, TPOT p50 {ms(cell.tpot_ms.p50)}"
    )
    if cell.meets_slo is not None:
        share = 100 * (cell.slo_attainment or 0)
        line += f", {share:.0f}% within the SLO ({'met' if cell.meets_slo else 'missed'})"
    gpu = cell.gpu
    if gpu is not None and gpu.available and gpu.mean_power_w is not None:
        per_token = gpu.j_per_output_token
        line += f", GPU {gpu.mean_power_w:.0f} W" + (
            f", {per_token:.3g} J/token" if per_token is not None else ""
        )
    if cell.first_failure:
        line += f"; first failure: {cell.first_failure}"
    return line


class CellProgress:
    """Context manager; `update` is given the report after the warm-up and after each cell."""

    def __init__(self, cells: int, console: Console) -> None:
        self._cells = cells
        self._console = console
        self._shown = 0
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        if console.is_terminal:
            self._bar = Progress(
                SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True,
            )  # fmt: skip

    def __enter__(self) -> CellProgress:
        if self._bar is not None:
            self._bar.start()
            self._task = self._bar.add_task("cells", total=self._cells)
        return self

    def __exit__(self, *_: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def update(self, report: BenchmarkReport) -> None:
        for cell in report.cells[self._shown :]:
            self._shown += 1
            self._console.print(
                cell_line(self._shown, self._cells, cell), markup=False, highlight=False,
                soft_wrap=True,
            )  # fmt: skip
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=min(self._shown, self._cells))
