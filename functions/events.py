"""Pydantic models of the state each Task hands its Lambda (powertools Parser parses them).

Each step's handler returns only its own small result; the Task's ResultSelector unwraps it
from the Lambda Payload and its ResultPath places it in the state (`$.instance`, `$.agent`,
...), so the state grows step by step and a Catch keeps it. `RESULT_PATHS` names the places;
the ResultSelector keys are these models' fields (a test compares them).

Top level: ValidateEvent -> SweepState (sweep, items) -> + quota -> + reservation -> Map (one
round: `items` are its boots, its outcomes go to `ran`) -> DecideRound -> NextRound (outcomes
folded into `boots`, the next round's `items`) -> Map again or on to the report.
Per rig x boot the Map iteration carries one BootState that each step adds a field to.
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from functions.execution_input import BootRounds, Scalar, SweepInput


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class BundleRef(_Model):
    """The rig + harness bundle the instances fetch; its hash goes into every result."""

    sha256: str
    key: str
    rigs: list[str]


class CellsConfig(_Model):
    """`LoadCells` as Validate accepted it."""

    concurrency: list[int]
    rates: list[float]
    requests_per_cell: int
    prompt_tokens: int
    output_tokens: int
    warmup_requests: int
    arrival: str | dict[str, float] = "poisson"


class DeadlinesConfig(_Model):
    """`Deadlines` as Validate accepted it."""

    ready_s: int
    bench_s: int
    instance_s: int


class WaitsConfig(_Model):
    """`Waits` as Validate accepted it (the Wait states read these seconds)."""

    agent_poll_s: int
    ready_poll_s: int
    command_poll_s: int
    first_poll_s: int | None = None


class SweepConfig(BootRounds, _Model):
    """The sweep as ValidateInput accepted it, every default resolved against the stack.

    Types only, no rules: the input's rules (`SweepInput`) are checked once, by ValidateInput,
    and every later Task parses this record of what was accepted. A deploy that tightens the
    rules mid-sweep then cannot make a running sweep refuse its own state. The fields mirror
    `SweepInput`'s (a test keeps the names equal); a field added to the input later needs a
    default here, for the states that were written before it."""

    sweep_id: str
    rigs: list[str]
    model: str
    model_revision: str | None = None
    instance_type: str
    boots_per_rig: int | Literal["auto"]
    max_boots_per_rig: int | None = None
    cells: CellsConfig
    # the harness's own models parse these on the instance (harness.schemas, harness.workload)
    workload: dict[str, Any] | None = None
    endpoint: Literal["completions", "chat"] = "completions"
    slo: dict[str, Any] | None = None
    capacity: dict[str, Any] | None = None
    restarts_per_boot: int = 0
    budget_usd: float
    market: Literal["spot", "on-demand", "spot-or-on-demand"]
    subnets: list[str]
    deadlines: DeadlinesConfig
    waits: WaitsConfig
    max_concurrent_sequences: int | None = None
    max_interruptions_per_boot: int
    regression_ratio: float
    rig_settings: dict[str, dict[str, Scalar]]
    bundle: BundleRef
    execution_arn: str = ""
    created_at: str

    @classmethod
    def accepted(
        cls,
        sweep: SweepInput,
        *,
        sweep_id: str,
        subnets: list[str],
        bundle: BundleRef,
        execution_arn: str,
        created_at: str,
    ) -> "SweepConfig":
        """The record of a validated input (ValidateInput builds it, once per sweep)."""
        return cls.model_validate(
            {
                **sweep.model_dump(exclude={"sweep_id", "subnets"}),
                # the cap the input resolved (named, or the most its history allows)
                "max_boots_per_rig": sweep.boots_cap() if sweep.adaptive else None,
                "sweep_id": sweep_id,
                "subnets": subnets,
                "bundle": bundle,
                "execution_arn": execution_arn,
                "created_at": created_at,
            }
        )


class BootPlan(BaseModel):
    """What one boot runs with (`functions.boot_plan.plan_boot`): planned once, by
    ValidateInput, then carried in the state."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rig: str
    instance_type: str
    arch: Literal["x86_64", "aarch64"]
    compute_capability: str | None = None  # None: a CPU (a local instance with no GPU)
    image: str  # an SSM parameter name (resolved at launch) or an AMI id
    image_source: Literal["base", "baked"]
    dtype: str
    dtype_reason: str
    settings: dict[str, Scalar]


class BootItem(_Model):
    rig: str
    boot: int
    plan: BootPlan  # ValidateInput plans each rig once; every later step reads this plan
    execution_name: str  # the boot's own execution (functions.boot_executions)


class ValidateEvent(_Model):
    input: Any = None
    execution_name: str
    execution_arn: str = ""


class Quota(_Model):
    quota_code: str
    quota_vcpus: float
    used_vcpus: int
    room_vcpus: float
    instance_vcpus: int
    max_concurrency: int


class Reservation(_Model):
    price_usd_per_hour: float  # the price read now (spot: the highest over the zones)
    price_source: str
    # Spot's MaxPrice: that price with headroom, what a boot is billed per hour (an upper
    # bound); on-demand: the list price. 0: a state written before headroom (the price).
    max_price_usd_per_hour: float = 0.0
    fallback_usd_per_hour: float = 0.0  # spot-or-on-demand: the on-demand price (0: none)
    per_boot_usd: float
    total_usd: float
    month: str


class BootOutcome(_Model):
    rig: str
    boot: int
    outcome: Literal["succeeded", "failed"]
    instance_id: str | None = None
    error: str | None = None
    cause: str | None = None
    rows: int = 0
    cost_usd: float = 0.0
    instance_seconds: float = 0.0
    interruptions: int = 0  # spot reclaims the boot was relaunched after
    interrupted_instances: list[str] = []  # the reclaimed instances (billed to their end)


class HeadlineComparison(_Model):
    """One headline comparison of an adaptive sweep (rig pair x cell x headline metric) as the
    latest look left it: `rig_a` against `rig_b`. Decided is for good: a comparison decided at a
    look keeps that look's verdict (`decided_in_round`, at `level`)."""

    cell: str  # its label: "c=1"
    metric: str
    rig_a: str
    rig_b: str
    verdict: str  # analysis.stats.Verdict's words, at the latest look (or the deciding one)
    ratio: float | None = None  # rig_a's centre over rig_b's
    p_value: float | None = None
    p_holm: float | None = None  # Holm-adjusted over the look's headline comparisons
    decided_in_round: int | None = None
    level: float | None = None  # the level of the look that decided it


class Round(_Model):
    """One look of an adaptive sweep: after `boots_per_rig` boots of every rig, the headline
    comparisons tested at `level` (this look's share of the error rate)."""

    round: int
    boots_per_rig: int
    level: float
    comparisons: int  # headline comparisons the look tested or tried to
    decided: int  # of them decided so far (at this look or an earlier one)
    boots: int  # boots run so far, every rig
    cost_usd: float  # billed so far
    stop: str = ""  # why the sweep stopped here; empty when another round followed


class SweepState(_Model):
    sweep: SweepConfig
    items: list[BootItem] = []  # this round's boots (every boot of a fixed sweep)
    quota: Quota | None = None
    reservation: Reservation | None = None
    boots: list[BootOutcome] = []  # the outcomes of the rounds before
    rounds: list[Round] = []  # an adaptive sweep's looks so far
    headline: list[HeadlineComparison] = []  # and its comparisons as the latest look left them


class Instance(_Model):
    instance_id: str
    subnet_id: str
    availability_zone: str
    image_id: str
    instance_type: str
    market: Literal["spot", "on-demand"]
    launched_at: float
    ready_deadline_at: float
    deadline_at: float
    refused: list[str] = []  # "subnet (az): error code" for every subnet that refused first
    requested_at: float | None = None  # when Launch called RunInstances (absent before phases)


class AgentCheck(_Model):
    online: bool
    checks: int = 0
    online_at: float | None = None  # when a check first saw it online (late by up to a wait)
    wait_s: int = 0  # before the next check (functions/poll_schedule.py)


class ReadyCheck(_Model):
    ready: bool = False
    probe_command_id: str | None = None
    phase: str = "unknown"
    detail: str = ""
    checks: int = 0
    wait_s: int = 0


class CommandState(_Model):
    command_id: str
    sent_at: float
    report_key: str
    status: str = "Pending"
    done: bool = False
    checks: int = 0
    wait_s: int = 0


class Stored(_Model):
    rows: int
    report_key: str


class CaughtError(_Model):
    """What a Catch with ResultPath $.error puts in the state."""

    Error: str
    Cause: str = ""


class BootState(_Model):
    sweep: SweepConfig
    reservation: Reservation
    rig: str
    boot: int
    plan: BootPlan  # image, dtype, serve settings: launched, bootstrapped and stored as is
    instance: Instance | None = None
    agent: AgentCheck | None = None
    ready: ReadyCheck | None = None
    command: CommandState | None = None
    stored: Stored | None = None
    error: CaughtError | None = None
    # Spot reclaims this boot survived so far: each relaunch is a new attempt (new ClientToken,
    # new idempotency key) under the same reservation and deadline.
    interruptions: int = 0


class ReportWritten(_Model):
    """WriteReport's result: the sweep's HTML report in the bucket."""

    key: str
    bytes: int


class SummarizeEvent(_Model):
    sweep: SweepConfig
    boots: list[BootOutcome] = Field(default_factory=list)
    # The last round's outcomes when DecideRound failed before folding them into `boots`.
    ran: list[BootOutcome] = Field(default_factory=list)
    rounds: list[Round] = Field(default_factory=list)
    headline: list[HeadlineComparison] = Field(default_factory=list)
    # What DecideRound's Catch caught: the sweep ends with its report, and fails.
    round_error: CaughtError | None = None
    # WriteReport's result, or what its Catch caught (the sweep goes on without a report).
    report: ReportWritten | CaughtError | None = None

    @property
    def outcomes(self) -> list[BootOutcome]:
        return every_outcome(self.boots, self.ran)


def every_outcome(boots: list[BootOutcome], ran: list[BootOutcome]) -> list[BootOutcome]:
    """Every boot that ran, each once: the folded rounds' `boots`, then those of the last
    round's `ran` not folded yet."""
    folded = {(b.rig, b.boot) for b in boots}
    return [*boots, *(b for b in ran if (b.rig, b.boot) not in folded)]


class DecideRoundEvent(_Model):
    sweep: SweepConfig
    reservation: Reservation
    items: list[BootItem]  # the round that just ran
    boots: list[BootOutcome] = []  # the rounds before
    ran: list[BootOutcome] = []  # this round's outcomes
    rounds: list[Round] = []
    headline: list[HeadlineComparison] = []


class Decision(_Model):
    """DecideRound's result: every outcome so far, the looks so far, and the next round's
    boots (none: the sweep goes on to its report)."""

    boots: list[BootOutcome]
    rounds: list[Round]
    headline: list[HeadlineComparison]
    items: list[BootItem]
    more: bool


class SpotInterruptionDetail(_Model):
    instance_id: str = Field(alias="instance-id")
    instance_action: str = Field(default="terminate", alias="instance-action")


class SpotInterruptionEvent(_Model):
    detail_type: str = Field(alias="detail-type")
    time: str = ""
    detail: SpotInterruptionDetail


class ExecutionStatusDetail(_Model):
    executionArn: str
    stateMachineArn: str = ""
    status: str
    name: str = ""


class ExecutionStatusChangeEvent(_Model):
    """EventBridge "Step Functions Execution Status Change" (the rule matches the ends that
    run no Finish: ABORTED, TIMED_OUT, FAILED)."""

    detail_type: str = Field(alias="detail-type")
    detail: ExecutionStatusDetail


# Which step's result goes where in the state (ResultPath), and the model it is.
RESULT_PATHS: dict[str, tuple[str, type[BaseModel]]] = {
    "CheckQuota": ("$.quota", Quota),
    "ReserveBudget": ("$.reservation", Reservation),
    "Launch": ("$.instance", Instance),
    "CheckAgent": ("$.agent", AgentCheck),
    "CheckReady": ("$.ready", ReadyCheck),
    "RunHarness": ("$.command", CommandState),
    "PollHarness": ("$.command", CommandState),
    "StoreResults": ("$.stored", Stored),
    "WriteReport": ("$.report", ReportWritten),
    "DecideRound": ("$.decision", Decision),
}
