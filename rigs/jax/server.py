"""The JAX rig's server: `python -m rigs.jax.server --model SPEC [--port 8000] ...`.

Loading (resolve the model, read the checkpoint onto the device, compile every bucket)
runs in the background while the socket already answers; `/health` stays 503 until the
shared app's warm-up generation has succeeded after compilation.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from dataclasses import replace
from pathlib import Path

from rigs.jax import xla_flags
from rigs.registry import get_rig
from rigs.serving import marks
from rigs.serving.engine import Engine
from rigs.serving.serve import serve_options
from rigs.serving.sizing import AUTO, auto_slots, slots_arg
from rigs.serving.tokenizer import ServingTokenizer
from rigs.settings import add_options
from rigs.sources import cache_root, resolve_model

DTYPES = ("float32", "bfloat16", "float16")
log = logging.getLogger("rigs.jax")
RIG = get_rig("jax")


def buckets_arg(value: str) -> tuple[int, ...]:
    """--prompt-buckets: 'auto' (empty: the engine's ladder) or prompt lengths, rising."""
    if value == "auto":
        return ()
    try:
        buckets = tuple(int(part) for part in value.split(","))
    except ValueError:
        buckets = ()
    if not buckets or buckets[0] < 1 or list(buckets) != sorted(set(buckets)):
        raise argparse.ArgumentTypeError(
            "--prompt-buckets must be 'auto' or prompt lengths rising from >= 1, such as"
            f" 64,512; got {value!r}"
        )
    return buckets


def served_buckets(asked: tuple[int, ...], max_model_len: int) -> tuple[int, ...]:
    """The asked prompt buckets below the served context, then the context itself (so every
    prompt it takes has one); () for the engine's ladder."""
    if not asked:
        return ()
    below = tuple(b for b in asked if b < max_model_len)
    if len(below) < len(asked):
        log.warning(
            "--prompt-buckets %s reach the served max_model_len %d: using %s",
            ",".join(map(str, asked)),
            max_model_len,
            ",".join(map(str, (*below, max_model_len))),
        )
    return (*below, max_model_len)


def pick_dtype(requested: str, platform: str, compute_capability: str | None) -> str:
    """ "auto": bfloat16 on GPUs that have it (sm_80+), float16 before, float32 on CPU."""
    if requested != "auto":
        return requested
    if platform != "gpu":
        return "float32"
    if compute_capability is not None and float(compute_capability) < 8.0:
        return "float16"
    return "bfloat16"


def eos_ids(directory: Path) -> frozenset[int]:
    """EOS ids from config.json and generation_config.json (instruct models add some)."""
    ids: set[int] = set()
    for name in ("config.json", "generation_config.json"):
        path = directory / name
        if path.is_file():
            raw = json.loads(path.read_text())
            value = raw.get("text_config", raw).get("eos_token_id")
            ids.update([value] if isinstance(value, int) else value or [])
    return frozenset(ids)


def true_max_model_len(requested: int, max_position_embeddings: int) -> int:
    """The context the rig serves (and advertises): `--max-model-len`, but never past the
    model's trained positions."""
    if requested > max_position_embeddings:
        log.warning(
            "--max-model-len %d exceeds the model's max_position_embeddings %d: serving %d",
            requested,
            max_position_embeddings,
            max_position_embeddings,
        )
    return min(requested, max_position_embeddings)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="rigs.jax.server", description=__doc__)
    parser.add_argument("--model", required=True, help="random:tiny, a directory or a hub id")
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0: every interface")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--dtype", default="auto", choices=["auto", *DTYPES])
    # The tuned settings, their types, bounds and defaults: rigs/jax/rig.toml, one place.
    add_options(
        parser,
        RIG.name,
        RIG.serve.settings,
        converters={"max_slots": slots_arg, "prompt_buckets": buckets_arg},
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of random:* weights")
    parser.add_argument(
        "--compile-cache",
        default=os.environ.get("RIGBENCH_JAX_COMPILE_CACHE", str(cache_root() / "jax-programs")),
        help="the engine's compiled programs, kept to load at the next start without tracing or "
        "compiling them (rigs/jax/executables.py; '' to disable; env RIGBENCH_JAX_COMPILE_CACHE)",
    )
    parser.add_argument("--served-model-name", action="append", default=[], help="repeatable")
    args = parser.parse_args(argv)
    xla_flags.configure()  # before JAX starts its backend (build_engine imports it)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")

    def load() -> tuple[Engine, ServingTokenizer]:
        engine, source_path = build_engine(args)
        return engine, ServingTokenizer.from_pretrained(source_path)

    serve_options(load, args)


def build_engine(args: argparse.Namespace) -> tuple[Engine, Path]:
    """Resolve, load and warm up (compile every bucket); returns when ready."""
    import jax

    from rigs.jax import checkpoint, compiles, model
    from rigs.jax.engine import EngineOptions, JaxEngine

    compiles.install()
    source = resolve_model(args.model, seed=args.seed)
    marks.mark("model_on_disk")
    device = jax.devices()[0]
    capability = getattr(device, "compute_capability", None)
    dtype = pick_dtype(args.dtype, device.platform, capability)
    cfg = replace(checkpoint.load_config(source.path), kernels=args.kernels)
    log.info("loading %s (%s) as %s onto %s", source.spec, source.path, dtype, device)
    params = checkpoint.load_params(source.path, cfg, dtype, device=device)
    marks.mark("weights_loaded")
    max_model_len = true_max_model_len(args.max_model_len, cfg.max_position_embeddings)
    slots = args.max_slots
    if slots == AUTO:
        stats = device.memory_stats()
        free = stats["bytes_limit"] - stats["bytes_in_use"] if stats else None
        one = jax.eval_shape(lambda: model.init_cache(cfg, 1, max_model_len, dtype))
        per_slot = sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(one))
        slots = auto_slots(free, per_slot)
        log.info("max_slots auto: %d (%s bytes free, %d per slot)", slots, free, per_slot)
    options = EngineOptions(
        max_slots=slots,
        max_model_len=max_model_len,
        steps_per_call=args.steps_per_call,
        prompt_buckets=served_buckets(args.prompt_buckets, max_model_len),
        batched_prefill_max_len=args.batched_prefill_max_len,
    )
    engine = JaxEngine(
        params,
        cfg,
        options,
        model_name=source.name,
        model_revision=source.revision,
        eos_token_ids=eos_ids(source.path) or None,
        device=device,
        executable_cache=Path(args.compile_cache) if args.compile_cache else None,
    )
    engine.start()
    engine.wait_ready()
    marks.mark("compiled")
    log.info("compiled and warm: %s", dict(engine.provenance()))
    return engine, source.path


if __name__ == "__main__":
    main()
