"""What a stack client returns: plain pydantic models, the same for the deployed stack and
the embedded emulation. They hold data only; reading them from AWS lives in the clients and
in `rigbench.stack.history` (execution history -> `SweepProgress`)."""

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from functions.events import HeadlineComparison, Quota, Reservation, Round

ExecutionStatus = Literal[
    "RUNNING", "SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED", "PENDING_REDRIVE"
]
DONE: frozenset[str] = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"})


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SweepStarted(_Model):
    """A started execution of the sweep state machine; its name is the sweep id."""

    execution_arn: str
    sweep_id: str


class SweepSummary(_Model):
    """One execution, as listed."""

    sweep_id: str
    execution_arn: str
    status: str
    started_at: datetime
    stopped_at: datetime | None = None


class Phase(StrEnum):
    """Where one rig x boot is. Every state of statemachine/sweep.asl.json inside the Map
    maps to one of these (`rigbench.stack.history.STATE_PHASES`, checked by a test)."""

    QUEUED = "queued"
    LAUNCHING = "launching"
    WAITING_READY = "waiting ready"
    BENCHMARKING = "benchmarking"
    STORING = "storing"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    FAILED = "failed"


class BootProgress(_Model):
    """One rig x boot (one Map iteration) of a sweep."""

    index: int = Field(description="Map iteration index")
    rig: str = "?"
    boot: int | None = None
    phase: Phase = Phase.QUEUED
    state: str = Field("", description="the ASL state it is in, or last was")
    instance_id: str = ""
    error: str = Field("", description="the error's name if it failed, e.g. CommandFailed")
    cause: str = Field("", description="why it failed, readable (a Lambda error's message)")
    finished: bool = False
    outcome: str = Field("", description="succeeded or failed, once Finish reported")
    cost_usd: float | None = Field(None, description="what the boot cost, once reconciled")
    phase_since: datetime | None = Field(None, description="when it entered its phase")


class SweepProgress(_Model):
    """A sweep's execution: its status and one `BootProgress` per rig x boot."""

    sweep_id: str
    execution_arn: str
    status: str = "RUNNING"
    state: str = Field("starting", description="the sweep-level state it is in, or last was")
    error: str = Field("", description="the execution's error name, if it failed")
    cause: str = Field("", description="why the execution failed, readable")
    boots: list[BootProgress] = []
    output: dict[str, Any] | None = Field(None, description="the execution output, once done")
    rounds: list[Round] = Field([], description="an adaptive sweep's looks so far")
    headline: list[HeadlineComparison] = Field(
        [], description="an adaptive sweep's headline comparisons after its latest look"
    )

    @property
    def done(self) -> bool:
        return self.status in DONE


class BootLog(_Model):
    """One log a boot's instance left: its bootstrap's or its rig's."""

    rig: str
    boot: int
    instance_id: str
    name: str  # bootstrap.log, rig.log (locally: rig.log, status.json)
    location: str  # where it is kept: an s3:// URI, or a file of this machine
    text: str


class ResultsQuery(_Model):
    """Which results rows to read (by Query only): a sweep, one rig/model/type over time, or
    every row since `since` (default: 30 days ago), narrowed by the given filters."""

    sweep: str | None = None
    rig: str | None = None
    model: str | None = None
    instance_type: str | None = None
    since: datetime | None = None


class ResultRow(BaseModel):
    """One results-table row: one load cell of one boot (functions/store.py writes them).
    Fields beyond these (config_key, month, report_key, ...) are kept as they are."""

    model_config = ConfigDict(extra="allow", frozen=True)

    sweep_id: str
    row_key: str
    rig: str
    boot: int
    model: str
    instance_type: str
    cell: str
    started_at: str
    metrics: dict[str, Any] = {}
    provenance: dict[str, Any] = {}


class StackInstance(_Model):
    """An instance the stack launched (found by its project tag), live or stopping."""

    instance_id: str
    state: str
    instance_type: str
    launched_at: datetime | None = None
    sweep_id: str | None = None
    rig: str | None = None
    boot: int | None = None
    deadline: datetime | None = Field(None, description="when the reaper ends it")
    overdue: bool = False
    tags: dict[str, str] = {}


class ReapReport(_Model):
    """What a reap ended (or, in a dry run, would end)."""

    dry_run: bool
    instances: list[str] = Field([], description="instances terminated (or overdue, dry run)")
    released_sweeps: list[str] = Field(
        [], description="ended sweeps whose reservation was released"
    )


class QuotaCheck(_Model):
    """The G/VT vCPU quota of a market, what runs already, and how many of a type fit."""

    market: str
    instance_type: str
    quota_code: str
    quota_vcpus: float
    used_vcpus: int
    room_vcpus: float
    instance_vcpus: int
    fits: int


class PlannedBoot(_Model):
    rig: str
    boot: int
    instance_type: str
    market: str
    subnets: list[str] = Field(description="in the order the launch would try them")


class MonthSpend(_Model):
    """The month's spend a plan was checked against: committed (open reservations plus
    actual spend) and the stack's monthly cap."""

    month: str
    committed_usd: float
    cap_usd: float


class SweepPlan(_Model):
    """What a run of a sweep input would do (a dry run: nothing launched, nothing spent)."""

    valid: bool
    error: str = ""
    sweep: dict[str, Any] = {}
    quota: Quota | None = None
    reservation: Reservation | None = None
    month: MonthSpend | None = Field(None, description="the month's spend it was checked against")
    boots: list[PlannedBoot] = []
    planned_against: str = Field(
        "", description="whose quota, price, settings and month's spend the plan applied"
    )


class BundleManifest(_Model):
    """The rig + harness bundle instances download (bundle/current.json in the bucket)."""

    sha256: str
    key: str
    rigs: list[str]
