"""Stops a local run's process groups once its owner is gone, however it went.

Started by `ProcessGroups` with a pipe on stdin; the owner never writes to it, so EOF means
the owner closed it (a normal end) or died (crash, SIGKILL). Either way, every group whose
pidfile names this owner is stopped and its pidfile removed.
Usage: python -m rigbench.local.watchdog ROOT OWNER_PID OWNER_CREATE_TIME
"""

import signal
import sys
from pathlib import Path

from rigbench.local.home import LocalHome
from rigbench.local.procs import read_records, stop_recorded


def main(argv: list[str]) -> int:
    root, owner_pid, owner_time = Path(argv[0]), int(argv[1]), float(argv[2])
    # The owner's terminal may send SIGINT/SIGHUP to everyone; outlive them to clean up.
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while sys.stdin.buffer.read(65536):
        pass
    home = LocalHome(root)
    for path, record in read_records(home):
        if record is None or record.owner_pid != owner_pid:
            continue
        if abs(record.owner_create_time - owner_time) >= 0.01:
            continue
        if stop_recorded(path, record):
            print(f"watchdog: stopped {record.label} (group {record.pgid})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
