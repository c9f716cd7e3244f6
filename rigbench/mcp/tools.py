"""What each MCP tool does, as plain methods on a stack client: no MCP here (server.py
registers them). Every refusal is a `Refused` or the stack's `StackError`, its message
saying what was wrong; the server turns both into tool errors.

The spend ceiling is fixed when the server starts: `start_sweep` refuses any sweep whose
budget is above it before anything reaches the stack, so nothing is launched or reserved.
"""

import html
import re
import threading
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from analysis.agreement import agreement_line, output_agreement, probes_from_reports
from analysis.compare import Comparison
from analysis.stats import Verdict
from functions.execution_input import SweepInput
from functions.regressions import METHOD
from harness.agreement import AgreementProbe
from harness.boot_phases import BootTiming
from rigbench.mcp.models import (
    InstanceList,
    PlanReport,
    Quotas,
    Reaped,
    RegressionList,
    ReportSummary,
    ResultsPage,
    RigInfo,
    RigList,
    SweepComparison,
    SweepList,
    SweepStart,
    SweepStatus,
    Terminated,
)
from rigbench.report.comparison import revision_refusal, setups_of, sweep_comparison
from rigbench.stack import ResultRow, ResultsQuery, StackClient, SweepProgress
from rigbench.stack.models import SweepPlan

T = TypeVar("T")
STOPPED_BY_MCP = "an MCP client (rigbench mcp's stop_sweep)"


class Refused(Exception):
    """A tool call this server will not carry out; the message says why."""


def explain(progress: SweepProgress) -> list[str]:
    """One line per failure, sweep first: what failed, where, and why."""
    lines = []
    if progress.error:
        lines.append(
            f"sweep {progress.sweep_id} {progress.status.lower()} in {progress.state}: "
            f"{progress.error}: {progress.cause or 'no cause given'}"
        )
    for boot in progress.boots:
        if boot.error:
            where = f"{boot.rig} boot {boot.boot if boot.boot is not None else '?'}"
            lines.append(
                f"{where} failed in {boot.state or boot.phase} "
                f"(instance {boot.instance_id or 'none'}): {boot.error}: {boot.cause}"
            )
    return lines


def reports_from_rows(rows: list[ResultRow]) -> dict[str, list[dict[str, Any]]]:
    """Per rig, one report-shaped document per stored boot, in boot order: each row's
    `metrics` is the report cell it was stored from (functions/store.py)."""
    cells: dict[str, dict[int, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    # every row of a boot carries its workload and capacity (functions/store.py)
    boot_wide: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        cells[row.rig][row.boot].append(row.metrics)
        extra = row.model_extra or {}
        boot_wide[(row.rig, row.boot)] = {
            k: extra[k] for k in ("workload", "capacity") if extra.get(k) is not None
        }
    return {
        rig: [{"cells": by_boot[boot], **boot_wide[(rig, boot)]} for boot in sorted(by_boot)]
        for rig, by_boot in sorted(cells.items())
    }


def timings_from_rows(rows: list[ResultRow]) -> dict[str, list[BootTiming | None]]:
    """Per rig, each stored boot's phases and start (every row of a boot carries them), in the
    boot order of `reports_from_rows`."""
    boots: dict[str, dict[int, BootTiming | None]] = defaultdict(dict)
    for row in rows:
        extra = row.model_extra or {}
        found = BootTiming.of_row(extra) if extra.get("phases") else None
        boots[row.rig].setdefault(row.boot, found)
    return {rig: [by_boot[b] for b in sorted(by_boot)] for rig, by_boot in sorted(boots.items())}


def probes_from_rows(rows: list[ResultRow]) -> dict[str, list[tuple[int, AgreementProbe | None]]]:
    """Per rig, each stored boot's agreement probe (every row of a boot carries it)."""
    boots: dict[str, dict[int, Any]] = defaultdict(dict)
    for row in rows:
        boots[row.rig].setdefault(row.boot, (row.model_extra or {}).get("agreement"))
    return probes_from_reports(
        {
            rig: [{"boot": boot, "agreement": by_boot[boot]} for boot in sorted(by_boot)]
            for rig, by_boot in boots.items()
        }
    )


def verdict_lines(comparison: Comparison) -> list[str]:
    """Every rig's verdict against the baseline that is not "within noise", one line each,
    in the comparison's own words (the table's and the report's): the differences shown, and
    where no verdict was possible (and why none at all, when the boots served different model
    revisions)."""
    lines = [comparison.refused] if comparison.refused else []
    for cell in comparison.cells:
        for metric in cell.metrics:
            for result in metric.results:
                if result.verdict in (None, Verdict.INDISTINGUISHABLE):
                    continue
                spec = metric.metric
                lines.append(
                    f"{cell.cell} {spec.heading}: {result.rig} against "
                    f"{comparison.baseline}: {result.words}"
                )
    return lines


class SweepTools:
    """The tools over one open stack client. Calls reach the stack one at a time (the
    client is safe from one thread; the server runs sync tools on worker threads)."""

    def __init__(self, stack: StackClient, ceiling_usd: float) -> None:
        if ceiling_usd <= 0:
            raise ValueError(f"the spend ceiling must be above 0 USD, not {ceiling_usd}")
        self.stack = stack
        self.ceiling_usd = ceiling_usd
        self._lock = threading.Lock()

    def _call(self, fn: Callable[[], T]) -> T:
        with self._lock:
            return fn()

    # -- capacity and planning ---------------------------------------------------------------
    def check_quotas(self, instance_type: str) -> Quotas:
        return self._call(
            lambda: Quotas(
                instance_type=instance_type,
                spot=self.stack.check_quota(instance_type, "spot"),
                on_demand=self.stack.check_quota(instance_type, "on-demand"),
            )
        )

    def _ceiling_refusal(self, sweep: SweepInput) -> str:
        if sweep.budget_usd <= self.ceiling_usd:
            return ""
        return (
            f"budget_usd {sweep.budget_usd:g} is above this server's ceiling of "
            f"{self.ceiling_usd:g} USD per sweep (set when the server started with "
            f"--max-sweep-usd; a tool cannot raise it): lower budget_usd"
        )

    def runnable_rigs(self) -> list[str]:
        """The rigs a sweep on this stack can boot: on the embedded emulation, those this
        machine can serve; on the deployed stack, every rig of the repository."""
        from rigbench.commands.local_sweep import local_rigs
        from rigs.registry import discover

        return local_rigs() if self.stack.kind == "local" else sorted(discover())

    def allowed_instance_types(self) -> list[str]:
        return self._call(self.stack.allowed_instance_types)

    def _rig_refusal(self, sweep: SweepInput) -> str:
        runnable = self.runnable_rigs()
        cannot = [r for r in sweep.rigs if r not in runnable]
        if not cannot:
            return ""
        where = "this machine" if self.stack.kind == "local" else "this stack"
        return (
            f"rigs: {', '.join(cannot)} cannot run on {where} (it runs: "
            f"{', '.join(runnable) or 'none'}; see list_rigs)"
        )

    def plan_sweep(self, sweep: SweepInput) -> PlanReport:
        """Read-only: the stack's own checks against its settings and account; nothing is
        started, reserved or written (not even an execution or a report)."""
        rigs = self._rig_refusal(sweep)
        if rigs:
            plan = SweepPlan(valid=False, error=rigs)
        else:
            plan = self._call(lambda: self.stack.check_plan(sweep))
            if plan.sweep and sweep.sweep_id is None:  # named by the start that follows
                plan = plan.model_copy(update={"sweep": {**plan.sweep, "sweep_id": None}})
        reasons = [r for r in (plan.error, self._ceiling_refusal(sweep)) if r]
        return PlanReport(
            plan=plan,
            budget_usd=sweep.budget_usd,
            ceiling_usd=self.ceiling_usd,
            within_ceiling=not self._ceiling_refusal(sweep),
            can_start=not reasons,
            reasons=reasons,
        )

    # -- sweeps ------------------------------------------------------------------------------
    def start_sweep(self, sweep: SweepInput) -> SweepStart:
        refusal = self._ceiling_refusal(sweep) or self._rig_refusal(sweep)
        if refusal:
            raise Refused(f"sweep not started, nothing launched: {refusal}")
        started = self._call(lambda: self.stack.start_sweep(sweep))
        return SweepStart(
            sweep_id=started.sweep_id,
            execution_arn=started.execution_arn,
            budget_usd=sweep.budget_usd,
            ceiling_usd=self.ceiling_usd,
        )

    def sweep_status(self, sweep_id: str) -> SweepStatus:
        progress = self._call(lambda: self.stack.describe_sweep(sweep_id))
        return SweepStatus(progress=progress, done=progress.done, explained=explain(progress))

    def stop_sweep(self, sweep_id: str) -> SweepStatus:
        progress = self._call(lambda: self.stack.stop_sweep(sweep_id, STOPPED_BY_MCP))
        return SweepStatus(progress=progress, done=progress.done, explained=explain(progress))

    def list_sweeps(self, since: datetime | None, limit: int) -> SweepList:
        listed = self._call(lambda: self.stack.list_sweeps(limit))
        if since is not None:
            since = since if since.tzinfo else since.replace(tzinfo=UTC)
            listed = [s for s in listed if s.started_at >= since]
        return SweepList(sweeps=listed)

    # -- results -----------------------------------------------------------------------------
    def query_results(self, query: ResultsQuery, limit: int) -> ResultsPage:
        rows = self._call(lambda: self.stack.results(query))
        return ResultsPage(rows=rows[:limit], total=len(rows), truncated=len(rows) > limit)

    def list_regressions(self, since: datetime | None, sweep: str | None) -> RegressionList:
        if since is not None and since.tzinfo is None:
            since = since.replace(tzinfo=UTC)
        found = self._call(lambda: self.stack.regressions(since=since, sweep=sweep))
        return RegressionList(regressions=found, method=METHOD)

    def report(self, sweep_id: str) -> str:
        """The sweep's self-contained HTML report, as its WriteReport step stored it."""
        name = sweep_id.rsplit(":", 1)[-1]  # an execution ARN ends with the sweep id
        if not name or "/" in name:
            raise Refused(f"{sweep_id!r} is not a sweep id (an execution name or ARN)")
        return self._call(lambda: self.stack.sweep_report(name))

    def compare(self, sweep_id: str, baseline: str | None, detail: bool = False) -> SweepComparison:
        rows = self._call(lambda: self.stack.results(ResultsQuery(sweep=sweep_id)))
        if not rows:
            raise Refused(
                f"sweep {sweep_id!r} has no results rows (yet): see sweep_status({sweep_id!r})"
            )
        setups = setups_of((row.rig, row.provenance) for row in rows)
        local = getattr(self.stack, "kind", "") == "local"
        agreement = output_agreement(probes_from_rows(rows))
        timings = timings_from_rows(rows)
        prices = {
            rig: [t.price_usd_per_hour if t else None for t in boots]
            for rig, boots in timings.items()
        }  # what each instance paid (rows since timed boots carry it)
        try:
            comparison = sweep_comparison(
                reports_from_rows(rows), setups, local=local, baseline=baseline,
                agreement=agreement,
                refused=revision_refusal((row.rig, row.provenance) for row in rows),
                timings=timings, prices=prices,
            )  # fmt: skip
        except ValueError as exc:
            raise Refused(f"cannot compare sweep {sweep_id!r}: {exc}") from exc
        return SweepComparison(
            sweep_id=sweep_id,
            baseline=comparison.baseline,
            rigs=list(comparison.rigs),
            capacity=[c.words for c in comparison.capacity],
            workload=comparison.workload,
            verdicts=verdict_lines(comparison) + [agreement_line(p) for p in agreement],
            summary=comparison.summary,
            flipped=comparison.any_flip,
            output_agreement=agreement,
            comparison=comparison if detail else None,
        )

    def report_summary(self, sweep_id: str, html_uri: str) -> ReportSummary:
        page = self.report(sweep_id)
        title = re.search(r"<title>(.*?)</title>", page, re.S)
        status = re.search(r'<span class="badge [a-z]+">(.*?)</span>', page, re.S)
        try:
            verdicts = self.compare(sweep_id, None).verdicts
        except Refused:  # a sweep without results rows: its page says why
            verdicts = []
        return ReportSummary(
            sweep_id=sweep_id,
            html=html_uri,
            size_bytes=len(page.encode()),
            title=html.unescape(title.group(1)) if title else "",
            status=html.unescape(status.group(1)) if status else "",
            sections=[html.unescape(h) for h in re.findall(r"<h2>(.*?)</h2>", page, re.S)],
            verdicts=verdicts[:20],
            verdicts_total=len(verdicts),
        )

    # -- instances ---------------------------------------------------------------------------
    def list_instances(self) -> InstanceList:
        return InstanceList(instances=self._call(self.stack.instances))

    def terminate(self, instance_id: str) -> Terminated:
        return Terminated(instance=self._call(lambda: self.stack.terminate_instance(instance_id)))

    def reap(self, dry_run: bool) -> Reaped:
        return Reaped(report=self._call(lambda: self.stack.reap(dry_run)))

    # -- rigs --------------------------------------------------------------------------------
    def list_rigs(self) -> RigList:
        from rigbench.commands.local_sweep import local_rigs
        from rigs.registry import discover

        here = set(local_rigs())
        return RigList(
            rigs=[
                RigInfo(
                    name=name,
                    description=rig.description,
                    runtime=rig.runtime,
                    version=rig.version,
                    architectures=list(rig.architectures),
                    accelerators=list(rig.accelerators),
                    runs_here=name in here,
                )
                for name, rig in discover().items()
            ]
        )
