"""The harness's own ceiling on this machine, and GuideLLM's, against the reference server.

    python -m benchmarks.harness_ceiling [--levels 8,16,32,64,128,256] [--workers 1]
                                         [--no-guidellm]

Level by level, each tool in turn (so both meet the same conditions on a shared machine), a
fresh reference server (first token after --ttft-ms, then one every --itl-ms) is measured
with the same load: a closed loop of `level` streams, --rounds x level requests of
--output-len tokens, after `level` warm-up requests. A tool *sustains* a level when every
request succeeds and its TTFT p50 is within 2 ms and its ITL p50 within 0.5 ms of the
schedule the server kept. That schedule is the server's own record (/stats: from each
request's arrival at its socket to its first token, and the gaps between its writes); on an
idle machine it is the nominal one, and where other processes delay the server, it is what
the clients were sent, so the comparison stays about the clients. Nominal deviations are
printed too. The aggregate token-event rate of a level is the output tokens a tool received
per second. A tool's ceiling is the highest event rate it sustained (with that concurrency);
a tool is no longer tried after two levels in a row that it did not sustain. GuideLLM
reports no per-gap ITL; its per-request (last - first token) / (tokens - 1) is used
(benchmarks/guidellm_runner.py, which runs it offline from its own virtualenv). rigbench also
says how many chunks it read together with an earlier one (a late read: both share one
stamp, which leaves ITL p50 right but widens p90/p99); its ceiling under the stricter rule
of at most 1% such chunks is printed as well.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from harness.demo import reference_server_process
from harness.runner import run_benchmark
from harness.schemas import BenchmarkConfig

TTFT_TOL_MS, ITL_TOL_MS = 2.0, 0.5


@dataclass
class Level:
    tool: str
    concurrency: int
    requests: int
    ok: int
    failed: int
    event_rate: float
    ttft_p50: float | None
    itl_p50: float | None
    server_ttft_p50: float
    server_gap_p50: float
    wall_s: float
    note: str = ""
    shared_reads: float | None = None  # rigbench only: share of chunks read together

    @property
    def sustained(self) -> bool:
        return (
            self.failed == 0
            # GuideLLM turns a request count into a time window and measures fewer: at least
            # one request per stream must have been measured.
            and self.ok >= min(self.requests, self.concurrency)
            and self.ttft_p50 is not None
            and self.itl_p50 is not None
            and abs(self.ttft_p50 - self.server_ttft_p50) <= TTFT_TOL_MS
            and abs(self.itl_p50 - self.server_gap_p50) <= ITL_TOL_MS
        )


def server_record(url: str) -> tuple[float, float]:
    stats = httpx.get(f"{url}/stats").json()
    return stats["observed_ttft_ms"]["p50"], stats["observed_chunk_gap_ms"]["p50"]


def run_rigbench(url: str, level: int, args: argparse.Namespace) -> Level:
    config = BenchmarkConfig(
        url=url,
        model="reference",
        concurrency=[level],
        requests=args.rounds * level,
        warmup=level,
        input_len=args.input_len,
        output_len=args.output_len,
        workers=args.workers,
    )
    start = time.perf_counter()
    cell = asyncio.run(run_benchmark(config)).cells[0]
    wall = time.perf_counter() - start
    note = (
        f"lag p99 {cell.event_loop_lag_ms.p99 or 0:.0f} ms, "
        f"{100 * cell.shared_read_fraction:.1f}% chunks read together"
    )
    return Level(
        "rigbench", level, config.requests, cell.requests_ok, cell.requests_failed,
        cell.output_tok_s, cell.ttft_ms.p50, cell.itl_ms.p50, *server_record(url), wall, note,
        cell.shared_read_fraction,
    )  # fmt: skip


def run_guidellm(url: str, level: int, args: argparse.Namespace) -> Level:
    from benchmarks.guidellm_runner import run_guidellm as guidellm

    requests = args.rounds * level
    start = time.perf_counter()
    result = guidellm(
        url, "reference", level, requests, args.input_len, args.output_len,
        warmup=level, timeout_s=300,
    )  # fmt: skip
    wall = time.perf_counter() - start
    return Level(
        "guidellm", level, requests, result["requests_ok"], result["requests_failed"],
        result["output_tok_s"], result["ttft_ms"]["p50"], result["itl_ms"]["p50"],
        *server_record(url), wall,
    )  # fmt: skip


def print_level(row: Level, args: argparse.Namespace) -> None:
    def ms(value: float | None, nominal: float) -> str:
        return "       -        " if value is None else f"{value:7.2f} ({value - nominal:+5.2f})"

    print(
        f"{row.tool:8s} c={row.concurrency:4d} {row.event_rate:7.0f} ev/s  ok {row.ok:4d} "
        f"failed {row.failed:2d}  TTFT p50 {ms(row.ttft_p50, row.server_ttft_p50)}  "
        f"ITL p50 {ms(row.itl_p50, row.server_gap_p50)}  | server kept TTFT "
        f"{row.server_ttft_p50:6.2f} ({row.server_ttft_p50 - args.ttft_ms:+.2f}) "
        f"gap {row.server_gap_p50:6.2f}  | {'sustained' if row.sustained else 'OFF':9s} "
        f"{row.note} ({row.wall_s:.0f} s, load {os.getloadavg()[0]:.1f})",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="8,16,32,64,128,256")
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=20.0)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2, help="requests per stream per level")
    parser.add_argument("--workers", type=int, default=1, help="rigbench client processes")
    parser.add_argument("--no-guidellm", action="store_true")
    parser.add_argument(
        "--nice",
        type=int,
        default=-10,
        help="priority of this process and of GuideLLM, its child, where allowed (equal for "
        "both tools); the reference server runs 5 steps above it",
    )
    args = parser.parse_args(argv)
    with contextlib.suppress(OSError):
        os.nice(args.nice)
    levels = [int(x) for x in args.levels.split(",")]
    runners: dict[str, Callable[[str, int, argparse.Namespace], Level]] = {"rigbench": run_rigbench}
    if not args.no_guidellm:
        runners["guidellm"] = run_guidellm
    schedule = ("--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms))
    print(
        f"schedule: TTFT {args.ttft_ms} ms, ITL {args.itl_ms} ms, {args.output_len} tokens; "
        f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}; nice {os.nice(0)}; "
        f"rigbench workers {args.workers}. Figures: measured (minus what the server kept).",
        flush=True,
    )
    rows: dict[str, list[Level]] = {tool: [] for tool in runners}
    misses = dict.fromkeys(runners, 0)
    for level in levels:
        for tool, runner in runners.items():
            if misses[tool] >= 2:  # two levels off in a row: past this tool's ceiling
                continue
            with reference_server_process(*schedule, nice=args.nice - 5) as url:
                try:
                    row = runner(url, level, args)
                except Exception as exc:  # a tool that falls over at a level is off there
                    print(f"{tool:8s} c={level:4d}  failed to run: {exc}", flush=True)
                    misses[tool] += 1
                    continue
            rows[tool].append(row)
            print_level(row, args)
            misses[tool] = 0 if row.sustained else misses[tool] + 1

    print()
    best = {
        tool: max((r for r in found if r.sustained), key=lambda r: r.event_rate, default=None)
        for tool, found in rows.items()
    }
    for tool, top in best.items():
        if top is None:
            print(f"{tool}: sustained no level")
        else:
            print(
                f"{tool} ceiling: {top.event_rate:.0f} token events/s "
                f"at concurrency {top.concurrency}"
            )
    strict = max(
        (r for r in rows["rigbench"] if r.sustained and (r.shared_reads or 0.0) <= 0.01),
        key=lambda r: r.event_rate,
        default=None,
    )
    if strict is not None:
        print(
            f"rigbench ceiling with at most 1% of chunks read together (ITL p90/p99 clean "
            f"too): {strict.event_rate:.0f} token events/s at concurrency {strict.concurrency}"
        )
    ours, theirs = best.get("rigbench"), best.get("guidellm")
    if ours is not None and theirs is not None:
        print(f"ratio rigbench / guidellm: {ours.event_rate / theirs.event_rate:.2f}x")
    elif "guidellm" in best and theirs is None and ours is not None:
        print("ratio: GuideLLM sustained no level tried, so no ratio; try lower --levels")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
