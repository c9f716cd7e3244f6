"""One local session: the embedded AWS account, the local fleet, and the state on disk.

    with LocalSession(home, account) as session:
        arn = session.start(sweep_input)
        session.emu.wait(arn)

Entering reaps what an earlier run left (processes of a dead owner), starts the process
groups and their watchdog, starts the emulation with the local fleet (resources from
template.yaml), and restores the saved tables and reports. Leaving stops running executions,
saves the tables and reports, terminates every local instance and stops the emulation,
whether the run ended, failed, or was interrupted.
"""

import atexit
import contextlib
import json
import logging
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from rich.console import Console

from functions.settings import SWEEP_REPORTS_PREFIX
from hardware.local_host import InstanceHost
from rigbench.emulation import Emulation, EnvironOverride
from rigbench.local import executions, persist
from rigbench.local.emulated import EmulatedAccount
from rigbench.local.fleet import LocalFleet, RigCommand
from rigbench.local.home import LocalHome
from rigbench.local.procs import PidRecord, ProcessGroups, reap_stale
from rigs.bootstrap.user_data import BootstrapSpec

# Handlers flush metrics to stdout, as in Lambda (for CloudWatch); not locally.
QUIET_HANDLERS = {"POWERTOOLS_METRICS_DISABLED": "true"}
# The bundle is uploaded again by every session; snapshots keep only what sweeps wrote. Sweep
# reports (megabytes each) are kept as files of the home instead (`keep_reports`).
NOT_SAVED_PREFIXES = ("bundle/", SWEEP_REPORTS_PREFIX)
# Transient tables: idempotency records only guard retries within one execution.
NOT_RESTORED_TABLE_SUFFIXES = ("IdempotencyTable",)
STOP_CAUSE = (
    "the local session ended while the sweep ran (interrupted, or its process stopped): the "
    "sweep was stopped, its local instances terminated and the rows it stored kept"
)


def rig_serve_command(spec: BootstrapSpec, port: int) -> list[str]:
    """What an instance's systemd unit runs, on a loopback port of this machine."""
    return spec.serve_argv(python=sys.executable, port=port, host="127.0.0.1")


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


@contextlib.contextmanager
def interrupts_as_keyboard_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP end the run the way Ctrl-C does: through every `finally`. So does
    SIGINT itself, also when this process was started with it ignored (an ignored signal stays
    ignored across exec, as in a pytest-xdist worker's children)."""
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.getsignal(sig) for sig in signals}
    for sig in previous:
        signal.signal(sig, _raise_interrupt)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class LocalSession:
    def __init__(
        self,
        home: LocalHome,
        account: EmulatedAccount,
        *,
        console: Console | None = None,
        keep_results: bool = True,
        restore: bool | None = None,
        rig_command: RigCommand = rig_serve_command,
        instance_host: InstanceHost = "local",
    ) -> None:
        self.home = home.ensure()
        self.account = account
        self.console = console or Console()
        self.keep_results = keep_results
        self.restore = keep_results if restore is None else restore
        self.rig_command = rig_command
        # local: boots are planned for this machine, whose processes play the instances; a
        # rehearsal of a cloud run (`--dry-run`) plans for EC2 instead
        self.instance_host = instance_host
        self.stale: list[PidRecord] = []
        # Why a sweep still running when the session ends was stopped (its saved record).
        self.stop_cause = STOP_CAUSE
        self.restored: persist.SnapshotSummary | None = None
        self._groups: ProcessGroups | None = None
        self._fleet: LocalFleet | None = None
        self.emulation: Emulation | None = None
        self._environ = EnvironOverride()
        self._redirected: list[tuple[logging.StreamHandler[Any], Any]] = []

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> "LocalSession":
        # moto's parser logs each caught failure with the whole parsed definition, werkzeug
        # every request; the handlers' own logs and metrics go to stdout as in Lambda.
        logging.getLogger("moto").setLevel(logging.CRITICAL)
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._environ.set(QUIET_HANDLERS)
        self._redirect_handler_logs()
        self.stale = reap_stale(self.home)
        for record in self.stale:
            self.console.print(
                f"[yellow]cleaned up after an earlier run:[/] stopped {record.label} "
                f"(process group {record.pgid}, started {record.started_at:%Y-%m-%d %H:%M:%S})"
            )
        self._groups = ProcessGroups(self.home)
        atexit.register(self._groups.close)
        try:
            self._fleet = LocalFleet(
                self.home, self._groups, self.rig_command, account=self.account
            )
            self.emulation = Emulation(
                fleet=self._fleet, parameters={"InstanceHost": self.instance_host}
            )
            self.emulation.start()
            if self.restore:
                self.restored = self._restore()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop executions, save results, end every local process; safe to call twice."""
        try:
            if self.emulation is not None and self.emulation.port:
                stopped: list[str] = []
                with contextlib.suppress(Exception):
                    stopped = self.emulation.stop_executions()
                if self.keep_results:
                    self.save()
                    self.save_executions(stopped)
        finally:
            try:
                if self._fleet is not None:
                    self._fleet.close()
                if self._groups is not None:
                    self._groups.close()
                    atexit.unregister(self._groups.close)
            finally:
                if self.emulation is not None:
                    self.emulation.stop()
                self._fleet = self._groups = self.emulation = None
                for handler, stream in self._redirected:
                    handler.setStream(stream).close()  # type: ignore[union-attr]
                self._redirected.clear()
                self._environ.restore()

    def _redirect_handler_logs(self) -> None:
        """The handlers' JSON logs (CloudWatch's on AWS) go to lambda.log in the state dir."""
        from functions.observability import SERVICE

        log = (self.home.root / "lambda.log").open("a")
        for handler in logging.getLogger(SERVICE).handlers:
            if isinstance(handler, logging.StreamHandler) and not isinstance(
                handler, logging.FileHandler
            ):
                if getattr(handler.stream, "closed", False):
                    # bound at import inside an in-process CLI run, whose capture has closed
                    handler.stream = sys.stdout
                self._redirected.append((handler, handler.setStream(log)))
        if not self._redirected:
            log.close()

    @property
    def fleet(self) -> LocalFleet:
        """The running fleet (an error outside the `with` block)."""
        if self._fleet is None:
            raise RuntimeError("the local session is not running")
        return self._fleet

    # -- results on disk ---------------------------------------------------------------------

    def _restore(self) -> persist.SnapshotSummary:
        emu = self.emu
        return persist.restore(
            emu.client("dynamodb"),
            emu.client("s3"),
            self.home.data,
            skip_tables=NOT_RESTORED_TABLE_SUFFIXES,
        )

    def keep_reports(self) -> None:
        """Each sweep report WriteReport stored, as the home's file unless the run wrote one."""
        s3, bucket = self.emu.client("s3"), self.emu.stack_refs().bucket
        pages = s3.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=SWEEP_REPORTS_PREFIX
        )
        for obj in (o for page in pages for o in page.get("Contents", [])):
            path = self.home.report(obj["Key"].split("/")[1])
            if not path.exists():
                body = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
                path.write_bytes(body)

    def save(self) -> persist.SnapshotSummary:
        emu = self.emu
        self.keep_reports()
        return persist.save(
            emu.client("dynamodb"),
            emu.client("s3"),
            self.home.data,
            skip_prefixes=NOT_SAVED_PREFIXES,
        )

    def save_executions(self, stopped: list[str] | None = None) -> None:
        """Each execution's description and history, for `rigbench status --local` later;
        those the session `stopped` as it ended, as stopped for its `stop_cause`."""
        emu = self.emu
        sfn = emu.client("stepfunctions")
        pages = sfn.get_paginator("list_executions")
        for page in pages.paginate(stateMachineArn=emu.state_machine_arn):
            for listed in page["executions"]:
                arn = listed["executionArn"]
                saved = executions.SavedExecution(
                    described=executions.plain(sfn.describe_execution(executionArn=arn)),
                    events=executions.plain(self.history(arn)),
                )
                if arn in (stopped or []):
                    saved = executions.as_stopped(saved, self.stop_cause)
                executions.save(self.home.root, saved.described, saved.events)

    # -- executions --------------------------------------------------------------------------

    @property
    def emu(self) -> Emulation:
        """The running emulation (an error outside the `with` block)."""
        if self.emulation is None:
            raise RuntimeError("the local session is not running")
        return self.emulation

    def start(self, sweep_input: dict[str, Any], name: str | None = None) -> str:
        """Start an execution of the sweep state machine; the sweep id is the execution name."""
        name = (
            name
            or sweep_input.get("sweep_id")
            or f"local-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        )
        body = {**sweep_input, "sweep_id": sweep_input.get("sweep_id") or name}
        return self.emu.start_execution(json.dumps(body), name=name)

    def history(self, arn: str) -> list[dict[str, Any]]:
        sfn = self.emu.client("stepfunctions")
        events: list[dict[str, Any]] = []
        for page in sfn.get_paginator("get_execution_history").paginate(executionArn=arn):
            events.extend(page["events"])
        return events


def home_for(root: Path | None) -> LocalHome:
    return LocalHome.resolve(root)
