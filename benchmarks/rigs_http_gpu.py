"""Rigs over HTTP on one GPU: serve each rig in turn, `rigbench bench` every cell N times.

    python benchmarks/rigs_http_gpu.py OUT [--rigs torch,jax] [--concurrency 1,8,32,64]
        [--runs 3] [--set torch:batching=continuous ...] [--budget-s 560] [--restart jax]

For each rig: `rigbench rig serve RIG --model random:e2b --dtype bfloat16` (time to
/health 200 recorded), then for each concurrency C and run R one
`rigbench bench --concurrency C --input-len 512 --output-len 128 --requests N --warmup 4
--out OUT/RIG/cC_rR.json`, N = max(8, 2 C). Writes OUT/summary.json and OUT/summary.md
(medians over the runs of each cell) and stops a phase early when the budget runs out,
saying so in the summary. `--restart RIG`: serve the rig once more after its cells and
record the time to /health 200 again (its compilation cache now warm), its compile count and
whether it serves the same greedy tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # `python benchmarks/rigs_http_gpu.py` from the root imports rigs
METRICS = ("output_tok_s", "ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")


def _bench_cmd(base: str, model: str, c: int, out: Path) -> list[str]:
    requests = max(8, 2 * c)
    return [
        *(sys.executable, "-m", "rigbench", "bench", "--url", base, "--model", model),
        *("--concurrency", str(c), "--input-len", "512", "--output-len", "128"),
        *("--requests", str(requests), "--warmup", "4", "--out", str(out)),
    ]


def _wait_ready(proc: subprocess.Popen[bytes], base: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(1)
    return False


def _cell(report: Path) -> dict[str, float | None]:
    cell = json.loads(report.read_text())["cells"][0]
    row: dict[str, float | None] = {"output_tok_s": cell["output_tok_s"]}
    for metric in METRICS[1:]:
        row[metric] = cell[metric]["p50"]
    row["failed"] = cell["requests_failed"]
    return row


def _medians(runs: list[dict[str, float | None]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for metric in METRICS:
        values = [v for run in runs if (v := run[metric]) is not None]
        out[metric] = statistics.median(values) if values else None
    return out


def _serve(serve: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log:
        return subprocess.Popen(
            serve, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _compiles(provenance: dict[str, Any]) -> dict[str, Any]:
    keys = ("compilations", "compile_seconds", "executables_loaded", "warm_up_seconds", "batching")
    return {k: provenance[k] for k in keys if k in provenance}


def _greedy_tokens(base: str, model: str) -> list[int]:
    """The token ids of one greedy completion (a restart must serve the same ones)."""
    body = {"model": model, "prompt": "The quick brown fox", "max_tokens": 32,
            "temperature": 0, "ignore_eos": True, "return_token_ids": True}  # fmt: skip
    answer = httpx.post(f"{base}/v1/completions", json=body, timeout=300).json()
    return list(answer["choices"][0]["token_ids"])


def run_rig(
    rig: str, settings: list[str], args: argparse.Namespace, out: Path, stop_at: float
) -> dict[str, Any]:
    rig_out = out / rig
    rig_out.mkdir(parents=True, exist_ok=True)
    port = 8000
    base = f"http://127.0.0.1:{port}"
    serve = [sys.executable, "-m", "rigbench", "rig", "serve", rig, "--model", args.model]
    serve += ["--dtype", args.dtype, "--host", "127.0.0.1", "--port", str(port)]
    for setting in settings:
        serve += ["--set", setting]
    result: dict[str, Any] = {"serve": " ".join(serve[1:]), "cells": {}, "skipped": []}
    start = time.monotonic()
    proc = _serve(serve, rig_out / "server.log")
    try:
        if not _wait_ready(proc, base, stop_at):
            result["error"] = f"not ready after {time.monotonic() - start:.0f} s (see server.log)"
            return result
        result["ready_s"] = round(time.monotonic() - start, 1)
        result["provenance"] = httpx.get(f"{base}/provenance", timeout=10).json()
        result["greedy"] = _greedy_tokens(base, args.model)
        compiled = _compiles(result["provenance"])
        print(f"{rig}: ready in {result['ready_s']} s {compiled}", flush=True)
        for c in args.concurrency:
            runs = []
            for r in range(1, args.runs + 1):
                if time.monotonic() > stop_at - args.cell_reserve_s:
                    result["skipped"].append(f"c={c} run {r}")
                    continue
                report = rig_out / f"c{c}_r{r}.json"
                cmd = _bench_cmd(base, args.model, c, report)
                with (rig_out / f"c{c}_r{r}.txt").open("wb") as text:
                    subprocess.run(cmd, cwd=REPO, stdout=text, stderr=subprocess.STDOUT)
                if report.exists():
                    runs.append(_cell(report))
                    print(f"{rig} c={c} run {r}: {runs[-1]}", flush=True)
            if runs:
                result["cells"][str(c)] = {"runs": runs, "median": _medians(runs)}
        result["bench_command"] = " ".join(_bench_cmd(base, args.model, 0, Path("OUT"))[1:])
        result["provenance_after"] = httpx.get(f"{base}/provenance", timeout=10).json()
    finally:
        _stop(proc)
    if rig in args.restart:
        # Started again: the compilation caches the first start filled are now warm.
        start = time.monotonic()
        proc = _serve(serve, rig_out / "server-restart.log")
        try:
            if _wait_ready(proc, base, stop_at):
                result["ready_again_s"] = round(time.monotonic() - start, 1)
                again = httpx.get(f"{base}/provenance", timeout=10).json()
                result["ready_again"] = _compiles(again)
                result["same_greedy_again"] = _greedy_tokens(base, args.model) == result["greedy"]
                print(f"{rig}: ready again in {result['ready_again_s']} s", flush=True)
            else:
                result["ready_again_error"] = "not ready within the budget"
        finally:
            _stop(proc)
    return result


def markdown(summary: dict[str, Any]) -> str:
    lines = [
        "| rig | concurrency | runs | output tok/s (median) | runs' tok/s | TTFT p50 ms | "
        "ITL p50 ms | TPOT p50 ms | E2E p50 ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for rig, result in summary["rigs"].items():
        for c, cell in result.get("cells", {}).items():
            med = cell["median"]

            def fmt(v: float | None) -> str:
                return "" if v is None else f"{v:,.1f}"

            each = ", ".join(fmt(r["output_tok_s"]) for r in cell["runs"])
            lines.append(
                f"| {rig} | {c} | {len(cell['runs'])} | {fmt(med['output_tok_s'])} | {each} | "
                f"{fmt(med['ttft_ms'])} | {fmt(med['itl_ms'])} | {fmt(med['tpot_ms'])} | "
                f"{fmt(med['e2e_ms'])} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--rigs", default="torch,jax")
    parser.add_argument("--model", default="random:e2b")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--concurrency", default="1,8,32,64")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], help="RIG:key=value")
    parser.add_argument("--budget-s", type=float, default=560.0)
    parser.add_argument("--cell-reserve-s", type=float, default=25.0)
    parser.add_argument(
        "--restart", default="", help="rigs to start once more at the end (warm-cache ready time)"
    )
    args = parser.parse_args()
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.restart = [r for r in args.restart.split(",") if r]
    # A timeout's SIGTERM unwinds through run_rig's `finally`, which stops the rig's server
    # (started in its own session, so it would outlive this script).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    stop_at = time.monotonic() + args.budget_s
    args.out.mkdir(parents=True, exist_ok=True)

    from rigs.sources import resolve_model

    t0 = time.monotonic()
    resolve_model(args.model)
    summary: dict[str, Any] = {"prepare_s": round(time.monotonic() - t0, 1), "rigs": {}}
    for rig in args.rigs.split(","):
        settings = [s.split(":", 1)[1] for s in args.set if s.split(":", 1)[0] == rig]
        summary["rigs"][rig] = run_rig(rig, settings, args, args.out, stop_at)
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
        (args.out / "summary.md").write_text(markdown(summary))
    print(markdown(summary))


if __name__ == "__main__":
    main()
