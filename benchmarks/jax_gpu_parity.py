"""Greedy parity of the JAX rig's engine with transformers on the same checkpoint.

    python benchmarks/jax_gpu_parity.py OUT_DIR            # GPU: random:e2b in bfloat16
    python benchmarks/jax_gpu_parity.py OUT_DIR --model random:tiny --dtype float32  # CPU check

For each prompt (lengths chosen to cross the 512-token sliding window), transformers'
greedy `generate` and the JAX engine (all prompts batched in its slots) each produce
`--tokens` tokens. Writes OUT_DIR/parity.json: per prompt the two token lists, the first
divergence and, there, each side's logit margin between the two candidate tokens (a
margin near bfloat16's resolution means a near tie, not a bug), plus the relative error of
the first step's logits.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

# Torch holds the model first; XLA must not grab most of the GPU while it does.
os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.6")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

LENGTHS = (5, 48, 300, 511, 512, 530, 900, 1500)


def transformers_reference(
    path: Path, prompts: list[list[int]], tokens: int, dtype: str, device: str
) -> list[dict[str, Any]]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    model = model.to(device).eval()
    out = []
    for prompt in prompts:
        with torch.inference_mode():
            result = model.generate(
                torch.tensor([prompt], device=device),
                max_new_tokens=tokens,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
                return_dict_in_generate=True,
                output_logits=True,
            )
        logits = torch.cat([step.float() for step in result.logits]).cpu().numpy()  # [N, V]
        out.append({"tokens": result.sequences[0, len(prompt) :].tolist(), "logits": logits})
    del model
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", default=os.environ.get("OUT", "jax-gpu-parity"))
    parser.add_argument("--model", default="random:e2b")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    from rigs.sources import resolve_model

    source = resolve_model(args.model, seed=args.seed)
    materialised = time.perf_counter() - started
    config = json.loads((source.path / "config.json").read_text())
    vocab = int(config.get("text_config", config)["vocab_size"])
    rng = np.random.default_rng(1234)
    lengths = [int(n) for n in args.lengths.split(",")]
    prompts = [[2, *rng.integers(3, vocab, size=n - 1).tolist()] for n in lengths]

    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    t = time.perf_counter()
    refs = transformers_reference(source.path, prompts, args.tokens, args.dtype, device)
    reference_s = time.perf_counter() - t

    import jax
    import jax.numpy as jnp

    from rigs.jax import checkpoint, model
    from rigs.jax.engine import EngineOptions, JaxEngine
    from rigs.serving.engine import SamplingParams

    t = time.perf_counter()
    cfg = checkpoint.load_config(source.path)
    params = checkpoint.load_params(source.path, cfg, jnp.dtype(args.dtype))
    jax.block_until_ready(params)
    load_s = time.perf_counter() - t
    max_len = 1 << (max(lengths) + args.tokens).bit_length()
    options = EngineOptions(
        max_slots=len(prompts),
        max_model_len=max_len,
        steps_per_call=8,
        prompt_buckets=tuple(sorted({b for b in (64, 512, 1024, 2048) if b < max_len} | {max_len})),
        slot_widths=(len(prompts),),
    )
    engine = JaxEngine(params, cfg, options, model_name=args.model)
    t = time.perf_counter()
    engine.start()
    engine.wait_ready()
    warm_s = time.perf_counter() - t

    async def run_all() -> list[list[int]]:
        greedy = SamplingParams(max_tokens=args.tokens, ignore_eos=True)

        async def one(p: list[int]) -> list[int]:
            return [tok async for tok in engine.generate(p, greedy)]

        return list(await asyncio.gather(*(one(p) for p in prompts)))

    got = asyncio.run(run_all())
    engine.close()

    # JAX logits at one position: a full forward over the prompt plus the tokens before it.
    @jax.jit
    def logits_at(params: model.Params, tokens: jax.Array, position: jax.Array) -> jax.Array:
        hidden, _ = model.forward(params, cfg, tokens)
        return model.logits_from_hidden(params, cfg, hidden[:, position])[0]

    def jax_logits(sequence: list[int]) -> Any:
        padded = np.zeros((1, max_len), np.int32)
        padded[0, : len(sequence)] = sequence
        return np.asarray(logits_at(params, padded, np.int32(len(sequence) - 1)), np.float32)

    results = []
    for prompt, ref, tokens in zip(prompts, refs, got, strict=True):
        row: dict[str, Any] = {
            "prompt_len": len(prompt),
            "transformers": ref["tokens"],
            "jax": tokens,
            "agree": ref["tokens"] == tokens,
            "matching_prefix": next(
                (i for i, (a, b) in enumerate(zip(ref["tokens"], tokens, strict=False)) if a != b),
                min(len(ref["tokens"]), len(tokens)),
            ),
        }
        first = jax_logits(prompt)
        ref0 = ref["logits"][0]
        row["step0_rel_err"] = float(np.abs(first - ref0).max() / np.abs(ref0).max())
        row["step0_top1_agree"] = int(first.argmax()) == int(ref0.argmax())
        if not row["agree"]:
            d = row["matching_prefix"]
            if d < min(len(tokens), len(ref["tokens"])):
                a, b = ref["tokens"][d], tokens[d]  # transformers' choice, JAX's choice
                ref_d = ref["logits"][d]
                jl = jax_logits(prompt + tokens[:d])
                top2 = np.sort(ref_d)[-2:]
                row["divergence"] = {
                    "step": d,
                    "transformers_token": a,
                    "jax_token": b,
                    "transformers_margin": float(ref_d[a] - ref_d[b]),
                    "jax_margin": float(jl[b] - jl[a]),
                    "transformers_top2_gap": float(top2[1] - top2[0]),
                }
        results.append(row)
        print(
            f"prompt {len(prompt):5d}: agree={row['agree']} prefix={row['matching_prefix']}"
            f" step0_rel_err={row['step0_rel_err']:.2e} {row.get('divergence', '')}",
            flush=True,
        )

    summary = {
        "model": args.model,
        "revision": source.revision,
        "dtype": args.dtype,
        "device": str(jax.devices()[0].device_kind),
        "torch_device": device,
        "tokens_per_prompt": args.tokens,
        "prompts": len(prompts),
        "prompts_agreeing": sum(r["agree"] for r in results),
        "tokens_matching_before_divergence": sum(r["matching_prefix"] for r in results),
        "seconds": {
            "materialise_checkpoint": round(materialised, 1),
            "transformers_reference": round(reference_s, 1),
            "jax_load": round(load_s, 1),
            "jax_warm_up": round(warm_s, 1),
            "total": round(time.perf_counter() - started, 1),
        },
        "provenance": dict(engine.provenance()),
        "results": results,
    }
    (out_dir / "parity.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({k: v for k, v in summary.items() if k != "results"}, indent=1))


if __name__ == "__main__":
    main()
