"""How far bfloat16 moves each runtime's logits from float32, on the same checkpoint.

    python benchmarks/jax_gpu_precision.py OUT_DIR [--model random:e2b]

First-step logits for prompts on both sides of the sliding window, from transformers and
the JAX model, each in float32 (matmuls at full precision: no TF32) and in bfloat16.
Writes OUT_DIR/precision.json with every pairwise max-abs error relative to the largest
float32 logit, and whether the top-1 tokens agree. If JAX float32 matches transformers
float32 while both bfloat16 runs sit far from it, greedy disagreement in bfloat16 is
rounding in a model with near-tied logits (random weights), not a porting error.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5")
os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

LENGTHS = (5, 300, 530, 900)


def torch_logits(path: Path, prompts: list[list[int]], dtype: str) -> list[np.ndarray]:
    import torch
    from transformers import AutoModelForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).to(device)
    out = []
    with torch.inference_mode():
        for prompt in prompts:
            logits = model(torch.tensor([prompt], device=device)).logits[0, -1]
            out.append(logits.float().cpu().numpy())
    del model
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return out


def jax_logits(path: Path, prompts: list[list[int]], dtype: str) -> list[np.ndarray]:
    import jax.numpy as jnp

    from rigs.jax import checkpoint
    from rigs.jax import model as gemma

    cfg = checkpoint.load_config(path)
    params = checkpoint.load_params(path, cfg, getattr(jnp, dtype))
    out = []
    for prompt in prompts:
        logits = gemma.forward_logits(params, cfg, jnp.asarray([prompt]))[0, -1]
        out.append(np.asarray(logits.astype(jnp.float32)))
    del params
    gc.collect()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=os.environ.get("OUT", "jax-gpu-precision"))
    parser.add_argument("--model", default="random:e2b")
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    args = parser.parse_args()

    from rigs.sources import resolve_model

    path = resolve_model(args.model).path
    rng = np.random.default_rng(0)
    vocab = json.loads((path / "config.json").read_text())["vocab_size"]
    lengths = [int(n) for n in args.lengths.split(",")]
    prompts = [[2, *rng.integers(3, vocab, n - 1).tolist()] for n in lengths]

    runs = {
        "torch_float32": torch_logits(path, prompts, "float32"),
        "torch_bfloat16": torch_logits(path, prompts, "bfloat16"),
        "jax_float32": jax_logits(path, prompts, "float32"),
        "jax_bfloat16": jax_logits(path, prompts, "bfloat16"),
    }
    reference = runs["torch_float32"]
    results: list[dict[str, Any]] = []
    for i, n in enumerate(lengths):
        scale = float(np.abs(reference[i]).max())
        row: dict[str, Any] = {"prompt_len": n, "top1": {}, "rel_err_vs_torch_float32": {}}
        for name, logits in runs.items():
            row["top1"][name] = int(np.argmax(logits[i]))
            row["rel_err_vs_torch_float32"][name] = float(
                np.abs(logits[i] - reference[i]).max() / scale
            )
        row["jax_bf16_vs_torch_bf16"] = float(
            np.abs(runs["jax_bfloat16"][i] - runs["torch_bfloat16"][i]).max() / scale
        )
        results.append(row)
        print(json.dumps(row))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "precision.json").write_text(
        json.dumps({"model": args.model, "results": results}, indent=1)
    )


if __name__ == "__main__":
    main()
