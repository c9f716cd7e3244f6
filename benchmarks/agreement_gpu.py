"""Torch vs JAX greedy output agreement on one GPU: the agreement probe against each rig.

    python benchmarks/agreement_gpu.py OUT [--model random:e2b] [--dtype bfloat16]
        [--repeats 2] [--budget-s 330] [--set jax:max_slots=16 ...]

Serves the rigs one after another on the one GPU (`rigbench rig serve RIG --model M --dtype D`
on port 8000; two rigs on one GPU run out of its memory), waits for /health 200, runs the
agreement probe (harness/agreement_probe.py: 16 fixed
prompts, greedy, 32 tokens, top-2 logprobs) `--repeats` times against each, and compares
them as a sweep does (analysis.agreement.output_agreement): torch vs JAX, and each rig's
first probe against its own second (repeatability), stopping the rig before the next starts.
`--budget-s` bounds the whole run; each rig gets the time the rigs after it leave. Writes
OUT/summary.json (every probe and pair) and OUT/summary.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from analysis.agreement import PairAgreement, agreement_line, basis_words, output_agreement
from harness.agreement import AgreementProbe
from harness.agreement_probe import run_probe

REPO = Path(__file__).resolve().parent.parent
RIGS = ("torch", "jax")
PORT = 8000


def serve(rig: str, args: argparse.Namespace, log: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "rigbench", "rig", "serve", rig, "--model", args.model]
    argv += ["--dtype", args.dtype, "--host", "127.0.0.1", "--port", str(PORT)]
    for setting in args.set:
        name, _, value = setting.partition(":")
        if name == rig:
            argv += ["--set", value]
    with log.open("wb") as out:
        return subprocess.Popen(
            argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def wait_ready(proc: subprocess.Popen[bytes], base: str, deadline: float) -> bool:
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(1)
    return False


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def pair(a: tuple[str, AgreementProbe], b: tuple[str, AgreementProbe]) -> PairAgreement:
    return output_agreement({a[0]: [(1, a[1])], b[0]: [(1, b[1])]})[0]


def markdown(summary: dict[str, Any]) -> str:
    lines = ["| rigs | verdict | identical | near tie | diverged | mean first divergence | "
             "threshold (nats) | margin shift max (nats) | positions |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for name, p in summary["pairs"].items():
        mean = p["mean_first_divergence"]
        lines.append(
            f"| {name} | {p['verdict']} | {p['identical']}/{p['prompts']} | {p['near_tie']} | "
            f"{p['diverged']} | {'' if mean is None else f'{mean:.1f}'} | "
            f"{p['threshold_nats']:g} | {p['margin_shift_max']} | {p['margin_positions']} |"
        )
    lines += ["", "| rig | ready s | probe s (each run) |", "| --- | --- | --- |"]
    for rig, r in summary["rigs"].items():
        runs = ", ".join(f"{p['duration_s']:.1f}" for p in r.get("probes", []))
        lines.append(f"| {rig} | {r.get('ready_s')} | {runs} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--model", default="random:e2b")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--budget-s", type=float, default=540.0)
    parser.add_argument("--set", action="append", default=[], help="RIG:key=value")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    stop_at = time.monotonic() + args.budget_s
    args.out.mkdir(parents=True, exist_ok=True)

    from rigs.sources import resolve_model

    t0 = time.monotonic()
    resolve_model(args.model)
    summary: dict[str, Any] = {"prepare_s": round(time.monotonic() - t0, 1), "rigs": {}}
    probes: dict[str, list[AgreementProbe]] = {}
    base = f"http://127.0.0.1:{PORT}"
    for rig in RIGS:
        started = time.monotonic()
        proc = serve(rig, args, args.out / f"{rig}.log")
        try:
            if not wait_ready(proc, base, stop_at):
                summary["rigs"][rig] = {"error": "not ready within the budget (see its log)"}
                continue
            info: dict[str, Any] = {"ready_s": round(time.monotonic() - started, 1)}
            info["provenance"] = httpx.get(f"{base}/provenance", timeout=10).json()
            probes[rig] = []
            for _ in range(args.repeats):
                if probes[rig] and time.monotonic() > stop_at - 60:
                    break
                probes[rig].append(asyncio.run(run_probe(base, args.model, timeout_s=300)))
                print(f"{rig}: probe in {probes[rig][-1].duration_s:.1f} s", flush=True)
            info["probes"] = [p.model_dump(mode="json") for p in probes[rig]]
            summary["rigs"][rig] = info
        finally:
            stop(proc)
    pairs: dict[str, PairAgreement] = {}
    if len(probes.get("torch", [])) and len(probes.get("jax", [])):
        pairs["torch vs jax"] = pair(("jax", probes["jax"][0]), ("torch", probes["torch"][0]))
    for rig, runs in probes.items():
        if len(runs) > 1:
            pairs[f"{rig} vs {rig} (repeat)"] = pair((f"{rig}-1", runs[0]), (f"{rig}-2", runs[1]))
    summary["pairs"] = {name: p.model_dump(mode="json") for name, p in pairs.items()}
    for name, p in pairs.items():
        print(f"{name}: {agreement_line(p)}; {basis_words(p)}")
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    (args.out / "summary.md").write_text(markdown(summary))
    print(markdown(summary))


if __name__ == "__main__":
    main()
