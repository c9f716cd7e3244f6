"""How long the local sweep (`rigbench demo`) takes here, and where the time goes.

    python benchmarks/local_sweep.py [--home DIR] [--no-waits] [-- extra rigbench demo args]

Runs the demo as a user would (a fresh process, a fresh state directory), then prints the
wall time, the machine's load, and per boot: launch -> rig ready -> harness start/end.
The target is under 3 minutes on an otherwise idle 2-core machine. `--no-waits` runs the
demo's input without its `waits` (`rigbench run --local`), as a user's input that names
none: its loops then poll at local speed (functions/poll_schedule.py).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _ts(path: Path) -> float:
    return path.stat().st_mtime


def _ready_at(rig_log: Path) -> float | None:
    """When the shared rig server logged that a real generation worked."""
    for line in rig_log.read_text(errors="replace").splitlines():
        if "rigs.serving ready:" in line:
            return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return None


def timeline(home: Path, t0: float) -> list[str]:
    rows = []
    for workspace in sorted((home / "instances").glob("i-*")):
        launch = json.loads((workspace / "instance.json").read_text())
        rig = launch["argv"][launch["argv"].index("serve") + 1]
        launched = _ts(workspace / "instance.json")
        ready = _ready_at(workspace / "rig.log")
        bench = [
            d
            for d in (workspace / "commands").glob("*")
            if "RIGBENCH_STEP=bench" in (d / "script.sh").read_text()
        ]
        line = f"{rig:6} {workspace.name}  launch +{launched - t0:6.1f} s"
        if ready is not None:
            line += f"  ready +{ready - t0:6.1f} s ({ready - launched:5.1f} s to ready)"
        if bench:
            start, end = _ts(bench[0] / "script.sh"), _ts(bench[0] / "stdout")
            line += f"  harness +{start - t0:6.1f} .. +{end - t0:6.1f} s ({end - start:5.1f} s)"
        rows.append((launched, line))
    return [line for _, line in sorted(rows)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=None, help="state dir (default: a temp dir)")
    parser.add_argument("--no-waits", action="store_true", help="the demo's input, no waits")
    parser.add_argument("extra", nargs="*", help="more arguments for rigbench demo")
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="rigbench-local-sweep-"))
    command = ["demo"]
    if args.no_waits:
        from rigbench.commands.local_sweep import demo_input, local_rigs

        body = {k: v for k, v in demo_input(local_rigs()).items() if k != "waits"}
        sweep = home.parent / f"{home.name}-input.json"
        sweep.write_text(json.dumps(body))
        command = ["run", "--local", str(sweep)]
    load_before = os.getloadavg()
    t0 = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "rigbench", *command, "--home", str(home), *args.extra],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall = time.time() - t0
    print(proc.stdout[-4000:])
    if proc.returncode != 0:
        print(proc.stderr[-4000:], file=sys.stderr)
    print(
        f"rigbench {' '.join(command)}: exit {proc.returncode}, {wall:.1f} s wall on "
        f"{os.cpu_count()} cores"
    )
    print(
        f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f} "
        "(above the core count, other work shared the machine)"
    )
    for line in timeline(home, t0):
        print("  " + line)
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
