"""The local sweep: which rigs can run here, the demo input, and the run itself."""

from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from functions.execution_input import DEFAULT_BOOTS_PER_RIG, SweepInput
from hardware.local_host import compute_capability, host_arch
from harness.schemas import cell_label
from rigbench.commands.regression_table import check_lines
from rigbench.local.emulated import EmulatedAccount
from rigbench.local.home import LocalHome
from rigbench.progress import PhaseLines, decisions_table, rounds_table, sweep_table
from rigbench.report.comparison import comparison_of, sweep_comparison
from rigbench.report.terminal import print_comparison
from rigbench.report.writer import report_after_run
from rigbench.stack import StackError, SweepProgress
from rigbench.stack.local import LocalStack
from rigs.registry import discover

DEMO_MODEL = "random:tiny"
# Small enough that two rigs x three boots (DEFAULT_BOOTS_PER_RIG: the fewest at which the test
# can decide), one boot at a time, fit in a few minutes on two busy cores.
DEMO_CELLS: dict[str, Any] = {
    "concurrency": [1, 4],
    "requests_per_cell": 6,
    "prompt_tokens": 32,
    "output_tokens": 16,
    "warmup_requests": 1,
}
# The JAX rig compiles ~30 programs before it is ready: 1-2 min on two idle cores, more if busy.
DEMO_DEADLINES = {"ready_s": 480, "bench_s": 300, "instance_s": 1200}
# polls of 5 s keep every rig there is x the default boots within Step Functions' history cap
DEMO_WAITS = {"agent_poll_s": 5, "ready_poll_s": 5, "command_poll_s": 5}


def local_rigs() -> list[str]:
    """Rigs whose definition supports this machine's architecture and an accelerator it has."""
    machine = host_arch()
    have = {"cpu"} | ({"cuda"} if compute_capability() is not None else set())
    return [
        name
        for name, rig in discover().items()
        if machine in rig.architectures and have & set(rig.accelerators)
    ]


def demo_input(rigs: list[str]) -> dict[str, Any]:
    return {
        "rigs": rigs,
        "model": DEMO_MODEL,
        "boots_per_rig": DEFAULT_BOOTS_PER_RIG,
        "budget_usd": 2.0,
        "cells": DEMO_CELLS,
        "deadlines": DEMO_DEADLINES,
        "waits": DEMO_WAITS,
    }


def run_sweep(
    sweep: SweepInput,
    *,
    home: LocalHome,
    account: EmulatedAccount,
    console: Console,
    live: bool = True,
) -> int:
    """Run one sweep on this machine; print progress and the comparison; 0 when it succeeded."""
    with LocalStack(home, account, console=console) as stack:
        restored = stack.session.restored
        if restored and restored.tables:
            rows = sum(restored.tables.values())
            console.print(f"[dim]restored {rows} stored items from {home.data}[/]")
        try:
            # What the dry run refuses (the stack's per-sweep budget, the monthly cap, quota,
            # settings) is refused here too, in one line, before an execution starts.
            plan = stack.check_plan(sweep)
            if not plan.valid:
                console.print(f"[red]error:[/] {escape(plan.error)}", soft_wrap=True)
                return 2
            started = stack.start_sweep(sweep)
        except StackError as exc:
            console.print(f"[red]error:[/] {escape(str(exc))}", soft_wrap=True)
            return 2
        sweep_id = started.sweep_id
        boots = (
            f"up to {sweep.boots_cap()} boots (auto: rounds at {sweep.looks()} per rig)"
            if sweep.adaptive
            else f"{sweep.boots_per_rig} boots"
        )
        title = f"sweep {sweep_id}: {', '.join(sweep.rigs)} x {boots}, {sweep.model}"
        if console.is_terminal:
            began = datetime.now(UTC)
            expected = sweep.boot_count()

            def table(p: SweepProgress) -> Table:
                return sweep_table(p, title, expected_boots=expected, started_at=began)

            waiting = SweepProgress(sweep_id=sweep_id, execution_arn=started.execution_arn)
            with Live(
                table(waiting),
                console=console, refresh_per_second=4, transient=False, auto_refresh=live,
            ) as view:  # fmt: skip
                progress = stack.follow_sweep(
                    started.execution_arn, on_update=lambda p: view.update(table(p))
                )
        else:  # a log: a line per change as it happens, the table once at the end
            console.print(title)
            progress = stack.follow_sweep(started.execution_arn, on_update=PhaseLines(console))
            console.print(sweep_table(progress, title))
        report_line, gathered = report_after_run(stack.session.emu, sweep_id, home.report(sweep_id))
        alerts = stack.regressions(sweep=sweep_id)
        # each boot's report as the report reads it: only from the instance recorded for it
        reports = gathered.reports_by_rig() if gathered is not None else {}
    status = progress.status
    console.print()
    if progress.rounds:
        console.print(rounds_table(progress.rounds))
        console.print(decisions_table(progress.rounds, progress.headline))
    if reports:
        comparison = comparison_of(gathered, local=True) if gathered is not None else None
        print_comparison(console, comparison or sweep_comparison(reports, {}, local=True))
        for note in failure_notes(reports):
            console.print(f"[red]{note}[/]")
    else:
        console.print("[red]no reports were stored: nothing to compare[/]")
    kept = f"{home.data} (list them with: rigbench regressions --local)"
    for line in check_lines(alerts, progress.output or {}, sweep.regression_ratio, kept):
        console.print(line)
    if status != "SUCCEEDED":
        cause = progress.cause or progress.error
        console.print(f"[red]sweep {status.lower()}:[/] {cause}")
        console.print(report_line)
        return 1
    console.print(
        f"sweep {sweep_id} succeeded; results saved in {home.data} "
        f"(see them with: rigbench results --local --sweep {sweep_id})"
    )
    console.print(report_line)
    return 0


def failure_notes(reports: dict[str, list[dict[str, Any]]]) -> list[str]:
    """One line per cell with failed requests: the harness counts them, never averages them."""
    notes = []
    for rig, boots in reports.items():
        for boot, report in enumerate(boots, start=1):
            for cell in report.get("cells", []):
                failed = int(cell.get("requests_failed") or 0)
                if not failed:
                    continue
                total = failed + int(cell.get("requests_ok") or 0)
                label = cell_label(cell)
                reasons = ", ".join(
                    f"{reason}: {count}"
                    for reason, count in (cell.get("failure_reasons") or {}).items()
                )
                first = cell.get("first_failure")
                notes.append(
                    f"{rig} boot {boot} {label}: {failed} of {total} requests failed ({reasons})"
                    + (f"; first: {first}" if first else "")
                )
    return notes
