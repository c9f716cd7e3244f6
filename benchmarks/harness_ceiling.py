"""The harness's own edge on this machine, and GuideLLM's, against the reference server.

    python -m benchmarks.harness_ceiling [--levels 16,32,64,96,128,192,256] [--runs 3]
                                         [--workers 1] [--no-guidellm] [--httpx]
                                         [--every-level]

Level by level, each tool in turn (so both meet the same conditions on a shared machine), a
fresh reference server (first token after --ttft-ms, then one every --itl-ms, --output-len
tokens) is measured with the same load: a closed loop of `level` streams, --rounds x level
requests, after `level` warm-up requests. A tool *sustains* a level when every request
succeeds and its TTFT p50 is within 2 ms and its ITL p50 within 0.5 ms of the schedule the
server kept (its own record, /stats: from each request's arrival at its socket to its first
token, and the gaps between its writes), so the comparison stays about the clients even
where other processes delay the server. Per level it prints the errors, the concurrency
really achieved (requests in flight, time-weighted), and for rigbench its strain warning
(`harness.runner.strained_figures`: a TTFT or ITL p50 whose predicted error exceeds the
tolerance) and whether the warning was right: fired exactly when an error was beyond the
tolerance. A tool's edge is the highest token-event rate it sustained; a tool is no longer
tried after two levels in a row that it did not sustain, unless --every-level. With --runs
N the sweep is repeated and the median edge printed, with how often the warning was right
over all cells, and a table: per level, both tools side by side, the medians over the runs
of the errors and the achieved concurrency, how many runs sustained the level and how often
the warning fired.
rigbench's client CPU time per token event is printed too; --httpx reads through httpx, as
rigbench did before its lean read path (harness.http1), for comparison.
GuideLLM reports no per-gap ITL; its per-request (last - first token) / (tokens - 1) is
used (benchmarks/guidellm_runner.py, which runs it offline from its own virtualenv); when
its CLI is not installed, rigbench is measured alone and the output says so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from harness.backend import OpenAIBackend
from harness.demo import reference_server_process
from harness.runner import run_benchmark, strained_figures
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
    achieved_concurrency: float | None = None
    warned: bool | None = None  # rigbench only: its strain warning fired for this cell
    cpu_us_per_event: float | None = None  # rigbench only: client CPU time per token event

    @property
    def within_tolerance(self) -> bool:
        return (
            self.ttft_p50 is not None
            and self.itl_p50 is not None
            and abs(self.ttft_p50 - self.server_ttft_p50) <= TTFT_TOL_MS
            and abs(self.itl_p50 - self.server_gap_p50) <= ITL_TOL_MS
        )

    @property
    def sustained(self) -> bool:
        return (
            self.failed == 0
            # GuideLLM turns a request count into a time window and measures fewer: at least
            # one request per stream must have been measured.
            and self.ok >= min(self.requests, self.concurrency)
            and self.within_tolerance
        )

    @property
    def warning_right(self) -> bool | None:
        """Whether the strain warning fired exactly when an error was beyond the tolerance."""
        return None if self.warned is None else self.warned == (not self.within_tolerance)


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
    OpenAIBackend.lean_http = not args.httpx
    start, cpu = time.perf_counter(), time.process_time()
    cell = asyncio.run(run_benchmark(config)).cells[0]
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    events = (config.requests + config.warmup) * config.output_len
    first = 100 * cell.first_token_shared_reads / max(cell.requests_ok, 1)
    note = (
        f"predicted TTFT {cell.ttft_validity.predicted_error_ms.p50 or 0:+.1f} "
        f"ITL {cell.itl_validity.predicted_error_ms.p50 or 0:+.1f}; read late: "
        f"{first:.0f}% first tokens, {100 * cell.shared_read_fraction:.0f}% chunks"
    )
    return Level(
        "rigbench", level, config.requests, cell.requests_ok, cell.requests_failed,
        cell.output_tok_s, cell.ttft_ms.p50, cell.itl_ms.p50, *server_record(url), wall, note,
        cell.achieved_concurrency, bool(strained_figures(cell)), 1e6 * cpu / events,
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
        *server_record(url), wall, "", result.get("achieved_concurrency"),
    )  # fmt: skip


def print_level(row: Level) -> None:
    def err(value: float | None, kept: float) -> str:
        error = _error(value, kept)
        return "     -" if error is None else f"{error:+6.2f}"

    achieved = "-" if row.achieved_concurrency is None else f"{row.achieved_concurrency:.0f}"
    if row.warned is None:
        warning = "warning n/a"
    else:
        warning = f"warning {'FIRED' if row.warned else 'quiet'} "
        warning += "(right)" if row.warning_right else "(WRONG)"
    print(
        f"{row.tool:8s} c={row.concurrency:4d} in flight {achieved:>4s} "
        f"{row.event_rate:6.0f} ev/s ok {row.ok:4d} failed {row.failed:2d} | error TTFT p50 "
        f"{err(row.ttft_p50, row.server_ttft_p50)} ITL p50 {err(row.itl_p50, row.server_gap_p50)}"
        f" ms | {'sustained' if row.sustained else 'OFF':9s} | {warning:22s} {row.note}"
        f"{'' if row.cpu_us_per_event is None else f'; {row.cpu_us_per_event:.0f} us CPU/event'} "
        f"({row.wall_s:.0f} s, load {os.getloadavg()[0]:.1f})",
        flush=True,
    )


def sweep(
    levels: list[int],
    runners: dict[str, Callable[[str, int, argparse.Namespace], Level]],
    args: argparse.Namespace,
) -> dict[str, list[Level]]:
    """One pass over the levels, tools interleaved; each tool stops two levels past its edge."""
    schedule = ("--ttft-ms", str(args.ttft_ms), "--itl-ms", str(args.itl_ms))
    rows: dict[str, list[Level]] = {tool: [] for tool in runners}
    misses = dict.fromkeys(runners, 0)
    for level in levels:
        for tool, runner in runners.items():
            if misses[tool] >= 2 and not args.every_level:  # past this tool's edge
                continue
            with reference_server_process(*schedule, nice=args.nice - 5) as url:
                try:
                    row = runner(url, level, args)
                except Exception as exc:  # a tool that falls over at a level is off there
                    print(f"{tool:8s} c={level:4d}  failed to run: {exc}", flush=True)
                    misses[tool] += 1
                    continue
            rows[tool].append(row)
            print_level(row)
            misses[tool] = 0 if row.sustained else misses[tool] + 1
    return rows


def _median(values: list[float | None], fmt: str) -> str:
    known = [v for v in values if v is not None]
    return "-" if not known else format(statistics.median(known), fmt)


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())


def _loads() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def median_line(level: int, measured: dict[str, list[Level]]) -> str:
    """One level, each tool side by side: the medians of its errors and achieved concurrency
    over the runs that reached the level, how many runs sustained it, and for rigbench how
    often its strain warning fired and was right."""
    parts = [f"c={level:4d}"]
    for tool, found in measured.items():
        rows = [r for r in found if r.concurrency == level]
        if not rows:
            parts.append(f"{tool}: not reached")
            continue
        part = (
            f"{tool}: failed {_median([r.failed for r in rows], '.0f')}, in flight "
            f"{_median([r.achieved_concurrency for r in rows], '.1f')}, TTFT "
            f"{_median([_error(r.ttft_p50, r.server_ttft_p50) for r in rows], '+.2f')} ITL "
            f"{_median([_error(r.itl_p50, r.server_gap_p50) for r in rows], '+.2f')} ms, "
            f"sustained {sum(r.sustained for r in rows)}/{len(rows)}"
        )
        if rows[0].warned is not None:
            part += (
                f", warning fired {sum(bool(r.warned) for r in rows)}/{len(rows)} "
                f"right {sum(bool(r.warning_right) for r in rows)}/{len(rows)}"
            )
        parts.append(part)
    return " | ".join(parts)


def _error(value: float | None, kept: float) -> float | None:
    return None if value is None else value - kept


def edge(rows: list[Level]) -> Level | None:
    return max((r for r in rows if r.sustained), key=lambda r: r.event_rate, default=None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="16,32,64,96,128,192,256")
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--itl-ms", type=float, default=5.0)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2, help="requests per stream per level")
    parser.add_argument("--workers", type=int, default=1, help="rigbench client processes")
    parser.add_argument("--runs", type=int, default=1, help="sweeps; the median edge is printed")
    parser.add_argument("--no-guidellm", action="store_true")
    parser.add_argument(
        "--every-level",
        action="store_true",
        help="measure each tool at every level, also past two levels it did not sustain",
    )
    parser.add_argument(
        "--httpx",
        action="store_true",
        help="rigbench reads through httpx (the old read path; with --workers 1 only)",
    )
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
    guidellm_note = "GuideLLM not measured (--no-guidellm)"
    if not args.no_guidellm:
        from benchmarks.guidellm_runner import guidellm_executable

        try:
            guidellm_note = f"GuideLLM from {guidellm_executable()}"
            runners["guidellm"] = run_guidellm
        except FileNotFoundError as exc:
            guidellm_note = f"rigbench measured alone: {exc}"
    path = "httpx" if args.httpx else "lean"
    print(
        f"schedule: TTFT {args.ttft_ms} ms, ITL {args.itl_ms} ms, {args.output_len} tokens; "
        f"{os.cpu_count()} CPUs; {_now()}, load average {_loads()}; nice {os.nice(0)}; "
        f"rigbench workers {args.workers}, read path {path}; "
        f"{guidellm_note}. Errors: measured minus what the "
        "server kept; tolerance TTFT 2 ms, ITL 0.5 ms.",
        flush=True,
    )
    edges: dict[str, list[Level | None]] = {tool: [] for tool in runners}
    measured: dict[str, list[Level]] = {tool: [] for tool in runners}
    for run in range(args.runs):
        if args.runs > 1:
            print(f"-- run {run + 1} of {args.runs} (load average {os.getloadavg()[0]:.1f})")
        rows = sweep(levels, runners, args)
        for tool, found in rows.items():
            measured[tool] += found
            edges[tool].append(edge(found))
    judged = measured["rigbench"]

    print(
        f"\nper level, median over the runs that measured it ({_now()}, load average {_loads()}):"
    )
    for level in levels:
        print(median_line(level, measured), flush=True)
    print()
    for tool, per_run in edges.items():
        figures = ", ".join(
            "none" if top is None else f"{top.event_rate:.0f} ev/s at c={top.concurrency}"
            for top in per_run
        )
        rates = [0.0 if top is None else top.event_rate for top in per_run]
        print(f"{tool} edge per run: {figures}; median {statistics.median(rates):.0f} ev/s")
    right = sum(bool(r.warning_right) for r in judged)
    fired = sum(bool(r.warned) for r in judged)
    print(
        f"rigbench strain warning: right in {right} of {len(judged)} cells "
        f"(fired in {fired}; an error was beyond tolerance in "
        f"{sum(not r.within_tolerance for r in judged)})"
    )
    if "guidellm" in edges:
        ours = statistics.median(0.0 if t is None else t.event_rate for t in edges["rigbench"])
        theirs = statistics.median(0.0 if t is None else t.event_rate for t in edges["guidellm"])
        if theirs > 0:
            print(f"median ratio rigbench / guidellm: {ours / theirs:.2f}x")
    else:
        print(guidellm_note)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.exit(main())
