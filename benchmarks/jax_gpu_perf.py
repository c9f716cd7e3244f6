"""Performance of the JAX rig: directly on the engine, and over HTTP with rigbench's harness.

    python benchmarks/jax_gpu_perf.py OUT_DIR                    # H200: random:e2b, bfloat16
    python benchmarks/jax_gpu_perf.py OUT_DIR --model random:tiny --quick   # CPU smoke run

Phases (each a child process, so each owns the GPU alone), within --budget-s overall:
1. engine: load the checkpoint, compile every program cold (time from process start to
   ready), measure the copy bandwidth and the roofline of a decode step, run 512-token
   prompts / 128 new tokens through `Engine.generate` at concurrency 1, 8 and 32
   (counting compilations during them), then time each decode width and each prefill
   batch size on the device alone.
2. http: `rigbench rig serve jax` (loading the programs phase 1 kept), time to /health 200,
   then `rigbench bench` at concurrency 1 and 32 (same lengths), compilations during it.
3. cmdbuf (if at least --cmdbuf-min-s of the budget is left): the decode microbench at
   the smallest and largest width again with RIGBENCH_JAX_COMMAND_BUFFERS=1 (while loops
   in CUDA graphs, rigs/jax/xla_flags.py), rows "1-cmdbuf" and "32-cmdbuf".
Writes OUT_DIR/perf.json (summary), engine.json, http_report.json (+ records), server.log,
cmdbuf.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROCESS_START = time.perf_counter()
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


# --- phase 1: the engine alone -----------------------------------------------------------


def bench_slots(cfg: Any, count: int, width: int, greedy: bool, input_len: int) -> Any:
    """Slot state with the first `width` slots active, as if after an input_len prompt."""
    import numpy as np

    from rigs.jax import steps

    rng = np.random.default_rng(0)
    return steps.Slots(
        token=rng.integers(3, cfg.vocab_size, count).astype(np.int32),  # type: ignore[arg-type]
        pos=np.full(count, input_len, np.int32),  # type: ignore[arg-type]
        generated=np.zeros(count, np.int32),  # type: ignore[arg-type]
        active=np.arange(count) < width,  # type: ignore[arg-type]
        max_tokens=np.full(count, 1 << 30, np.int32),  # type: ignore[arg-type]
        min_tokens=np.zeros(count, np.int32),  # type: ignore[arg-type]
        ignore_eos=np.ones(count, bool),  # type: ignore[arg-type]
        temperature=np.full(count, 0.0 if greedy else 1.0, np.float32),  # type: ignore[arg-type]
        top_p=np.ones(count, np.float32),  # type: ignore[arg-type]
        seed=np.zeros(count, np.uint32),  # type: ignore[arg-type]
    )


def time_chunks(run_chunk: Any, width: int, steps_per_call: int) -> dict[str, float]:
    """ms per decode step of run_chunk() (returns the chunk's tokens), after one warm call."""
    import jax

    jax.block_until_ready(run_chunk())
    reps = 4
    t = time.perf_counter()
    for _ in range(reps):
        tokens = run_chunk()
    jax.block_until_ready(tokens)
    ms = (time.perf_counter() - t) * 1000 / (reps * steps_per_call)
    return {"ms_per_step": round(ms, 3), "tok_s": round(width * 1000 / ms, 1)}


@dataclass
class StartedEngine:
    """The JAX engine as the server builds it, started and warm, with what it took."""

    counter: Any  # rigs.jax.compiles' counter, installed before anything compiled
    device: Any
    cfg: Any
    params: Any
    options: Any
    engine: Any
    load_s: float  # checkpoint onto the device
    warm_s: float  # compile and warm-up


def start_engine(args: argparse.Namespace) -> StartedEngine:
    import jax
    import jax.numpy as jnp

    from rigs.jax import checkpoint, compiles
    from rigs.jax.engine import EngineOptions, JaxEngine
    from rigs.sources import resolve_model

    counter = compiles.install()
    source = resolve_model(args.model, seed=0)
    device = jax.devices()[0]
    cfg = checkpoint.load_config(source.path)
    t = time.perf_counter()
    params = checkpoint.load_params(source.path, cfg, jnp.dtype(args.dtype), device=device)
    jax.block_until_ready(params)
    load_s = time.perf_counter() - t
    options = EngineOptions(
        max_slots=args.max_slots,
        max_model_len=args.max_model_len,
        steps_per_call=args.steps_per_call,
    )
    engine = JaxEngine(
        params, cfg, options, model_name=args.model, device=device,
        executable_cache=Path(args.compile_cache),  # the server's, loaded by phase 2
    )  # fmt: skip
    t = time.perf_counter()
    engine.start()
    engine.wait_ready()
    return StartedEngine(
        counter, device, cfg, params, options, engine, load_s, time.perf_counter() - t
    )


def engine_phase(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from rigs.jax import xla_flags

    xla_flags.configure()
    import jax

    from rigs.jax import steps
    from rigs.serving.engine import SamplingParams

    started = start_engine(args)
    counter, device, cfg, params = started.counter, started.device, started.cfg, started.params
    options, engine, load_s, warm_s = (
        started.options,
        started.engine,
        started.load_s,
        started.warm_s,
    )
    ready_s = time.perf_counter() - PROCESS_START
    result: dict[str, Any] = {
        "device": str(device.device_kind),
        "checkpoint_load_s": round(load_s, 2),
        "compile_and_warm_up_s": round(warm_s, 2),
        "process_start_to_ready_s": round(ready_s, 2),
        "compiles_at_ready": counter.snapshot(),
        "roofline": roofline(params, engine, args),
    }
    print(json.dumps(result, indent=1), flush=True)

    def save() -> None:  # after every stage, so a timeout still leaves what was measured
        (out / "engine.json").write_text(json.dumps(result, indent=1))

    save()

    # Through Engine.generate, as the server drives it.
    vocab = cfg.vocab_size
    before = counter.snapshot()["executables"]
    cells = {}
    for concurrency, count in args.cells:
        cells[str(concurrency)] = asyncio.run(
            run_cell(engine, SamplingParams, vocab, concurrency, count, args)
        )
        print(f"engine c={concurrency}: {cells[str(concurrency)]}", flush=True)
        result["engine_cells"] = cells
        save()
    result["engine_cells"] = cells
    result["compilations_during_cells"] = counter.snapshot()["executables"] - before
    save()

    # Each decode width alone on the device: every slot active, no host in the way.
    widths: dict[str, Any] = {}
    k = options.steps_per_call
    runs = [(w, True) for w in options.widths]
    runs += [(options.widths[0], False), (options.widths[-1], False)]
    for width, greedy in runs:
        slots = bench_slots(cfg, options.max_slots, width, greedy, args.input_len)
        engine._slots = jax.device_put(slots, device)
        name = f"{width}" if greedy else f"{width}-sampling"
        context = options.contexts_for(width)[-1]

        def chunk(w: int = width, g: bool = greedy, c: int = context) -> Any:
            return engine._chunk(w, g, c).tokens

        widths[name] = time_chunks(chunk, width, k)
        print(f"width {name}: {widths[name]}", flush=True)
        result["decode_width_microbench"] = widths
        save()
    result["prefill_microbench"] = prefill_microbench(engine, args.input_len)
    print(f"prefill: {result['prefill_microbench']}", flush=True)
    save()
    engine._slots = jax.device_put(steps.empty_slots(options.max_slots), device)
    result["provenance"] = dict(engine.provenance())
    engine.close()
    save()
    return result


def prefill_microbench(engine: Any, input_len: int) -> dict[str, Any]:
    """ms per prefill call of input_len-token prompts at each compiled batch size (slots
    left inactive: max_tokens 1)."""
    import jax

    from rigs.serving.engine import SamplingParams

    bucket = engine._bucket(input_len)
    rows = [(SamplingParams(max_tokens=1), 0)]
    out = {}
    for size in engine.options.prefill_sizes(bucket):
        prompts = [[5] * input_len] * size

        def call(size: int = size, prompts: list[list[int]] = prompts) -> Any:
            return engine._prefill(bucket, prompts, rows * size, list(range(size)))

        jax.block_until_ready(call())
        reps = 5
        t = time.perf_counter()
        for _ in range(reps):
            last = call()
        jax.block_until_ready(last)
        ms = (time.perf_counter() - t) * 1000 / reps
        out[str(size)] = {"ms_per_call": round(ms, 2), "ms_per_prompt": round(ms / size, 2)}
    return out


def profile_phase(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The engine's own programs on the device: step time by width and context bucket,
    prefill time by batch size, and a profiler trace of decode chunks (kernels per step,
    time in matrix products, the costliest kernels). Its options are the server's, so the
    programs the server kept make this start warm."""
    import jax

    started = start_engine(args)
    counter, device, cfg, params = started.counter, started.device, started.cfg, started.params
    options, engine = started.options, started.engine
    result: dict[str, Any] = {
        "device": str(device.device_kind),
        "options": repr(options),
        "warm_up_s": round(started.warm_s, 2),
        "compiles_at_ready": counter.snapshot(),
        "roofline": roofline(params, engine, args),
    }

    def save() -> None:
        (out / "profile.json").write_text(json.dumps(result, indent=1))

    save()
    print(json.dumps(result, indent=1), flush=True)
    k = options.steps_per_call
    steps_by_width: dict[str, Any] = {}
    for width in options.widths:
        engine._slots = jax.device_put(
            bench_slots(cfg, options.max_slots, width, True, args.input_len), device
        )
        for context in options.contexts_for(width):

            def chunk(w: int = width, c: int = context) -> Any:
                return engine._chunk(w, True, c).tokens

            steps_by_width[f"{width}@{context}"] = time_chunks(chunk, width, k)
            print(f"width {width} context {context}: {steps_by_width[f'{width}@{context}']}")
        result["decode_step_by_width"] = steps_by_width
        save()
    result["prefill_microbench"] = prefill_microbench(engine, args.input_len)
    print(f"prefill: {result['prefill_microbench']}", flush=True)
    save()
    traced: dict[str, Any] = {}
    for width in sorted({options.widths[0], min(32, options.max_slots), options.max_slots}):
        engine._slots = jax.device_put(
            bench_slots(cfg, options.max_slots, width, True, args.input_len), device
        )
        context = options.contexts_for(width)[0]
        traced[f"{width}@{context}"] = trace_chunks(
            lambda w=width, c=context: engine._chunk(w, True, c).tokens, k, out / f"trace{width}"
        )
        print(f"trace width {width}: {traced[f'{width}@{context}']}", flush=True)
        result["trace"] = traced
        save()
    engine.close()
    return result


MATMUL_KERNELS = ("gemv", "gemm", "cublas", "cutlass", "xmma", "nvjet", "dot")


def trace_chunks(run_chunk: Any, steps_per_call: int, directory: Path) -> dict[str, Any]:
    """Kernels per decode step and where a step's device time goes, from a profiler trace
    of a few chunks (each kernel launch on the GPU's streams is one event)."""
    import jax

    chunks = 3
    jax.block_until_ready(run_chunk())
    with jax.profiler.trace(str(directory)):
        for _ in range(chunks):
            tokens = run_chunk()
        jax.block_until_ready(tokens)
    path = next(directory.glob("**/*.xplane.pb"))
    data = jax.profiler.ProfileData.from_file(str(path))
    by_name: dict[str, list[float]] = {}
    for plane in data.planes:
        if not plane.name.startswith("/device:GPU"):
            continue
        for line in plane.lines:
            if "stream" not in line.name.lower():
                continue
            for event in line.events:
                by_name.setdefault(event.name, []).append(event.duration_ns / 1e3)
    steps = chunks * steps_per_call
    count = sum(len(v) for v in by_name.values())
    busy = sum(sum(v) for v in by_name.values())
    matmul = sum(sum(v) for n, v in by_name.items() if any(m in n.lower() for m in MATMUL_KERNELS))
    top = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:15]
    return {
        "kernels_per_step": round(count / steps, 1),
        "kernel_us_per_step": round(busy / steps, 1),
        "matmul_kernel_us_per_step": round(matmul / steps, 1),
        "top_kernels_count_and_us_per_step": {
            n[:90]: [len(v) / steps, round(sum(v) / steps, 1)] for n, v in top
        },
    }


def cmdbuf_phase(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The greedy decode microbench again with while loops in CUDA graphs."""
    from rigs.jax import xla_flags

    os.environ[xla_flags.ENV] = "1"
    result: dict[str, Any] = {"xla_flags_added": xla_flags.configure()}
    import jax
    import jax.numpy as jnp
    import numpy as np

    from rigs.jax import checkpoint, model, steps
    from rigs.sources import resolve_model

    jax.config.update("jax_compilation_cache_dir", args.compile_cache)
    source = resolve_model(args.model, seed=0)
    device = jax.devices()[0]
    cfg = checkpoint.load_config(source.path)
    dtype = jnp.dtype(args.dtype)
    params = checkpoint.load_params(source.path, cfg, dtype, device=device)
    cache = jax.device_put(model.init_cache(cfg, args.max_slots, args.max_model_len, dtype))
    eos = jax.device_put(np.asarray(cfg.eos_token_ids or [cfg.vocab_size], np.int32))
    k = args.steps_per_call
    widths = sorted({1, args.max_slots})
    empty = steps.empty_slots(args.max_slots)
    t = time.perf_counter()

    def compile_width(w: int) -> Any:
        return steps.decode_chunk.lower(
            params, cfg=cfg, cache=cache, slots=empty, eos_ids=eos, width=w, steps=k, greedy=True
        ).compile()

    with ThreadPoolExecutor(max_workers=len(widths)) as pool:
        programs = dict(zip(widths, pool.map(compile_width, widths), strict=True))
    result["compile_s"] = round(time.perf_counter() - t, 2)
    state = {"cache": cache}
    for width in widths:
        state["slots"] = jax.device_put(
            bench_slots(cfg, args.max_slots, width, True, args.input_len), device
        )

        def run(width: int = width) -> Any:
            tokens, _, _, _, state["cache"], state["slots"] = programs[width](
                params, cache=state["cache"], slots=state["slots"], eos_ids=eos
            )
            return tokens

        result[f"{width}-cmdbuf"] = time_chunks(run, width, k)
        print(f"width {width}-cmdbuf: {result[f'{width}-cmdbuf']}", flush=True)
        (out / "cmdbuf.json").write_text(json.dumps(result, indent=1))
    return result


def roofline(params: Any, engine: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Bytes a batch-1 decode step must read, and the ceiling at the measured bandwidth.

    Every weight is streamed once per step except the per-layer embedding table, of which
    one 35 x 256 row per token is gathered; the tied embedding is streamed as the output
    projection. KV reads are counted at width 1."""
    import jax

    from benchmarks.jax_decode_step import copy_bandwidth_gbps

    leaves = jax.tree.leaves(params)
    total = sum(x.nbytes for x in leaves)
    gathered = params.ple_embed.nbytes if params.ple_embed is not None else 0
    streamed = total - gathered
    cfg = engine.cfg
    index = {i: c for c, i in enumerate(cfg.cache_layers)}
    caches = [engine._cache.k[index[cfg.kv_source[i]]] for i in range(cfg.num_layers)]
    kv_per_slot = sum(2 * c.nbytes // c.shape[0] for c in caches)
    bandwidth = copy_bandwidth_gbps(args.bandwidth_bytes) * 1e9
    step_bytes = streamed + kv_per_slot
    gemv_ms = gemv_stream_ms(params)
    o = engine.options
    hlo = engine._decode_programs[(o.widths[0], o.contexts_for(o.widths[0])[-1], True)].as_text()
    kernels = sum(1 for line in hlo.splitlines() if " fusion(" in line or "custom-call(" in line)
    return {
        "gemv_only_ms_per_step": round(gemv_ms, 3),
        "gemv_only_GBps": round(streamed / gemv_ms / 1e6, 1),
        "kernels_in_decode_program_width1": kernels,
        "params": int(sum(x.size for x in leaves)),
        "param_bytes": int(total),
        "gathered_ple_table_bytes": int(gathered),
        "streamed_weight_bytes_per_step": int(streamed),
        "kv_bytes_read_per_slot_per_step": int(kv_per_slot),
        "measured_copy_bandwidth_GBps": round(bandwidth / 1e9, 1),
        "batch1_ceiling_tok_s": round(bandwidth / step_bytes, 1),
    }


def gemv_stream_ms(params: Any) -> float:
    """One matrix-vector product per streamed weight matrix, nothing else: the time a
    batch-1 step would take if it were only its weight reads (shapes as in the model)."""
    import jax
    import jax.numpy as jnp

    mats = [x for x in jax.tree.leaves(params) if x.ndim == 2 and x is not params.ple_embed]

    @jax.jit
    def stream(mats: list[jax.Array]) -> jax.Array:
        total = jnp.zeros((), jnp.float32)
        for m in mats:
            v = jnp.ones((m.shape[1],), m.dtype)
            total += jnp.sum(m @ v, dtype=jnp.float32)
        return total

    jax.block_until_ready(stream(mats))
    reps = 10
    t = time.perf_counter()
    for _ in range(reps):
        out = stream(mats)
    jax.block_until_ready(out)
    return (time.perf_counter() - t) * 1000 / reps


async def run_cell(
    engine: Any, sampling: Any, vocab: int, concurrency: int, count: int, args: Any
) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(concurrency)
    n = args.output_len
    params = sampling(max_tokens=n, min_tokens=n, ignore_eos=True)
    gate = asyncio.Semaphore(concurrency)
    records: list[dict[str, float]] = []

    async def one() -> None:
        prompt = rng.integers(3, vocab, args.input_len).tolist()
        async with gate:
            start = time.perf_counter()
            first = last = 0.0
            n = 0
            async for _ in engine.generate(prompt, params):
                last = time.perf_counter()
                first = first or last
                n += 1
            records.append({"ttft": first - start, "e2e": last - start, "tokens": n})

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(count)))
    wall = time.perf_counter() - start
    tokens = sum(r["tokens"] for r in records)
    tpot = sorted((r["e2e"] - r["ttft"]) / max(r["tokens"] - 1, 1) for r in records)
    return {
        "requests": count,
        "output_tokens": tokens,
        "wall_s": round(wall, 3),
        "output_tok_s": round(tokens / wall, 1),
        "ttft_ms_p50": round(1000 * sorted(r["ttft"] for r in records)[len(records) // 2], 2),
        "tpot_ms_p50": round(1000 * tpot[len(tpot) // 2], 3),
        "decode_tok_s_per_request_p50": round(1 / tpot[len(tpot) // 2], 1),
    }


# --- phase 2: over HTTP with the harness -------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_phase(args: argparse.Namespace, out: Path, budget_s: float) -> dict[str, Any]:
    import httpx

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "RIGBENCH_JAX_COMPILE_CACHE": args.compile_cache}
    argv = [sys.executable, "-m", "rigbench", "rig", "serve", "jax", "--model", args.model]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--dtype", args.dtype]
    argv += ["--set", f"max_model_len={args.max_model_len}", "--set", f"max_slots={args.max_slots}"]
    argv += ["--set", f"steps_per_call={args.steps_per_call}"]
    deadline = time.monotonic() + budget_s
    log = (out / "server.log").open("wb")
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    result: dict[str, Any] = {"command": " ".join(argv), "compile_cache": "warm (phase 1)"}
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}; see server.log")
            if time.monotonic() > deadline:
                raise TimeoutError("server not healthy within the budget")
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        result["process_start_to_healthy_s"] = round(time.perf_counter() - start, 2)
        before = httpx.get(f"{base}/provenance", timeout=10).json()
        report = out / "http_report.json"
        bench = [sys.executable, "-m", "rigbench", "bench", "--url", base, "--model", args.model]
        bench += ["--concurrency", ",".join(str(c) for c, _ in args.http_cells)]
        bench += ["--input-len", str(args.input_len), "--output-len", str(args.output_len)]
        bench += ["--requests", str(args.http_requests), "--warmup", "4", "--out", str(report)]
        result["bench_command"] = " ".join(bench)
        done = subprocess.run(
            bench, cwd=REPO, timeout=max(10.0, deadline - time.monotonic()), check=False
        )
        result["bench_exit"] = done.returncode
        after = httpx.get(f"{base}/provenance", timeout=10).json()
        result["provenance"] = after
        result["compilations_during_sweep"] = int(after["compilations"]) - int(
            before["compilations"]
        )
        if report.is_file():
            cells = json.loads(report.read_text())["cells"]
            result["cells"] = {
                str(c["concurrency"]): {
                    "output_tok_s": c["output_tok_s"],
                    "tpot_ms_p50": c["tpot_ms"]["p50"],
                    "decode_tok_s_per_request_p50": round(1000 / c["tpot_ms"]["p50"], 1)
                    if c["tpot_ms"]["p50"]
                    else None,
                    "ttft_ms_p50": c["ttft_ms"]["p50"],
                    "requests_ok": c["requests_ok"],
                    "requests_failed": c["requests_failed"],
                }
                for c in cells
            }
    except Exception as err:
        result["error"] = f"{type(err).__name__}: {err}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
    return result


# --- the driver ----------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", default=os.environ.get("OUT", "jax-gpu-perf"))
    parser.add_argument("--model", default="random:e2b")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--max-slots", type=int, default=32)
    parser.add_argument("--steps-per-call", type=int, default=8)
    parser.add_argument("--input-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--budget-s", type=float, default=540.0, help="wall budget, all phases")
    parser.add_argument("--http-reserve-s", type=float, default=100.0, help="kept for phase 2")
    parser.add_argument("--phases", default="engine,http,cmdbuf")
    parser.add_argument(
        "--cmdbuf-min-s", type=float, default=60.0, help="budget left to run phase 3"
    )
    parser.add_argument("--quick", action="store_true", help="small cells (CPU smoke run)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--compile-cache", default=None, help="(default: a new, cold one)")
    parser.add_argument("--bandwidth-bytes", type=int, default=4 << 30, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.cells = [(1, 2), (2, 4)] if args.quick else [(1, 5), (8, 16), (32, 64)]
    args.http_cells = [(1, 0), (2, 0)] if args.quick else [(1, 0), (32, 0)]
    args.http_requests = 4 if args.quick else 32
    if args.quick:
        args.bandwidth_bytes = 64 << 20
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    if args.child == "engine":
        engine_phase(args, out)
        return
    if args.child == "cmdbuf":
        cmdbuf_phase(args, out)
        return
    if args.child == "profile":
        profile_phase(args, out)
        return

    started = time.monotonic()
    summary: dict[str, Any] = {"model": args.model, "dtype": args.dtype, "argv": sys.argv}
    from rigs.sources import resolve_model

    t = time.perf_counter()
    source = resolve_model(args.model, seed=0)
    summary["checkpoint"] = {"path": str(source.path), "revision": source.revision}
    summary["materialise_checkpoint_s"] = round(time.perf_counter() - t, 1)
    # cold for phase 1, warm for phase 2; --compile-cache: the server's (profile phase)
    cache = args.compile_cache or tempfile.mkdtemp(prefix="jax-compile-")
    passthrough = [
        "--model", args.model, "--dtype", args.dtype,
        "--max-model-len", str(args.max_model_len), "--max-slots", str(args.max_slots),
        "--steps-per-call", str(args.steps_per_call), "--compile-cache", cache,
        "--input-len", str(args.input_len), "--output-len", str(args.output_len),
    ]  # fmt: skip
    if args.quick:
        passthrough.append("--quick")
    phases = args.phases.split(",")
    if "engine" in phases:
        remaining = args.budget_s - (time.monotonic() - started)
        child = [sys.executable, __file__, str(out), "--child", "engine", *passthrough]
        try:
            reserve = args.http_reserve_s if "http" in phases else 0.0
            timeout = max(60.0, remaining - reserve)
            code = subprocess.run(child, cwd=REPO, timeout=timeout, check=False).returncode
            summary["engine_exit"] = code
        except subprocess.TimeoutExpired:
            summary["engine_exit"] = "timeout"
        if (out / "engine.json").is_file():
            summary["engine"] = json.loads((out / "engine.json").read_text())
    if "http" in phases:
        args.compile_cache = cache
        remaining = args.budget_s - (time.monotonic() - started)
        summary["http"] = http_phase(args, out, remaining - 10)
    if "profile" in phases:
        remaining = args.budget_s - (time.monotonic() - started)
        child = [sys.executable, __file__, str(out), "--child", "profile", *passthrough]
        try:
            code = subprocess.run(child, cwd=REPO, timeout=remaining, check=False).returncode
            summary["profile_exit"] = code
        except subprocess.TimeoutExpired:
            summary["profile_exit"] = "timeout"
        if (out / "profile.json").is_file():
            summary["profile"] = json.loads((out / "profile.json").read_text())
    remaining = args.budget_s - (time.monotonic() - started)
    if "cmdbuf" in phases and remaining < args.cmdbuf_min_s:
        summary["cmdbuf"] = {"skipped": f"{remaining:.0f} s of the budget left"}
    elif "cmdbuf" in phases:
        child = [sys.executable, __file__, str(out), "--child", "cmdbuf", *passthrough]
        try:
            code = subprocess.run(child, cwd=REPO, timeout=remaining, check=False).returncode
            summary["cmdbuf_exit"] = code
        except subprocess.TimeoutExpired:
            summary["cmdbuf_exit"] = "timeout"
        if (out / "cmdbuf.json").is_file():
            summary["cmdbuf"] = json.loads((out / "cmdbuf.json").read_text())
    summary["total_s"] = round(time.monotonic() - started, 1)
    (out / "perf.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
