"""The embedded stack: the emulation (moto, the same state machine and handlers, resources
from template.yaml) with instances as local processes, state under `.rigbench/`.

Executions live in the process that ran them; a session saves each one's description and
history when it ends (`rigbench.local.executions`), so a later process can show its status.
"""

import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from rich.console import Console

from functions.execution_input import HISTORY_EVENT_LIMIT, SweepInput, Waits, execution_input
from rigbench.local import executions
from rigbench.local.emulated import EmulatedAccount
from rigbench.local.home import LocalHome
from rigbench.local.procs import PidRecord
from rigbench.local.session import LocalSession
from rigbench.stack.boto import BotoStack, stop_cause
from rigbench.stack.client import REPORT_URL_EXPIRES_S, STOPPED_BY_USER, StackError
from rigbench.stack.history import fold
from rigbench.stack.models import (
    BootLog,
    ReapReport,
    SweepPlan,
    SweepProgress,
    SweepStarted,
    SweepSummary,
)
from rigbench.stack.rehearsal import plan_from

# Each poll reads the whole execution history, which the emulation serializes slowly: polls
# every 0.5 s cost a six-boot sweep's own process 70 CPU-seconds.
LOCAL_POLL_S = 2.0
PLAN_TIMEOUT_S = 300.0
# How long `rigbench stop --local` waits for the process running the sweep to take its request
# (it looks at every poll, LOCAL_POLL_S).
STOP_REQUEST_TIMEOUT_S = 30.0
# What a local instance leaves in its folder (rigbench.local.fleet): the rig's output, and the
# status its bootstrap would write (a failure there carries the rig's last lines).
LOCAL_LOGS = ("rig.log", "status.json")


# A local instance is this machine: its loops poll from 1 s on (functions/poll_schedule.py).
LOCAL_FIRST_POLL_S = 1


def at_local_speed(sweep: SweepInput) -> SweepInput:
    """A sweep whose input names no waits polls from 1 s on, the waits growing with each
    phase's age up to the cloud's intervals, where a boot's execution history still holds its
    worst case; else as given."""
    if "waits" in sweep.model_fields_set:
        return sweep
    fast = sweep.model_copy(update={"waits": Waits(first_poll_s=LOCAL_FIRST_POLL_S)})
    return fast if fast.boot_history_events() <= HISTORY_EVENT_LIMIT else sweep


class LocalStack(BotoStack):
    """A `StackClient` on the embedded emulation; enter it to start the emulation."""

    kind = "local"

    def __init__(
        self,
        home: LocalHome | Path | None = None,
        account: EmulatedAccount | None = None,
        *,
        console: Console | None = None,
        keep_results: bool = True,
        restore: bool = True,
        **session_options: Any,
    ) -> None:
        self.home = home if isinstance(home, LocalHome) else LocalHome.resolve(home)
        self.account = account or EmulatedAccount.from_env()
        self.session = LocalSession(
            self.home, self.account, console=console, keep_results=keep_results,
            restore=restore, **session_options,
        )  # fmt: skip
        self.follow_poll_s = LOCAL_POLL_S

    def __enter__(self) -> "LocalStack":
        self.session.__enter__()
        emu = self.session.emu
        super().__init__(emu.session(), emu.stack_refs())
        self.follow_poll_s = LOCAL_POLL_S
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.session.__exit__(exc_type, exc, tb)

    def client(self, service: str) -> Any:
        return self.session.emu.client(service)

    @property
    def stale(self) -> list[PidRecord]:
        """Process groups an earlier run left behind, stopped when this stack started."""
        return self.session.stale

    # -- sweeps ------------------------------------------------------------------------------
    def start_sweep(self, sweep: SweepInput, name: str | None = None) -> SweepStarted:
        # The session names it local-<time>-<random>.
        arn = self.session.start(execution_input(at_local_speed(sweep)), name=name)
        return SweepStarted(execution_arn=arn, sweep_id=arn.rsplit(":", 1)[-1])

    def _live(self, arn: str) -> bool:
        sfn = self.client("stepfunctions")
        try:
            sfn.describe_execution(executionArn=arn)
        except sfn.exceptions.ExecutionDoesNotExist:
            return False
        return True

    def describe_sweep(self, execution: str) -> SweepProgress:
        arn = self.refs.execution_arn(execution)
        if self._live(arn):
            return super().describe_sweep(execution)
        saved = executions.load(self.home.root, arn.rsplit(":", 1)[-1])
        if saved is None:
            raise StackError(
                f"no local sweep {execution!r} (see them with: rigbench status --local)"
            )
        return fold(saved.events, execution_arn=arn, described=saved.described)

    def follow_sweep(
        self,
        execution: str,
        on_update: Callable[[SweepProgress], None] | None = None,
        poll_s: float | None = None,
    ) -> SweepProgress:
        """As on AWS, and at every poll the sweep is stopped if `rigbench stop --local` (in
        another process) asked for it."""

        def update(progress: SweepProgress) -> None:
            request = self.home.stop_request(progress.sweep_id)
            if not progress.done and request.is_file():
                by = json.loads(request.read_text()).get("by", "another process")
                with contextlib.suppress(StackError):  # it ended meanwhile: its status says how
                    self.stop_sweep(progress.execution_arn, by)
                request.unlink(missing_ok=True)
            if on_update is not None:
                on_update(progress)

        return super().follow_sweep(execution, update, poll_s)

    def stop_sweep(self, execution: str, by: str) -> SweepProgress:
        """A sweep of this process: stopped here. Another process's (local executions live in
        the process that started them): asked through the home, and waited for."""
        arn = self.refs.execution_arn(execution)
        if self._live(arn):
            return super().stop_sweep(execution, by)
        sweep_id = arn.rsplit(":", 1)[-1]
        saved = executions.load(self.home.root, sweep_id)
        if saved is not None:
            raise StackError(
                f"local sweep {execution!r} is not running: it ended {saved.described['status']}"
            )
        request = self.home.stop_request(sweep_id)
        request.parent.mkdir(parents=True, exist_ok=True)
        request.write_text(json.dumps({"by": by}))
        deadline = time.monotonic() + STOP_REQUEST_TIMEOUT_S
        while request.is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        if request.is_file():
            request.unlink(missing_ok=True)
            raise StackError(
                f"no running local sweep {execution!r} took the stop request within "
                f"{STOP_REQUEST_TIMEOUT_S:g} s: is it running? (`rigbench status --local` lists "
                "the sweeps; a local sweep runs in the process that started it, and Ctrl-C there "
                "stops it too)"
            )
        return SweepProgress(
            sweep_id=sweep_id, execution_arn=arn, status="ABORTED", error=STOPPED_BY_USER,
            cause=stop_cause(by),
        )  # fmt: skip

    def list_sweeps(self, limit: int = 20) -> list[SweepSummary]:
        live = super().list_sweeps(limit)
        known = {s.sweep_id for s in live}
        saved = [
            SweepSummary(
                sweep_id=s.described["name"],
                execution_arn=s.described["executionArn"],
                status=s.described["status"],
                started_at=s.described["startDate"],
                stopped_at=s.described.get("stopDate"),
            )
            for s in executions.load_all(self.home.root)
            if s.described["name"] not in known
        ]
        return sorted(live + saved, key=lambda s: s.started_at, reverse=True)[:limit]

    def plan(self, sweep: SweepInput) -> SweepPlan:
        """Rehearse the sweep on the emulation: the real state machine and handlers with the
        emulated quota and price; every launch is recorded and refused, so nothing starts."""
        if any(s.status == "RUNNING" for s in super().list_sweeps()):
            raise StackError("a dry run refuses every launch: wait for the running sweep to end")
        fleet = self.session.fleet
        requests = fleet.rehearse()
        try:
            started = self.start_sweep(sweep)
            self.session.emu.wait(started.execution_arn, timeout_s=PLAN_TIMEOUT_S)
            events = self.history(started.execution_arn)
        finally:
            fleet.rehearse(False)
        return plan_from(events, requests).model_copy(update={"planned_against": self._against()})

    def check_plan(self, sweep: SweepInput) -> SweepPlan:
        """The read-only plan of the deployed stack, against the emulated account."""
        plan = super().check_plan(sweep)
        return plan.model_copy(update={"planned_against": self._against()})

    def _against(self) -> str:
        return (
            f"the embedded emulation (emulated quota {self.account.quota_vcpus:g} vCPU, spot "
            f"price ${self.account.spot_price_usd_per_hour:.4f}/h)"
        )

    def boot_logs(
        self, sweep_id: str, rig: str | None = None, boot: int | None = None
    ) -> list[BootLog]:
        """From each local instance's folder (what its rig wrote, and its status.json: the
        bootstrap's part locally), for the instances the ledger recorded."""
        logs = []
        for (boot_rig, boot_n), instances in self._recorded(sweep_id, rig, boot).items():
            for instance_id in instances:
                for name in LOCAL_LOGS:
                    path = self.home.instances / instance_id / name
                    if path.is_file():
                        logs.append(
                            BootLog(
                                rig=boot_rig, boot=boot_n, instance_id=instance_id, name=name,
                                location=str(path),
                                text=path.read_text(encoding="utf-8", errors="replace"),
                            )
                        )  # fmt: skip
        return logs

    def sweep_report(self, sweep_id: str) -> str:
        """What WriteReport stored in this session, else the home's report file."""
        try:
            return super().sweep_report(sweep_id)
        except StackError:
            path = self.home.report(sweep_id)
            if path.is_file():
                return path.read_text(encoding="utf-8")
            raise

    def report_location(self, sweep_id: str, expires_s: int = REPORT_URL_EXPIRES_S) -> str:
        """The home's report file (written from the bucket when the run wrote none): a URL
        into the emulation would die with it."""
        path = self.home.report(sweep_id)
        if not path.is_file():
            page = super().sweep_report(sweep_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(page, encoding="utf-8")
        return str(path)

    def reap(self, dry_run: bool = False) -> ReapReport:
        """The reaper on the emulated account, and the local processes an earlier run left
        (those were stopped when this stack started)."""
        report = super().reap(dry_run)
        left = [record.label for record in self.stale]
        return report.model_copy(update={"instances": [*left, *report.instances]})
