"""What opening the embedded stack costs: every `--local` command (`status`, `results`,
`reap`, the MCP server) opens one, and the tests open dozens per worker.

    PYTHONPATH=$PWD python -m benchmarks.emulation_start [--opens 8]

Opens and closes `local_stack` (an emulated account with template.yaml deployed, the saved
state restored) `--opens` times in one process, on an empty home. Prints the CPU seconds
(`time.process_time`, every thread of this process) and wall seconds of the first open, which
a new process pays, and the median of the later ones, which a process that already opened
one pays.
"""

import argparse
import logging
import statistics
import tempfile
import time
from pathlib import Path

from rigbench.commands.local import local_stack


def open_and_close(home: Path) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    with local_stack(home):
        pass
    return time.process_time() - cpu, time.perf_counter() - wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--opens", type=int, default=8)
    args = parser.parse_args()
    if args.opens < 1:
        parser.error(f"--opens must be at least 1 (got {args.opens})")
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as folder:
        runs = [open_and_close(Path(folder) / "home") for _ in range(args.opens)]
    (first_cpu, first_wall), later = runs[0], runs[1:]
    print(f"first open:  {first_cpu:.2f} CPU-s, {first_wall:.2f} s")
    if later:
        cpu = statistics.median(c for c, _ in later)
        wall = statistics.median(w for _, w in later)
        print(f"later opens: {cpu:.2f} CPU-s, {wall:.2f} s (median of {len(later)})")


if __name__ == "__main__":
    main()
