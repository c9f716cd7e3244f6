"""`rigbench demo`: the harness against the reference server, end to end, in a few seconds.

Starts the reference server as its own process on a free port, benchmarks it over loopback
at a few concurrencies, prints the results table next to the schedule the server keeps, and
stops the server, whatever happens. (The local sweep replaces this as `make sweep`'s job.)
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from harness.cli import run_and_write
from harness.output import records_path, results_table
from harness.schemas import BenchmarkConfig


@contextmanager
def reference_server_process(*args: str, nice: int = 0) -> Iterator[str]:
    """Run `python -m harness.reference_server --port 0 ARGS`; yield its URL; stop it.

    A negative `nice` raises its priority where that is allowed (a benchmark's yardstick
    should keep its schedule on a busy machine); elsewhere it runs at normal priority.
    """

    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.reference_server", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    # Set from here rather than in a preexec_fn (a fork hook, which JAX, once imported, warns
    # of); the interpreter starts its threads after this, so they inherit it.
    if nice:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, proc.pid, os.getpriority(os.PRIO_PROCESS, 0) + nice)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "listening on" not in line:
            raise RuntimeError(f"the reference server did not start: {line.strip()}")
        yield line.rsplit(" ", 1)[1].strip()
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def demo(
    out: Annotated[Path, typer.Option(help="Report path")] = Path("runs/demo/report.json"),
    ttft_ms: Annotated[float, typer.Option(help="Server's time to first token")] = 50.0,
    itl_ms: Annotated[float, typer.Option(help="Server's time between tokens")] = 20.0,
) -> None:
    """Benchmark the reference server (known schedule) and print the results table."""
    with reference_server_process("--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms)) as url:
        config = BenchmarkConfig(
            url=url,
            model="reference",
            concurrency=[4, 16, 32],
            requests=32,
            warmup=8,
            input_len=128,
            output_len=32,
        )
        report = run_and_write(config, out)
    console = Console(width=None if sys.stdout.isatty() else 160)
    console.print(results_table(report))
    console.print(
        f"The reference server's schedule: TTFT {ttft_ms:g} ms, ITL {itl_ms:g} ms, "
        f"so TPOT {itl_ms:g} ms and E2E {ttft_ms + 31 * itl_ms:g} ms for 32 tokens.\n"
        f"report: {out}  records: {records_path(out)}"
    )
    if report.interrupted:
        raise SystemExit(130)
