"""The JAX rig's decode step alone, for kernel work: no server, no checkpoint, one program.

    python benchmarks/jax_decode_step.py OUT.json                       # GPU: random:e2b
    python benchmarks/jax_decode_step.py OUT.json --widths 1,32 --variants xla,cmdbuf
    python benchmarks/jax_decode_step.py OUT.json --model tiny --quick  # CPU smoke run

For each variant (a child process each, since XLA reads its flags once per process) and each
width: random weights made on the device from the model's config (rigs/configs/), a KV cache
of `width` slots, the engine's own `steps.decode_chunk` compiled for that width and one
context bucket (greedy), then `--reps` timed runs of `--chunks` chunks; the median is quoted.
Printed and written per row: compile seconds, ms per step, tok/s, kernels in the program,
bytes a step must read (weights streamed, less the gathered per-layer embedding table, plus
the KV rows attention reads) and the bandwidth that implies, against the measured copy
bandwidth (read + write of a 1 GiB buffer).

Variants: `xla` (the rig's default path), `cmdbuf` (XLA command buffers over the decode
loop: rigs/jax/xla_flags.py), and any `kernels` choice model.Config offers (`pallas`...).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def bench_one(args: argparse.Namespace, variant: str) -> list[dict[str, Any]]:
    """This process: every width for one variant."""
    from rigs.jax import xla_flags

    if variant == "cmdbuf":
        os.environ[xla_flags.ENV] = "1"
    xla_flags.configure()
    import dataclasses

    import jax
    import jax.numpy as jnp
    import numpy as np

    from benchmarks.jax_gpu_perf import bench_slots
    from rigs.jax import model, steps
    from rigs.sources import random_config

    cfg = model.Config.from_hf(random_config(args.model))
    kernels = variant if variant not in ("xla", "cmdbuf") else "xla"
    cfg = dataclasses.replace(cfg, kernels=kernels)
    dtype = jnp.dtype(args.dtype)
    device = jax.devices()[0]
    params = jax.block_until_ready(model.init_params(cfg, jax.random.key(0), dtype))
    leaves = jax.tree.leaves(params)
    gathered = params.ple_embed.nbytes if params.ple_embed is not None else 0
    streamed = sum(x.nbytes for x in leaves) - gathered
    eos = jax.device_put(np.asarray([cfg.vocab_size], np.int32))  # never produced: no stops
    copy_gbps = copy_bandwidth_gbps(args.copy_bytes)
    rows = []
    for width in args.widths:
        cache = model.init_cache(cfg, width, args.max_model_len, dtype)
        kv_bytes = kv_read_bytes(cfg, cache, width, args.context)
        start = args.context - args.steps * args.chunks - 1  # the last step stays in the context
        slots = jax.device_put(bench_slots(cfg, width, width, True, start), device)
        t = time.perf_counter()
        program = steps.decode_chunk.lower(
            params, cfg=cfg, cache=cache, slots=slots, eos_ids=eos, width=width,
            steps=args.steps, greedy=True, context=args.context,
        ).compile()  # fmt: skip
        compile_s = time.perf_counter() - t
        hlo = program.as_text() or ""
        kernels_in_program = sum(
            " fusion(" in line or "custom-call(" in line for line in hlo.splitlines()
        )
        state = {"cache": cache, "slots": slots}

        def run_chunk(state: dict[str, Any] = state, program: Any = program) -> Any:
            tokens, _, _, _, state["cache"], state["slots"] = program(
                params, cache=state["cache"], slots=state["slots"], eos_ids=eos
            )
            return tokens

        jax.block_until_ready(run_chunk())
        per_step = []
        for _ in range(args.reps):
            # back to the same positions, so every rep reads the same context
            state["slots"] = jax.device_put(bench_slots(cfg, width, width, True, start), device)
            jax.block_until_ready(state["slots"])
            t = time.perf_counter()
            for _ in range(args.chunks):
                tokens = run_chunk()
            jax.block_until_ready(tokens)
            per_step.append((time.perf_counter() - t) * 1000 / (args.chunks * args.steps))
        ms = statistics.median(per_step)
        step_bytes = streamed + kv_bytes
        row = {
            "variant": variant,
            "width": width,
            "context": args.context,
            "compile_s": round(compile_s, 2),
            "ms_per_step": round(ms, 4),
            "ms_per_step_runs": [round(x, 4) for x in per_step],
            "tok_s": round(width * 1000 / ms, 1),
            "kernels_in_program": kernels_in_program,
            "bytes_per_step": int(step_bytes),
            "achieved_GBps": round(step_bytes / ms / 1e6, 1),
            "copy_GBps": round(copy_gbps, 1),
            "roofline_tok_s": round(width * copy_gbps * 1e9 / step_bytes, 1),
            "device": str(device.device_kind),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def kv_read_bytes(cfg: Any, cache: Any, width: int, context: int) -> int:
    """Bytes of K and V attention reads in one step: `context` rows (at most the layer's
    cache length) of every layer's source cache, for `width` slots."""
    index = {i: c for c, i in enumerate(cfg.cache_layers)}
    total = 0
    for i in range(cfg.num_layers):
        k = cache.k[index[cfg.kv_source[i]]]
        rows = min(context, k.shape[1])
        total += 2 * width * rows * k.shape[2] * k.shape[3] * k.dtype.itemsize
    return total


def copy_bandwidth_gbps(nbytes: int) -> float:
    import jax
    import jax.numpy as jnp

    x = jnp.ones((nbytes // 4,), jnp.float32)
    copy = jax.jit(lambda a: a * 1.0001)
    jax.block_until_ready(copy(x))
    t = time.perf_counter()
    for _ in range(5):
        y = copy(x)
    jax.block_until_ready(y)
    return 2 * x.nbytes * 5 / (time.perf_counter() - t) / 1e9


def print_table(rows: list[dict[str, Any]]) -> None:
    head = "variant    width  ms/step    tok/s   kernels  GB/s    copy GB/s  roofline tok/s"
    print(head)
    for r in rows:
        if "error" in r:
            print(f"{r['variant']:<10} error: {r['error']}")
            continue
        print(
            f"{r['variant']:<10} {r['width']:>5}  {r['ms_per_step']:>7.3f}  {r['tok_s']:>8.1f}"
            f"  {r['kernels_in_program']:>7}  {r['achieved_GBps']:>6.0f}  {r['copy_GBps']:>9.0f}"
            f"  {r['roofline_tok_s']:>14.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="JSON file for the rows")
    parser.add_argument("--model", default="e2b", help="a config in rigs/configs (e2b, tiny)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--widths", default="1", help="decode widths, such as 1,8,32")
    parser.add_argument("--context", type=int, default=1024, help="KV rows attention reads")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=8, help="decode steps per device call")
    parser.add_argument("--chunks", type=int, default=16, help="device calls per timed run")
    parser.add_argument("--reps", type=int, default=5, help="timed runs; the median is quoted")
    parser.add_argument("--variants", default="xla,cmdbuf")
    parser.add_argument("--copy-bytes", type=int, default=1 << 30)
    parser.add_argument("--quick", action="store_true", help="CPU smoke run: small and short")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child's variant
    args = parser.parse_args()
    args.widths = [int(w) for w in args.widths.split(",")]
    if args.quick:
        args.chunks, args.reps, args.copy_bytes = 2, 3, 1 << 24
        args.context, args.max_model_len = min(args.context, 64), min(args.max_model_len, 128)
    if args.context <= args.steps * args.chunks or args.context > args.max_model_len:
        parser.error(
            f"--context {args.context} must exceed --steps x --chunks "
            f"({args.steps * args.chunks}) and be at most --max-model-len {args.max_model_len}"
        )
    if args.one:
        args.out.write_text(json.dumps(bench_one(args, args.one)))
        return
    rows: list[dict[str, Any]] = []
    for variant in args.variants.split(","):
        part = args.out.with_suffix(f".{variant}.json")
        child = [sys.executable, __file__, str(part), "--one", variant, "--model", args.model]
        child += ["--dtype", args.dtype, "--widths", ",".join(map(str, args.widths))]
        for option in ("context", "max_model_len", "steps", "chunks", "reps", "copy_bytes"):
            child += [f"--{option.replace('_', '-')}", str(getattr(args, option))]
        done = subprocess.run(child, check=False)
        if done.returncode == 0 and part.is_file():
            rows.extend(json.loads(part.read_text()))
        else:
            rows.append({"variant": variant, "error": f"exit {done.returncode}"})
        args.out.write_text(json.dumps(rows, indent=1))
    print_table(rows)


if __name__ == "__main__":
    main()
