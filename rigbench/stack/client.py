"""The stack client: one interface to the rigbench control plane, two implementations.

    from rigbench.stack import open_stack

    with open_stack(local=True) as stack:              # or local=False: the deployed stack
        sweep = parse_sweep({"rigs": ["torch"], "model": "random:tiny", "budget_usd": 1})
        started = stack.start_sweep(sweep)
        progress = stack.follow_sweep(started.execution_arn, on_update=print)
        rows = stack.results(ResultsQuery(sweep=started.sweep_id))

Implementations:
- `rigbench.stack.aws.AwsStack`: the deployed stack, found by its CloudFormation outputs;
- `rigbench.stack.local.LocalStack`: the embedded emulation (moto + the same handlers and
  state machine, instances as local processes), state kept under `.rigbench/`.

Every method returns the pydantic models of `rigbench.stack.models`; every failure the user
can act on is a `StackError` whose message says what was wrong and what to do, except an
invalid input: `parse_sweep` refuses it, with `InvalidInput`, before a client is called.
"""

import os
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from functions.execution_input import SweepInput, parse_sweep_input
from rigbench.bundle import REPO_ROOT, rig_names
from rigbench.stack.models import (
    BootLog,
    BundleManifest,
    QuotaCheck,
    ReapReport,
    ResultRow,
    ResultsQuery,
    StackInstance,
    SweepPlan,
    SweepProgress,
    SweepStarted,
    SweepSummary,
)
from rigbench.stack_refs import StackRefs

if TYPE_CHECKING:  # the statistics (scipy) load only when regressions are read
    from functions.regressions import Regression

REPORT_URL_EXPIRES_S = 3600  # a presigned report link's life; RIGBENCH_REPORT_LINK_S sets it
REPORT_LINK_ENV = "RIGBENCH_REPORT_LINK_S"
SIGV4_MAX_EXPIRES_S = 7 * 24 * 3600  # the longest a SigV4 presigned URL may live


def report_link_expires_s(env: Mapping[str, str] | None = None) -> int:
    """How long the presigned report link `rigbench run` prints stays valid: 1 h, or
    RIGBENCH_REPORT_LINK_S seconds (1 to 7 days' worth, SigV4's limit)."""
    raw = (os.environ if env is None else env).get(REPORT_LINK_ENV, "")
    if not raw:
        return REPORT_URL_EXPIRES_S
    if not raw.isdigit() or not 1 <= int(raw) <= SIGV4_MAX_EXPIRES_S:
        raise StackError(
            f"{REPORT_LINK_ENV}={raw!r}: a presigned link lives 1 to {SIGV4_MAX_EXPIRES_S} "
            "seconds; unset it for 3600 (1 h)"
        )
    return int(raw)


# The error a stopped sweep's execution carries; its cause says who stopped it.
STOPPED_BY_USER = "StoppedByUser"


class StackError(Exception):
    """A stack operation cannot go on; the message says why and what to do."""


def parse_sweep(raw: Any) -> SweepInput:
    """Parse an execution input as the ValidateInput state will (rigs: the repository's):
    the one parse on this side, at the edge (CLI, MCP), before anything starts; InvalidInput
    names the field that is wrong. The stack client takes the parsed `SweepInput`."""
    return parse_sweep_input(raw, context={"rigs": set(rig_names(REPO_ROOT))})


@runtime_checkable
class StackClient(Protocol):
    """The rigbench control plane, deployed or emulated. Use it as a context manager (the
    local one starts and stops its emulation); methods are safe to call from one thread."""

    @property
    def kind(self) -> str:
        """ "aws" or "local"."""
        ...

    @property
    def refs(self) -> StackRefs:
        """The stack's outputs: state machine, tables, bucket."""
        ...

    def __enter__(self) -> "StackClient": ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    # -- sweeps ------------------------------------------------------------------------------
    def start_sweep(self, sweep: SweepInput, name: str | None = None) -> SweepStarted:
        """Start an execution of a parsed input (`parse_sweep`); `name` (or the input's
        sweep_id, or a timestamp) becomes the sweep id."""
        ...

    def describe_sweep(self, execution: str) -> SweepProgress:
        """One sweep's status and per rig x boot progress; `execution` is an ARN or a name."""
        ...

    def follow_sweep(
        self,
        execution: str,
        on_update: Callable[[SweepProgress], None] | None = None,
        poll_s: float | None = None,
    ) -> SweepProgress:
        """Poll `describe_sweep` (calling `on_update` with each reading) until it ends;
        returns the last reading."""
        ...

    def list_sweeps(self, limit: int = 20) -> list[SweepSummary]:
        """The most recent executions, newest first."""
        ...

    def stop_sweep(self, execution: str, by: str) -> SweepProgress:
        """Stop a running sweep: its execution ends ABORTED with error StoppedByUser and a
        cause naming `by`; its status-change handler then ends every instance of the sweep and
        bills each boot to when its instance ended. A StackError if it is not running."""
        ...

    def plan(self, sweep: SweepInput) -> SweepPlan:
        """A dry run: what a run of this input would launch and reserve (nothing is launched,
        nothing spent); `valid` is False with the reason when a run would fail."""
        ...

    def check_plan(self, sweep: SweepInput) -> SweepPlan:
        """A read-only plan: the sweep's validation, quota and budget checks evaluated against
        the stack's settings and the account as they are; writes nothing anywhere (no
        execution, no ledger item, no object, no local state)."""
        ...

    def allowed_instance_types(self) -> list[str]:
        """The instance types the stack's ValidateInput function allows."""
        ...

    # -- results -----------------------------------------------------------------------------
    def results(self, query: ResultsQuery) -> list[ResultRow]:
        """Results rows by Query (never Scan), sorted by start time."""
        ...

    def regressions(
        self, since: datetime | None = None, sweep: str | None = None
    ) -> "list[Regression]":
        """Regression alerts the sweeps raised (kept in the ledger by Summarize), of sweeps
        started since `since` (default 30 days ago), oldest first, by Query."""
        ...

    # -- instances and spend -----------------------------------------------------------------
    def instances(self) -> list[StackInstance]:
        """Live instances the stack launched (by the project tag)."""
        ...

    def terminate_instance(self, instance_id: str) -> StackInstance:
        """End one instance, only if it carries this stack's project tag (StackError if not)."""
        ...

    def reap(self, dry_run: bool = False) -> ReapReport:
        """End instances past their deadline or whose sweep ended; release the reservations of
        ended sweeps (what the scheduled reaper does). `dry_run`: list, end nothing."""
        ...

    def check_quota(self, instance_type: str, market: str = "spot") -> QuotaCheck:
        """The G/VT vCPU quota of the market, what runs, and how many of the type fit."""
        ...

    # -- reports -----------------------------------------------------------------------------
    def sweep_report(self, sweep_id: str) -> str:
        """The sweep's report page (one self-contained HTML file), as WriteReport stored it
        when the boots ended; a StackError when there is none (no such sweep, still running,
        or its report failed: the sweep's execution output says why)."""
        ...

    def report_location(self, sweep_id: str, expires_s: int = REPORT_URL_EXPIRES_S) -> str:
        """Where a person opens the sweep's report: on the deployed stack a presigned S3 GET
        URL (valid `expires_s`, or less when the credentials that signed it expire sooner),
        on the local one its file. A StackError when there is no report."""
        ...

    # -- logs --------------------------------------------------------------------------------
    def boot_logs(
        self, sweep_id: str, rig: str | None = None, boot: int | None = None
    ) -> list[BootLog]:
        """The logs each boot's instances left (only instances the ledger recorded for that
        boot), by rig, boot and launch order; `rig`/`boot` narrow them."""
        ...

    # -- bundle ------------------------------------------------------------------------------
    def upload_bundle(self, root: Path | None = None) -> BundleManifest:
        """Build the rig + harness bundle from `root` (the repository) and make it current."""
        ...
