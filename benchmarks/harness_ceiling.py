"""The harness's own ceiling on this machine, and GuideLLM's, against the reference server.

    python -m benchmarks.harness_ceiling [--levels 16,32,64,128,256] [--no-guidellm]

For each concurrency level a fresh reference server (first token after --ttft-ms, then one
every --itl-ms) is benchmarked by rigbench's harness and then by GuideLLM, with the same load:
a closed loop of `level` streams, `--rounds` x level requests of --output-len tokens. A level
is *sustained* by a tool when every request succeeds and its figures stay on the schedule:
TTFT p50 within 2 ms and ITL p50 within 0.5 ms. The aggregate token-event rate of a level is
the output tokens the tool received per second of the cell. The ceiling of a tool is the
highest event rate (and its concurrency) it sustained; the script prints both ceilings and
their ratio. GuideLLM reports no per-gap ITL; its per-request (last - first token) / (tokens - 1)
is used (benchmarks/guidellm_runner.py). The server's own record (`/stats`: when it actually
wrote the first token and the gaps between its writes) is printed beside each level: where
the server itself slipped, the level measures the machine, not the client.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
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
    ok: int
    failed: int
    event_rate: float
    ttft_p50: float | None
    itl_p50: float | None
    server_ttft_p50: float
    server_gap_p50: float
    wall_s: float

    def sustained(self, ttft_ms: float, itl_ms: float, requests: int) -> bool:
        return (
            self.failed == 0
            # GuideLLM turns a request count into a time window and measures fewer: at least
            # one request per stream must have been measured.
            and self.ok >= min(requests, self.concurrency)
            and self.ttft_p50 is not None
            and self.itl_p50 is not None
            and abs(self.ttft_p50 - ttft_ms) <= TTFT_TOL_MS
            and abs(self.itl_p50 - itl_ms) <= ITL_TOL_MS
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
    )
    start = time.perf_counter()
    cell = asyncio.run(run_benchmark(config)).cells[0]
    wall = time.perf_counter() - start
    return Level(
        "rigbench", level, cell.requests_ok, cell.requests_failed, cell.output_tok_s,
        cell.ttft_ms.p50, cell.itl_ms.p50, *server_record(url), wall,
    )  # fmt: skip


def run_guidellm(url: str, level: int, args: argparse.Namespace) -> Level:
    from benchmarks.guidellm_runner import run_guidellm as guidellm

    start = time.perf_counter()
    result = guidellm(
        url, "reference", level, args.rounds * level, args.input_len, args.output_len,
        warmup=level, timeout_s=300,
    )  # fmt: skip
    wall = time.perf_counter() - start
    return Level(
        "guidellm", level, result["requests_ok"], result["requests_failed"],
        result["output_tok_s"], result["ttft_ms"]["p50"], result["itl_ms"]["p50"],
        *server_record(url), wall,
    )  # fmt: skip


def print_level(row: Level, args: argparse.Namespace) -> None:
    verdict = (
        "sustained"
        if row.sustained(args.ttft_ms, args.itl_ms, args.rounds * row.concurrency)
        else "OFF"
    )

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:8.2f}"

    print(
        f"{row.tool:9s} c={row.concurrency:4d}  events/s {row.event_rate:8.0f}  "
        f"ok {row.ok:5d} failed {row.failed:3d}  TTFT p50 {ms(row.ttft_p50)}  "
        f"ITL p50 {ms(row.itl_p50)}  | server TTFT {row.server_ttft_p50:7.2f} "
        f"gap {row.server_gap_p50:6.2f}  | {verdict:9s} ({row.wall_s:.0f} s)",
        flush=True,
    )


def ceiling(rows: list[Level], args: argparse.Namespace) -> Level | None:
    good = [r for r in rows if r.sustained(args.ttft_ms, args.itl_ms, args.rounds * r.concurrency)]
    return max(good, key=lambda r: r.event_rate, default=None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="16,32,64,128,256,512")
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--itl-ms", type=float, default=20.0)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2, help="requests per stream per level")
    parser.add_argument("--no-guidellm", action="store_true")
    parser.add_argument(
        "--nice",
        type=int,
        default=-10,
        help="priority for this process (and GuideLLM, its child) where allowed; the "
        "reference server runs 5 steps higher still",
    )
    args = parser.parse_args(argv)
    with contextlib.suppress(OSError):
        os.nice(args.nice)
    levels = [int(x) for x in args.levels.split(",")]
    tools = ["rigbench"] if args.no_guidellm else ["rigbench", "guidellm"]
    schedule = ("--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms))
    print(
        f"schedule: TTFT {args.ttft_ms} ms, ITL {args.itl_ms} ms, {args.output_len} tokens; "
        f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}; "
        f"nice {os.nice(0)}",
        flush=True,
    )
    rows: dict[str, list[Level]] = {tool: [] for tool in tools}
    for tool in tools:
        misses = 0
        for level in levels:
            with reference_server_process(*schedule, nice=-5) as url:
                runner = run_rigbench if tool == "rigbench" else run_guidellm
                try:
                    row = runner(url, level, args)
                except Exception as exc:  # a tool that falls over at a level is off there
                    print(f"{tool:9s} c={level:4d}  failed to run: {exc}", flush=True)
                    misses += 1
                    if misses == 2:
                        break
                    continue
            rows[tool].append(row)
            print_level(row, args)
            sustained = row.sustained(args.ttft_ms, args.itl_ms, args.rounds * level)
            misses = 0 if sustained else misses + 1
            if misses == 2:  # two levels off in a row: past the ceiling
                break

    print()
    best = {tool: ceiling(rows[tool], args) for tool in tools}
    for tool, top in best.items():
        if top is None:
            print(f"{tool}: sustained no level")
        else:
            print(
                f"{tool} ceiling: {top.event_rate:.0f} token events/s "
                f"at concurrency {top.concurrency}"
            )
    ours, theirs = best.get("rigbench"), best.get("guidellm")
    if ours is not None and theirs is not None:
        print(f"ratio rigbench / guidellm: {ours.event_rate / theirs.event_rate:.2f}x")
    elif "guidellm" in best and theirs is None and ours is not None:
        print("ratio: GuideLLM sustained no level, so the ratio is unbounded at these levels")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
