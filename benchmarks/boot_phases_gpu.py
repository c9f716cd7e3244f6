"""Timed boots on a GPU: both rigs' phases, cold and warm ready, power and J/token, in one run.

    python3 benchmarks/boot_phases_gpu.py OUT.json [--rigs torch,jax] [--boots 1] [--restarts 1] \
        [--model random:e2b] [--home DIR] [--concurrency 1,8] [--requests N] \
        [--set RIG:KEY=VALUE ...]

Runs `rigbench run --local` as a user would (a fresh process, its own state directory), a
torch-vs-JAX sweep with `restarts_per_boot`, then reads what the sweep stored (`rigbench results`
and `rigbench compare`, JSON) and prints, per boot: each phase in seconds since launch, ready
(launch to the rig's own first real completion), start-up cost, each warm restart's ready time,
and per cell the GPU's mean power and J per output token (NVML, nvidia-ml-py: install it where
the rigs run, or the cells say why nothing was sampled); then the sweep's verdicts on time to
ready, warm ready and energy per token. OUT.json keeps the rows, the comparison and the log.
One boot per rig gives every figure but no verdict (2 boots: verdicts, about twice the time;
measured on one H100, a cold boot of either rig took about 3 minutes).

On one host, boots run one at a time (one GPU per instance) and a boot after the first finds
the caches the earlier ones left (torch's inductor cache, the JAX rig's kept programs): only
the machine's first boot of each rig is cold as on AWS, where every boot is a fresh instance.
The restarts are warm by design: the same instance, its caches in place.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SWEEP_ID = "boot-phases-gpu"


def sweep_input(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, dict[str, Any]] = {}
    for item in args.set:
        rig, _, pair = item.partition(":")
        key, _, value = pair.partition("=")
        settings.setdefault(rig, {})[key] = json.loads(value) if value[:1].isdigit() else value
    body: dict[str, Any] = {
        "sweep_id": SWEEP_ID,
        "rigs": args.rigs.split(","),
        "model": args.model,
        "boots_per_rig": args.boots,
        "restarts_per_boot": args.restarts,
        "budget_usd": 10,  # the stack's per-sweep cap
        "cells": {"concurrency": [int(c) for c in args.concurrency.split(",")]},
        "deadlines": {"ready_s": 1200, "bench_s": 2400, "instance_s": 5400},
    }
    if args.requests is not None:
        body["cells"]["requests_per_cell"] = args.requests
    if settings:
        body["rig_settings"] = settings
    return body


def rigbench(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rigbench", *argv, "--home", str(home)],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip


def boot_lines(rows: list[dict[str, Any]]) -> list[str]:
    from harness.boot_phases import PHASES, BootTiming

    lines: list[str] = []
    seen: set[tuple[str, int]] = set()
    for row in sorted(rows, key=lambda r: (r["rig"], r["boot"], r["cell"])):
        key = (row["rig"], int(row["boot"]))
        timing = BootTiming.of_row(row)
        if key not in seen:
            seen.add(key)
            phases = "  ".join(
                f"{name} {timing.phases[name]:.1f}" for name in PHASES if name in timing.phases
            )
            lines.append(f"{row['rig']} boot {row['boot']}: {phases}")
            cost = f"${timing.startup_usd:.4f}" if timing.startup_usd is not None else "unknown"
            lines.append(
                f"  ready {timing.ready_s} s, start-up cost {cost} ({timing.price_source})"
            )
            for n, warm in enumerate(timing.warm_starts, start=1):
                said = f"{warm.ready_s:.1f} s" if warm.ready_s is not None else warm.error
                lines.append(f"  warm restart {n}: ready {said}")
            for warm_cell in timing.warm_cells:
                lines.append("  " + cell_words("warm first cell", warm_cell))
        lines.append("  " + cell_words(f"c={row['metrics'].get('concurrency')}", row["metrics"]))
    return lines


def cell_words(label: str, cell: dict[str, Any]) -> str:
    gpu = cell.get("gpu") or {}
    text = f"{label}: {cell.get('output_tok_s', 0):.1f} output tok/s"
    if gpu.get("available"):
        text += (
            f", {gpu.get('mean_power_w')} W mean, {gpu.get('j_per_output_token')} J/token "
            f"({gpu.get('energy_source')}), {gpu.get('max_memory_used_mib')} MiB most"
        )
    else:
        text += f", GPU not sampled: {gpu.get('reason', 'a harness before sampling')}"
    return text


def verdict_lines(comparison: dict[str, Any]) -> list[str]:
    wanted = {"ready_s", "warm_ready_s", "startup_usd", "gpu.j_per_output_token"}
    lines = []
    for cell in comparison.get("cells", []):
        for metric in cell["metrics"]:
            if metric["metric"]["key"] not in wanted:
                continue
            for result in metric["results"]:
                agg = result.get("aggregate") or {}
                value = agg.get("value")
                shown = "no data" if value is None else f"{value:.4g} {metric['metric']['unit']}"
                boots = ", ".join("-" if b is None else f"{b:.4g}" for b in result["boots"])
                lines.append(
                    f"{metric['metric']['label']}: {result['rig']} {shown} (boots {boots}) "
                    f"{result.get('words') or 'baseline'}"
                )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="where the rows, comparison and log go (JSON)")
    parser.add_argument("--rigs", default="torch,jax", help="comma-separated (default torch,jax)")
    parser.add_argument("--boots", type=int, default=1)
    parser.add_argument("--restarts", type=int, default=1)
    parser.add_argument("--model", default="random:e2b")
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument(
        "--requests", type=int, default=None, help="per cell (default: the input's, 4 per slot)"
    )
    parser.add_argument("--home", type=Path, default=None, help="state dir (default: a temp dir)")
    parser.add_argument("--set", action="append", default=[], help="RIG:KEY=VALUE rig setting")
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="rigbench-boot-phases-"))
    sweep = home.parent / f"{home.name}-input.json"
    sweep.write_text(json.dumps(sweep_input(args)))
    t0 = time.time()
    ran = rigbench(home, "run", "--local", str(sweep))
    wall = time.time() - t0
    print(ran.stdout[-6000:])
    if ran.returncode != 0:
        print(ran.stderr[-4000:], file=sys.stderr)
    rows = json.loads(
        rigbench(home, "results", "--local", "--sweep", SWEEP_ID, "--format", "json").stdout or "[]"
    )
    compared = rigbench(home, "compare", SWEEP_ID, "--local", "--format", "json")
    comparison = json.loads(compared.stdout) if compared.returncode == 0 else {}
    print(f"rigbench run --local: exit {ran.returncode}, {wall:.1f} s wall")
    for line in boot_lines(rows) + verdict_lines(comparison):
        print(line)
    args.out.write_text(
        json.dumps(
            {
                "input": sweep_input(args),
                "exit": ran.returncode,
                "wall_s": round(wall, 1),
                "rows": rows,
                "comparison": comparison,
                "log": ran.stdout[-20000:],
            },
            indent=2,
        )
    )
    return ran.returncode


if __name__ == "__main__":
    raise SystemExit(main())
