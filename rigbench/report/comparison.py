"""A sweep's comparison (`analysis.compare.Comparison`) from what the sweep stored: the one
builder behind the terminal table of a local sweep, the report, `rigbench compare` and the
MCP `compare` tool, so all of them show the same object in the same words."""

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from analysis.agreement import PairAgreement, output_agreement, probes_from_reports
from analysis.boot_values import (
    bursts_from_reports,
    merge_values,
    shortfalls_from_reports,
    values_from_reports,
    values_from_timings,
)
from analysis.capacity import capacity_lines
from analysis.compare import NO_VERDICTS, Comparison, RigSetup, compare, rig_setup
from analysis.stats import ALPHA
from harness.boot_phases import BootTiming
from harness.schemas import BenchmarkConfig
from harness.workload import describe

if TYPE_CHECKING:
    from rigbench.report.data import SweepData

LOCAL_EMULATION = "local emulation on this machine's CPU; prices and AMIs are emulated"


def setup_of(provenance: Mapping[str, Any]) -> RigSetup | None:
    """How a boot's rig served: the settings it reported (`provenance.rig`), else the plan it
    was booted with (`provenance.boot_plan`); None when neither was stored."""
    reported = provenance.get("rig") or {}
    plan = provenance.get("boot_plan") or {}
    planned = {**(plan.get("settings") or {}), "dtype": plan.get("dtype")} if plan else {}
    merged = {**planned, **{k: v for k, v in reported.items() if v not in (None, "")}}
    return rig_setup(merged) if merged else None


def setups_of(boots: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, RigSetup]:
    """Per rig, the setup of its first boot that recorded one (every boot of a rig is planned
    alike)."""
    found: dict[str, RigSetup] = {}
    for rig, provenance in boots:
        if rig not in found and (setup := setup_of(provenance)) is not None:
            found[rig] = setup
    return found


def revision_refusal(boots: Iterable[tuple[str, Mapping[str, Any]]]) -> str:
    """Why a sweep's boots cannot be compared, when they served different model revisions (the
    commit each rig says it loaded, `provenance.model_revision`): a difference may then be the
    weights, not the runtime. "" when every boot that says served the same one."""
    served: dict[str, list[str]] = {}
    for rig, provenance in boots:
        revision = str(provenance.get("model_revision") or "unknown")
        if revision != "unknown" and rig not in served.setdefault(revision, []):
            served[revision].append(rig)
    if len(served) < 2:
        return ""
    who = "; ".join(f"{', '.join(rigs)} served {revision}" for revision, rigs in served.items())
    return (
        f"{NO_VERDICTS}: the boots served different model revisions ({who}), so a difference may "
        "be the weights, not the runtime; pin model_revision and run the sweep again"
    )


def workload_words(reports: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """What the sweep's requests asked for, in words, from its first report's config (or a
    results row's `workload`, which store.py writes); "" when neither says."""
    for boot_reports in reports.values():
        for report in boot_reports:
            if isinstance(report.get("config"), Mapping):
                config = BenchmarkConfig.model_validate(report["config"])
                words = describe(config.resolved_workload)
                return f"{words}, {config.endpoint} endpoint"
            workload = report.get("workload")
            if isinstance(workload, Mapping) and workload.get("words"):
                return f"{workload['words']}, {workload.get('endpoint', 'completions')} endpoint"
    return ""


def sweep_comparison(
    reports: Mapping[str, Sequence[Mapping[str, Any]]],
    setups: Mapping[str, RigSetup],
    *,
    local: bool,
    baseline: str | None = None,
    agreement: Sequence[PairAgreement] | None = None,
    alpha: float = ALPHA,
    refused: str = "",
    prices: Mapping[str, Sequence[float | None]] | None = None,
    timings: Mapping[str, Sequence[BootTiming | None]] | None = None,
) -> Comparison:
    """`reports[rig]`: the rig's harness reports in boot order (the baseline, unless given, is
    the first rig); `local`: the sweep ran on the local emulation, and the comparison says so;
    `agreement`: the rig pairs' output agreement, else taken from the reports' probes;
    `alpha`: the family-wise level (an adaptive sweep's: its last look's); `refused`: why no
    verdict may be given (`revision_refusal`); `prices[rig]`: each boot's price in USD per hour,
    where known (the capacity lines' cost); `timings[rig]`: each boot's phases and start
    (compared in the cell START_CELL), in the order of `reports`."""
    comparison = compare(
        merge_values(values_from_reports(reports), values_from_timings(timings or {})),
        baseline=baseline,
        setups=setups,
        emulated=LOCAL_EMULATION if local else "",
        alpha=alpha,
        bursts=bursts_from_reports(reports),
        load_short=shortfalls_from_reports(reports),
        refused=refused,
    )
    pairs = output_agreement(probes_from_reports(reports)) if agreement is None else agreement
    return comparison.model_copy(
        update={
            "output_agreement": list(pairs),
            "capacity": capacity_lines(reports, prices),
            "workload": workload_words(reports),
        }
    )


def comparison_of(data: "SweepData", *, local: bool = False) -> Comparison | None:
    """A gathered sweep's comparison (None when no boot stored a report)."""
    reports = data.reports_by_rig()
    if not reports:
        return None
    setups = setups_of((b.rig, b.provenance) for b in data.boots)
    # An adaptive sweep spent part of its error rate at the looks before the last: its table
    # is tested at the last look's level, so that all its claims together keep to 5%.
    alpha = data.rounds[-1].level if data.rounds else ALPHA
    refused = revision_refusal((b.rig, b.provenance) for b in data.boots)
    prices: dict[str, list[float | None]] = {}
    timings: dict[str, list[BootTiming | None]] = {}
    for boot in sorted(data.boots, key=lambda b: (b.rig, b.boot)):
        if boot.report is not None:  # in the order of reports_by_rig
            prices.setdefault(boot.rig, []).append(boot.price_paid)
            timings.setdefault(boot.rig, []).append(boot.timing)
    return sweep_comparison(
        reports,
        setups,
        local=local,
        alpha=alpha,
        refused=refused,
        prices=prices,
        timings=timings,
    )
