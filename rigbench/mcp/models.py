"""What the MCP tools return: pydantic models, so each tool publishes an output schema and
answers with structured content. Tool inputs are typed by the models they already have
(`functions.execution_input.SweepInput`, `rigbench.stack.ResultsQuery`) or plain parameters."""

from pydantic import BaseModel, ConfigDict, Field

from analysis.agreement import PairAgreement
from analysis.compare import Comparison
from functions.regressions import Regression
from rigbench.stack.models import (
    QuotaCheck,
    ReapReport,
    ResultRow,
    StackInstance,
    SweepPlan,
    SweepProgress,
    SweepSummary,
)


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class RegressionList(_Out):
    """Regression alerts: a rig significantly worse than its own recent history (same model,
    instance type and setup) by more than its sweep's regression_ratio; oldest first."""

    regressions: list[Regression]
    method: str = Field(description="the test every alert rests on")


class Quotas(_Out):
    """The G/VT vCPU quota of both markets for one instance type."""

    instance_type: str
    spot: QuotaCheck
    on_demand: QuotaCheck


class PlanReport(_Out):
    """A dry run of a sweep input: nothing launched, nothing spent."""

    plan: SweepPlan
    budget_usd: float
    ceiling_usd: float = Field(description="the most this server lets one sweep budget")
    within_ceiling: bool
    can_start: bool = Field(description="start_sweep would start it: valid and within ceiling")
    reasons: list[str] = Field([], description="why it cannot start, if it cannot")


class SweepStart(_Out):
    """A started sweep: follow it with sweep_status(sweep_id)."""

    sweep_id: str
    execution_arn: str
    budget_usd: float
    ceiling_usd: float


class SweepStatus(_Out):
    """A sweep's status, its phase per rig and boot, and its errors in words."""

    progress: SweepProgress
    done: bool
    explained: list[str] = Field(description="one line per failure: what failed and why")


class SweepList(_Out):
    sweeps: list[SweepSummary]


class ResultsPage(_Out):
    """Results rows by Query (never Scan), oldest first; at most `limit` of `total`."""

    rows: list[ResultRow]
    total: int
    truncated: bool


class SweepComparison(_Out):
    """Every rig of a sweep against the baseline, per cell and metric: the geometric mean of
    its boots with an interval that says what it is and its n, and a verdict from Welch's
    t-test on log boot values, Holm-corrected across the sweep (5% family-wise); the same
    comparison, in the same words, as the terminal table and the report. Compact by default
    (the verdict lines); `comparison` holds every cell and metric with detail=true."""

    sweep_id: str
    baseline: str
    rigs: list[str]
    capacity: list[str] = Field(
        default=[],
        description="the answer first, per rig whose boots searched capacity: the load it "
        "carries within the SLO (geometric mean of its boots, with their interval) and its "
        "output there; the verdict between rigs is the 'capacity' cell's",
    )
    workload: str = Field(default="", description="what the requests asked for, in words")
    verdicts: list[str] = Field(
        description="each difference shown, and each comparison where no verdict is "
        "possible, one line each in the table's words; then each rig pair's output agreement"
    )
    summary: list[str] = Field(
        default=[], description="the sweep-level ranking: per rig pair, the verdicts each way"
    )
    flipped: bool = Field(description="a ranking flipped between boots somewhere")
    output_agreement: list[PairAgreement] = Field(
        default=[],
        description="per rig pair, whether the agreement probe's greedy outputs agree "
        "(analysis/agreement.py says what the verdict rests on)",
    )
    comparison: Comparison | None = Field(
        None, description="every cell, metric and rig with its interval (only with detail=true)"
    )


class ReportSummary(_Out):
    """What a sweep's report page holds, without the page itself (read `html` for it)."""

    sweep_id: str
    html: str = Field(description="the resource URI of the page (self-contained HTML)")
    size_bytes: int = Field(description="the page's size in bytes")
    title: str
    status: str = Field(description="the page's status badge, e.g. 'succeeded'")
    sections: list[str] = Field(description="the page's section headings, in order")
    verdicts: list[str] = Field(description="the comparison's decisive differences (first 20)")
    verdicts_total: int


class InstanceList(_Out):
    """Live instances this stack launched (found by its project tag)."""

    instances: list[StackInstance]


class Terminated(_Out):
    instance: StackInstance


class Reaped(_Out):
    report: ReapReport


class RigInfo(_Out):
    name: str
    description: str
    runtime: str
    version: str
    architectures: list[str]
    accelerators: list[str]
    runs_here: bool = Field(description="this machine can serve it (what --local sweeps use)")


class RigList(_Out):
    rigs: list[RigInfo]
