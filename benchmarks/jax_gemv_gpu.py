"""E2B's decode-step weight products: XLA's einsum against the Pallas GEMV (rigs/jax/gemv.py)
over several block configurations, at decode widths 1 and 8, on the device alone.

    python benchmarks/jax_gemv_gpu.py OUT.json                # GPU: E2B's shapes, bfloat16
    python benchmarks/jax_gemv_gpu.py OUT.json --quick        # CPU: random:tiny's, interpreter

Each variant is timed in one jitted fori_loop that, per iteration, multiplies the same [R, D]
input by `copies` distinct copies of the weight (at least 4 x L2_BYTES of them together, so
every product streams its weight from HBM, as a decode step's 35 layers do, rather than from
L2) and adds each product into a float32 accumulator; the input's sign flips with the
iteration's parity so that XLA cannot hoist the products out of the loop. µs per product =
the median over --trials timed calls / (iterations x copies), launch gaps included (a
decode step has them too; the accumulation is one small fusion per iteration). GB/s =
weight bytes / that time. The copy bandwidth (read + write of 1 GiB) is measured the same
way for reference. A variant that fails to lower or compile is an error row, not a crash.
Rows stop being added at --budget-s; the JSON is rewritten after every shape.

--decode first times whole greedy decode steps (`steps.decode_chunk`, 8 steps per call,
random weights, 512 cached positions of 1024) with Config.kernels "xla" and "pallas" at
each width, and counts how many tokens the two choose alike from the same state.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

L2_BYTES = 50 * 2**20  # H100 and H200 (SXM)
MAX_COPIES = 32
# Block configurations tried on a GPU (split_k 0: `gemv.fit` chooses it; 1: none).
GPU_BLOCKS: tuple[dict[str, Any], ...] = (
    dict(block_f=64, block_d=256),  # the default
    dict(block_f=64, block_d=256, split_k=1),
    dict(block_f=32, block_d=512),
    dict(block_f=64, block_d=512, num_warps=8),
    dict(block_f=128, block_d=256, num_warps=8),
    dict(block_f=16, block_d=1024),
    dict(block_f=64, block_d=256, num_stages=4),
    # sums kept per lane, reduced once: ~128 registers of them at width 1, 256 at width 8
    dict(block_f=64, block_d=256, defer_reduce=True),
    dict(block_f=16, block_d=128, defer_reduce=True),
)
QUICK_BLOCKS: tuple[dict[str, Any], ...] = (
    dict(block_f=32, block_d=64),
    dict(block_f=16, block_d=32, split_k=1, defer_reduce=True),
)


@dataclass(frozen=True)
class Product:
    name: str  # the weight's name in model.Layer / model.Params (lm_head: the tied embed), F x D
    f: int
    d: int
    per_step: int  # products of this shape in one decode step


def products(cfg: Any) -> list[Product]:
    """Every distinct [F, D] weight shape a decode step multiplies by, with how many times
    per step, most bytes per step first (so that a spent budget drops the least)."""
    from rigs.jax import model

    count: dict[tuple[str, int, int], int] = {}
    for i in range(cfg.num_layers):
        for name, shape in model.layer_shapes(cfg, i).items():
            if shape is not None and len(shape) == 2:
                key = (name, shape[0], shape[1])
                count[key] = count.get(key, 0) + 1
    for name, shape in model.param_shapes(cfg).items():
        if shape is not None and len(shape) == 2 and name != "ple_embed":  # gathered
            count[("lm_head" if name == "embed" else name, shape[0], shape[1])] = 1
    out = [Product(f"{name} {f}x{d}", f, d, n) for (name, f, d), n in count.items()]
    return sorted(out, key=lambda p: -p.f * p.d * p.per_step)


def decode_steps(args: argparse.Namespace, cfg: Any, dtype: Any) -> list[dict[str, Any]]:
    """Whole greedy decode steps (steps.decode_chunk, random weights) with kernels="xla" and
    "pallas" at each width, from the same state: ms per step, and how many of the chunk's
    tokens the two choose alike (bfloat16 near-ties may differ; float32 should not)."""
    from dataclasses import replace

    import jax
    import numpy as np

    from benchmarks.jax_gpu_perf import bench_slots
    from rigs.jax import model, steps

    params = model.init_params(cfg, jax.random.key(0), dtype)
    eos = jax.numpy.asarray([cfg.vocab_size], jax.numpy.int32)  # past the vocabulary: none
    chunk, max_len, input_len = (4, 64, 40) if args.quick else (8, 1024, 512)
    rows: list[dict[str, Any]] = []
    for width in args.widths:
        first: dict[str, Any] = {}
        for kernels in ("xla", "pallas"):
            row: dict[str, Any] = {"width": width, "kernels": kernels, "steps_per_call": chunk}
            try:
                c = replace(cfg, kernels=kernels)

                def call(cache: Any, slots: Any, c: Any = c, width: int = width) -> Any:
                    return steps.decode_chunk(
                        params, c, cache, slots, eos, width=width, steps=chunk, greedy=True
                    )

                cache = model.init_cache(c, width, max_len, dtype)
                slots = bench_slots(c, width, width, True, input_len)
                start = time.perf_counter()
                tokens, _, _, _, cache, slots = jax.block_until_ready(call(cache, slots))
                row["first_call_s"] = round(time.perf_counter() - start, 2)  # compile included
                first[kernels] = np.asarray(tokens)
                times = []
                for _ in range(args.trials):
                    start = time.perf_counter()
                    *_, cache, slots = jax.block_until_ready(call(cache, slots))
                    times.append(time.perf_counter() - start)
                ms = statistics.median(times) * 1000 / chunk
                row.update(ms_per_step=round(ms, 3), tok_s=round(width * 1000 / ms, 1))
            except Exception as err:  # a program that does not lower or run: a row
                row["error"] = f"{type(err).__name__}: {str(err)[:300]}"
                if args.verbose:
                    traceback.print_exc()
            rows.append(row)
            print(f"decode {row}", flush=True)
        if len(first) == 2:
            same = float((first["xla"] == first["pallas"]).mean())
            rows[-1]["tokens_same_as_xla"] = round(same, 4)
    return rows


def timed_loop(fn: Any, x: Any, weights: list[Any], trials: int, target_s: float) -> float:
    """Seconds per product of fn(x, w), each weight once per iteration (module doc)."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def run(x: Any, weights: list[Any], iterations: Any) -> Any:
        def body(i: Any, accs: tuple[Any, ...]) -> tuple[Any, ...]:
            xi = jnp.where(i % 2 == 0, x, -x)
            return tuple(
                a + fn(xi, w).astype(jnp.float32) for a, w in zip(accs, weights, strict=True)
            )

        zeros = tuple(jnp.zeros((x.shape[0], w.shape[0]), jnp.float32) for w in weights)
        return jax.lax.fori_loop(0, iterations, body, zeros)

    jax.block_until_ready(run(x, weights, 1))  # compile
    start = time.perf_counter()
    jax.block_until_ready(run(x, weights, 1))
    once = time.perf_counter() - start
    iterations = max(1, min(10_000, round(target_s / max(once, 1e-6))))
    times = []
    for _ in range(trials):
        start = time.perf_counter()
        jax.block_until_ready(run(x, weights, iterations))
        times.append(time.perf_counter() - start)
    return statistics.median(times) / (iterations * len(weights))


def copy_bandwidth(quick: bool) -> float:
    """Bytes per second of reading and writing 1 GiB (quick: 16 MiB) in one fusion."""
    import jax
    import jax.numpy as jnp

    a = jnp.ones(((2**24 if quick else 2**30) // 4,), jnp.float32)
    copy = jax.jit(lambda a: a * 1.0001)
    jax.block_until_ready(copy(a))
    times = []
    for _ in range(5):
        start = time.perf_counter()
        jax.block_until_ready(copy(a))
        times.append(time.perf_counter() - start)
    return 2 * a.nbytes / statistics.median(times)


def variants(quick: bool) -> list[tuple[str, Any]]:
    """("xla", None) and ("pallas <blocks>", Blocks) for each configuration."""
    from rigs.jax import gemv

    out: list[tuple[str, Any]] = [("xla", None)]
    for spec in QUICK_BLOCKS if quick else GPU_BLOCKS:
        blocks = gemv.Blocks(**spec)
        out.append((f"pallas {_short(blocks)}", blocks))
    return out


def _short(blocks: Any) -> str:
    return (
        f"f{blocks.block_f} d{blocks.block_d} k{blocks.split_k or 'auto'} "
        f"w{blocks.num_warps} s{blocks.num_stages}" + (" deferred" if blocks.defer_reduce else "")
    )


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    from rigs import sources
    from rigs.jax import gemv, model

    cfg = model.Config.from_hf(sources.random_config("tiny" if args.quick else "e2b"))
    dtype = jnp.dtype(args.dtype)
    mode = gemv.pallas_mode()
    device = jax.devices()[0]
    report: dict[str, Any] = {
        "device": str(device.device_kind),
        "platform": device.platform,
        "compute_capability": getattr(device, "compute_capability", None),
        "jax": jax.__version__,
        "dtype": str(dtype),
        "pallas_mode": mode,
        "copy_GBps": round(copy_bandwidth(args.quick) / 1e9, 1),
        "rows": [],
        "best": [],
    }
    deadline = time.monotonic() + args.budget_s
    if args.decode:
        report["decode"] = decode_steps(args, cfg, dtype)
        args.out.write_text(json.dumps(report, indent=1))
    key = jax.random.key(0)
    every = products(cfg)
    chosen = [
        p
        for p in every
        if not args.shapes or any(p.name.startswith(prefix) for prefix in args.shapes)
    ]
    for product in chosen:
        name, f, d = product.name, product.f, product.d
        if time.monotonic() > deadline:
            report["stopped"] = f"budget of {args.budget_s} s spent before {name}"
            break
        weight_bytes = f * d * dtype.itemsize
        copies = 1 if args.quick else min(MAX_COPIES, math.ceil(4 * L2_BYTES / weight_bytes))
        weights = [
            (0.02 * jax.random.normal(jax.random.fold_in(key, c), (f, d), jnp.float32)).astype(
                dtype
            )
            for c in range(copies)
        ]
        for width in args.widths:
            x = jax.random.normal(jax.random.fold_in(key, 1000 + width), (width, d)).astype(dtype)
            for label, blocks in variants(args.quick):
                row: dict[str, Any] = {
                    "shape": name,
                    "F": f,
                    "D": d,
                    "width": width,
                    "per_step": product.per_step,
                    "variant": label,
                    "copies": copies,
                }
                if time.monotonic() > deadline:
                    row["error"] = "skipped: budget spent"
                    report["rows"].append(row)
                    continue
                try:
                    fn = _variant_fn(blocks, f, d, mode)
                    if blocks is not None:
                        row.update(parity(fn, x, weights[0]))
                    seconds = timed_loop(fn, x, weights, args.trials, args.target_s)
                    row["us"] = round(seconds * 1e6, 2)
                    row["GBps"] = round(weight_bytes / seconds / 1e9, 1)
                    if blocks is not None:
                        row["blocks"] = asdict(gemv.fit(blocks, f, d))  # type: ignore[arg-type]
                except Exception as err:  # a variant that does not lower or run: a row
                    row["error"] = f"{type(err).__name__}: {str(err)[:300]}"
                    if args.verbose:
                        traceback.print_exc()
                report["rows"].append(row)
                _print_row(row)
        del weights
        report["best"] = best_per_shape(report["rows"])
        report["per_step"] = per_step(report["rows"], every, args.widths)
        args.out.write_text(json.dumps(report, indent=1))
    report["best"] = best_per_shape(report["rows"])
    report["per_step"] = per_step(report["rows"], every, args.widths)
    return report


def _variant_fn(blocks: Any, f: int, d: int, mode: str | None) -> Any:
    import jax
    import jax.numpy as jnp

    from rigs.jax import gemv

    # jitted: the products of one timing loop share one lowering (one Triton compile)
    if blocks is None:
        return jax.jit(lambda x, w: jnp.einsum("rd,fd->rf", x, w))
    if mode is None:
        raise RuntimeError("no Pallas on this device (gemv.pallas_mode() is None)")
    fitted = gemv.fit(blocks, f, d)
    if fitted is None:
        raise ValueError(f"no block of {blocks} tiles [{f}, {d}]")
    return jax.jit(lambda x, w: gemv.gemv(x, w, fitted, interpret=mode == "interpret"))


def parity(fn: Any, x: Any, w: Any) -> dict[str, Any]:
    """fn(x, w) against XLA's einsum: the largest difference, and whether every element is
    within the bound both float32 sums allow (tests/rigs/jax/test_gemv.py `bound`: one
    output-dtype ulp, <= 2^-7 of the value, plus 2 (D + 1) 2^-24 sum |x_i w_i|)."""
    import jax.numpy as jnp

    got = fn(x, w).astype(jnp.float32)
    ref = jnp.einsum("rd,fd->rf", x, w).astype(jnp.float32)
    scale = jnp.einsum("rd,fd->rf", jnp.abs(x).astype(jnp.float32), jnp.abs(w).astype(jnp.float32))
    ulp = 2.0**-7 if x.dtype == jnp.bfloat16 else 0.0
    limit = 1.01 * (ulp * jnp.abs(ref) + 2 * (x.shape[-1] + 1) * 2.0**-24 * scale)
    diff = jnp.abs(got - ref)
    return {
        "max_abs_diff": float(diff.max()),
        "within_bound": bool((diff <= limit).all()),
    }


def best_per_shape(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (shape, width): XLA's time and the fastest Pallas variant's, with the speed-up."""
    best = []
    keys = dict.fromkeys((r["shape"], r["width"]) for r in rows)
    for shape, width in keys:
        timed = [r for r in rows if (r["shape"], r["width"]) == (shape, width) and "us" in r]
        xla = next((r for r in timed if r["variant"] == "xla"), None)
        pallas = sorted((r for r in timed if r["variant"] != "xla"), key=lambda r: r["us"])
        entry: dict[str, Any] = {"shape": shape, "width": width}
        if xla:
            entry.update(xla_us=xla["us"], xla_GBps=xla["GBps"])
        if pallas:
            top = pallas[0]
            entry.update(best=top["variant"], best_us=top["us"], best_GBps=top["GBps"])
            if xla:
                entry["speedup"] = float(f"{xla['us'] / top['us']:.3g}")  # 3 significant digits
        best.append(entry)
    return best


def per_step(rows: list[dict[str, Any]], everything: list[Product], widths: list[int]) -> list[Any]:
    """Per width: the weight products' µs in one decode step (sum of per_step x µs) with XLA
    and with each shape's best Pallas variant, over the shapes that have both; and the share
    of the step's weight bytes those shapes hold."""
    best = {(b["shape"], b["width"]): b for b in best_per_shape(rows)}
    total_bytes = sum(p.f * p.d * p.per_step for p in everything)
    out = []
    for width in widths:
        both = [
            (p, best[(p.name, width)])
            for p in everything
            if "speedup" in best.get((p.name, width), {})
        ]
        xla = sum(p.per_step * b["xla_us"] for p, b in both)
        pallas = sum(p.per_step * b["best_us"] for p, b in both)
        covered = sum(p.f * p.d * p.per_step for p, _ in both)
        out.append(
            {
                "width": width,
                "xla_us": round(xla, 1),
                "best_pallas_us": round(pallas, 1),
                "bytes_covered": round(covered / total_bytes, 4) if total_bytes else 0.0,
            }
        )
    return out


def _print_row(row: dict[str, Any]) -> None:
    figures = row.get("error") or f"{row['us']:>10.2f} µs {row['GBps']:>8.1f} GB/s"
    if "within_bound" in row:
        figures += f"  diff {row['max_abs_diff']:.2e} {'ok' if row['within_bound'] else 'OUT'}"
    print(
        f"{row['shape']:<22} x{row['per_step']:<3} w{row['width']} {row['variant']:<28} {figures}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="JSON report path")
    parser.add_argument("--quick", action="store_true", help="random:tiny's shapes (CPU smoke)")
    parser.add_argument("--dtype", default=None, help="(default: bfloat16; --quick: float32)")
    parser.add_argument("--widths", default="1,8", help="decode widths (rows), comma-separated")
    parser.add_argument(
        "--shapes", default="", help="only shapes whose names start so, comma-separated"
    )
    parser.add_argument("--trials", type=int, default=5, help="timed calls per variant")
    parser.add_argument("--target-s", type=float, default=None, help="seconds per timed call")
    parser.add_argument("--budget-s", type=float, default=480.0, help="stop adding rows after")
    parser.add_argument(
        "--decode", action="store_true", help="first time whole decode steps, xla vs pallas"
    )
    parser.add_argument("--verbose", action="store_true", help="tracebacks of error rows")
    args = parser.parse_args(argv)
    args.widths = [int(w) for w in args.widths.split(",")]
    args.shapes = [p.strip() for p in args.shapes.split(",") if p.strip()]
    args.dtype = args.dtype or ("float32" if args.quick else "bfloat16")
    args.target_s = args.target_s or (0.001 if args.quick else 0.02)
    if args.quick:
        args.trials = min(args.trials, 2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = measure(args)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"\ncopy {report['copy_GBps']} GB/s on {report['device']}; best per shape:")
    for b in report["best"]:
        print(
            f"{b['shape']:<22} w{b['width']} xla {b.get('xla_us', '-')} µs, "
            f"{b.get('best', '-')}: {b.get('best_us', '-')} µs ({b.get('best_GBps', '-')} GB/s), "
            f"speed-up {b.get('speedup', '-')}"
        )
    for step in report["per_step"]:
        print(
            f"width {step['width']}: weight products per decode step, XLA {step['xla_us']} µs, "
            f"best Pallas per shape {step['best_pallas_us']} µs "
            f"({step['bytes_covered']:.0%} of the step's weight bytes measured)"
        )
    for row in report.get("decode", []):
        figures = row.get("error") or f"{row['ms_per_step']} ms/step, {row['tok_s']} tok/s"
        same = row.get("tokens_same_as_xla")
        print(
            f"decode width {row['width']} {row['kernels']:<6} {figures}"
            + ("" if same is None else f", tokens as XLA's: {same:.1%}")
        )
    return report


if __name__ == "__main__":
    main()
