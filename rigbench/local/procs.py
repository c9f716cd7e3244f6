"""Process groups that never outlive the run that started them.

Every process a local run starts gets its own session (so a terminal's Ctrl-C reaches only
the CLI, which then stops them in order) and a pidfile under `procs/` naming its group and
its owner. Stopping is SIGTERM to the whole group, then SIGKILL after a grace period.
Three layers make sure nothing survives:
1. the owner stops its groups on exit (`ProcessGroups.close`, from `finally`/atexit/signals);
2. a watchdog process (`rigbench.local.watchdog`) holds a pipe from the owner and stops the
   owner's groups when the pipe closes, which covers SIGKILL and crashes;
3. the next run stops the groups of any pidfile whose owner is gone (`reap_stale`).
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import psutil
from pydantic import BaseModel

from rigbench.local.home import LocalHome

DEFAULT_GRACE_S = 5.0


class PidRecord(BaseModel):
    """One process group started by a local run, as written to its pidfile."""

    pgid: int
    leader_create_time: float
    owner_pid: int
    owner_create_time: float
    label: str
    argv: list[str]
    started_at: datetime


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None


def _same_process(pid: int, create_time: float) -> bool:
    found = _create_time(pid)
    return found is not None and abs(found - create_time) < 0.01


def group_alive(pgid: int) -> bool:
    """Whether any process (zombies aside) is still in the group."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # killpg also succeeds for a group of zombies; look closer.
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return False


def kill_group(
    pgid: int, grace_s: float = DEFAULT_GRACE_S, leader: subprocess.Popen[bytes] | None = None
) -> None:
    """SIGTERM the group, wait up to `grace_s` for it to go, then SIGKILL what is left."""

    def reap_leader() -> None:
        if leader is not None:
            leader.poll()

    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            reap_leader()
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            reap_leader()
            if not group_alive(pgid):
                return
            time.sleep(0.05)
    reap_leader()


class ProcessGroups:
    """The process groups this process started, each with a pidfile; stops them all on close."""

    def __init__(self, home: LocalHome, *, watchdog: bool = True) -> None:
        self._home = home.ensure()
        self._lock = threading.Lock()
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        self._me = psutil.Process()
        self._watchdog: subprocess.Popen[bytes] | None = None
        self._closed = False
        if watchdog:
            self._watchdog = self._start_watchdog()

    def _start_watchdog(self) -> subprocess.Popen[bytes]:
        log = (self._home.root / "watchdog.log").open("ab")
        try:
            return subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "rigbench.local.watchdog",
                    str(self._home.root),
                    str(self._me.pid),
                    repr(self._me.create_time()),
                ],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env={**os.environ, "PYTHONPATH": _import_root()},
            )
        finally:
            log.close()

    def spawn(
        self,
        argv: Sequence[str],
        *,
        label: str,
        cwd: Path,
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start `argv` as the leader of a new session; stdout and stderr go to `log_path`."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            return self.spawn_split(
                argv, label=label, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env
            )

    def spawn_split(
        self,
        argv: Sequence[str],
        *,
        label: str,
        cwd: Path,
        stdout: IO[bytes],
        stderr: IO[bytes] | int,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start `argv` as the leader of a new session, with its own stdout and stderr."""
        with self._lock:
            if self._closed:
                raise RuntimeError("process groups already closed: the run is ending")
            proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=dict(env) if env is not None else None,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )
            record = PidRecord(
                pgid=proc.pid,
                leader_create_time=_create_time(proc.pid) or time.time(),
                owner_pid=self._me.pid,
                owner_create_time=self._me.create_time(),
                label=label,
                argv=list(argv),
                started_at=datetime.now(UTC),
            )
            _write_atomic(self._pidfile(proc.pid), record.model_dump_json())
            self._children[proc.pid] = proc
            return proc

    def stop(self, pgid: int, grace_s: float = DEFAULT_GRACE_S) -> None:
        """End the group `pgid` (SIGTERM, then SIGKILL) and remove its pidfile."""
        with self._lock:
            proc = self._children.pop(pgid, None)
        kill_group(pgid, grace_s, leader=proc)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=1.0)
        self._pidfile(pgid).unlink(missing_ok=True)

    def alive(self, pgid: int) -> bool:
        with self._lock:
            proc = self._children.get(pgid)
        if proc is not None and proc.poll() is not None and not group_alive(pgid):
            return False
        return group_alive(pgid)

    def live_groups(self) -> list[int]:
        with self._lock:
            return list(self._children)

    def close(self, grace_s: float = DEFAULT_GRACE_S) -> None:
        """Stop every group still running (no new ones after this), then release the watchdog."""
        with self._lock:
            self._closed = True
        for pgid in self.live_groups():
            self.stop(pgid, grace_s)
        if self._watchdog is not None and self._watchdog.stdin is not None:
            with contextlib.suppress(OSError):
                self._watchdog.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._watchdog.wait(timeout=10.0)
            self._watchdog = None

    def _pidfile(self, pgid: int) -> Path:
        return self._home.procs / f"{pgid}.json"


def read_records(home: LocalHome) -> list[tuple[Path, PidRecord | None]]:
    """Every pidfile with its record (None where the file cannot be parsed)."""
    out: list[tuple[Path, PidRecord | None]] = []
    if not home.procs.is_dir():
        return out
    for path in sorted(home.procs.glob("*.json")):
        try:
            out.append((path, PidRecord.model_validate_json(path.read_text())))
        except (OSError, ValueError):
            out.append((path, None))
    return out


def stop_recorded(path: Path, record: PidRecord, grace_s: float = DEFAULT_GRACE_S) -> bool:
    """Stop the group of one pidfile and remove the file; True if something was still running.

    A group id is only signalled when its leader is the process recorded (same create time)
    or the leader is gone but members remain: a pid is never reused while it names a group.
    """
    leader_time = _create_time(record.pgid)
    reused = leader_time is not None and abs(leader_time - record.leader_create_time) >= 0.01
    running = not reused and group_alive(record.pgid)
    if running:
        kill_group(record.pgid, grace_s)
    path.unlink(missing_ok=True)
    return running


def reap_stale(home: LocalHome, grace_s: float = DEFAULT_GRACE_S) -> list[PidRecord]:
    """Stop the groups left by runs whose owner process is gone; return what was found."""
    found: list[PidRecord] = []
    for path, record in read_records(home):
        if record is None:
            path.unlink(missing_ok=True)
            continue
        if _same_process(record.owner_pid, record.owner_create_time):
            continue  # a run still in progress owns it
        stop_recorded(path, record, grace_s)
        found.append(record)
    return found


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _import_root() -> str:
    """The directory that holds the `rigbench` package, for child interpreters."""
    root = str(Path(__file__).resolve().parents[2])
    existing = os.environ.get("PYTHONPATH")
    return f"{root}{os.pathsep}{existing}" if existing else root


def dump_records(records: Sequence[PidRecord]) -> str:
    return json.dumps([r.model_dump(mode="json") for r in records], indent=2)
