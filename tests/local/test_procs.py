"""Process groups end on close, on the owner's death (watchdog), and by the next run's reap."""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from rigbench.local.home import LocalHome
from rigbench.local.procs import ProcessGroups, group_alive, read_records, reap_stale

# A leader that ignores SIGTERM and has a child of its own: only SIGKILL of the group ends both.
STUBBORN = textwrap.dedent(
    """
    import signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print("up", flush=True)
    time.sleep(600)
    """
)
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def _wait_for(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def _members(pgid: int) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return out


@pytest.mark.slow
def test_stop_kills_the_whole_group_even_when_sigterm_is_ignored(tmp_path: Path) -> None:
    home = LocalHome(tmp_path)
    groups = ProcessGroups(home, watchdog=False)
    log = tmp_path / "stubborn.log"
    proc = groups.spawn(
        [sys.executable, "-c", STUBBORN], label="stubborn", cwd=tmp_path, log_path=log
    )
    _wait_for(lambda: "up" in log.read_text() and len(_members(proc.pid)) == 2)
    assert [r.label for _, r in read_records(home) if r] == ["stubborn"]
    started = time.monotonic()
    groups.stop(proc.pid, grace_s=0.5)
    assert time.monotonic() - started < 5
    assert not group_alive(proc.pid)
    assert read_records(home) == []
    groups.close()


@pytest.mark.slow
def test_close_stops_every_group(tmp_path: Path) -> None:
    home = LocalHome(tmp_path)
    groups = ProcessGroups(home)
    pgids = [
        groups.spawn(SLEEPER, label=f"s{i}", cwd=tmp_path, log_path=tmp_path / "s.log").pid
        for i in range(3)
    ]
    assert all(group_alive(p) for p in pgids)
    groups.close(grace_s=1.0)
    assert not any(group_alive(p) for p in pgids)
    assert read_records(home) == []


OWNER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from rigbench.local.home import LocalHome
    from rigbench.local.procs import ProcessGroups
    root = Path(sys.argv[1])
    groups = ProcessGroups(LocalHome(root), watchdog=sys.argv[2] == "1")
    for i in range(2):
        groups.spawn([sys.executable, "-c", "import time; time.sleep(600)"],
                     label=f"rig-{i}", cwd=root, log_path=root / "x.log")
    print("spawned", flush=True)
    time.sleep(600)
    """
)


def _owner(tmp_path: Path, watchdog: bool) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path), "1" if watchdog else "0"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert owner.stdout is not None
    assert owner.stdout.readline().strip() == "spawned"
    return owner


@pytest.mark.slow
def test_watchdog_stops_groups_when_the_owner_is_killed(tmp_path: Path) -> None:
    owner = _owner(tmp_path, watchdog=True)
    pgids = [r.pgid for _, r in read_records(LocalHome(tmp_path)) if r]
    assert len(pgids) == 2
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    _wait_for(lambda: not any(group_alive(p) for p in pgids), timeout=15)
    _wait_for(lambda: read_records(LocalHome(tmp_path)) == [], timeout=5)


@pytest.mark.slow
def test_next_run_reaps_what_a_killed_owner_left(tmp_path: Path) -> None:
    owner = _owner(tmp_path, watchdog=False)  # nothing guards these: only the reap can end them
    home = LocalHome(tmp_path)
    pgids = sorted(r.pgid for _, r in read_records(home) if r)
    assert reap_stale(home) == []  # the owner is alive: its groups are not stale
    assert all(group_alive(p) for p in pgids)
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    stale = reap_stale(home, grace_s=1.0)
    assert sorted(r.pgid for r in stale) == pgids
    assert {r.label for r in stale} == {"rig-0", "rig-1"}
    assert not any(group_alive(p) for p in pgids)
    assert read_records(home) == []


def test_reap_skips_a_reused_group_id_and_drops_garbage(tmp_path: Path) -> None:
    home = LocalHome(tmp_path).ensure()
    (home.procs / "1.json").write_text("not json")
    me = psutil.Process()
    # A record whose "leader" is this test process but with another create time: a reused pid.
    (home.procs / f"{me.pid}.json").write_text(
        f'{{"pgid": {me.pid}, "leader_create_time": 1.0, "owner_pid": 999999999,'
        ' "owner_create_time": 1.0, "label": "old", "argv": [],'
        ' "started_at": "2026-01-01T00:00:00Z"}'
    )
    stale = reap_stale(home)
    assert [r.label for r in stale] == ["old"]
    assert read_records(home) == []
    assert psutil.pid_exists(me.pid)


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path) -> object:
    yield
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            assert not str(proc.cwd()).startswith(str(tmp_path)), proc.cmdline()
