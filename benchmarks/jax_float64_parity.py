"""Is the JAX port's float32 gap past the sliding window a porting difference? Run both in float64.

    python benchmarks/jax_float64_parity.py [--window 512] [--length 530] [--attn sdpa]

A Gemma 4 config with e2b's attention exactly (35 layers, 20 sharing KV, head dims
256/512, 8 query heads over 1 KV head, RoPE theta 1e4 / 1e6 with proportional partial
rotary 0.25 on global layers, double-wide MLP, soft-capped logits) but narrow widths (hidden
64, vocab 512) so float64 runs on a CPU. Random weights (norm scales around 1, layer
scalars in [0.5, 1.5]). Prints, per window of positions, the largest |JAX - transformers|
over the largest |logit|, both in float64; then each side in float32 against that float64
truth.

transformers keeps float32 pockets in a float64 model (norms, q/k/v, softmax, RoPE
angles and its float32 `inv_freq` buffer); they are widened here, so the reference is
float64 throughout. Measured on the CPU (transformers 5.17, jax 0.10.2): float64 agrees
to 1e-13 (window 8, 43 tokens) and 3e-12 (window 512, 530 tokens) at every position, so
no porting difference; in float32 each side is about 1e-3 of the largest logit from the
float64 truth at 530 tokens, neither side closer.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
E2B = Path(__file__).resolve().parents[1] / "rigs" / "configs" / "e2b.json"
_ORIGINAL: dict[str, Any] = {}


def widen_transformers(on: bool) -> None:
    """Make transformers' float32 pockets float64 in a float64 model (on), or undo it."""
    import torch
    from transformers.models.gemma4 import modeling_gemma4 as mg

    if not _ORIGINAL:
        _ORIGINAL.update(
            float=torch.Tensor.float,
            softmax=torch.nn.functional.softmax,
            rope=mg.Gemma4TextRotaryEmbedding.forward,
        )
    float32, softmax32 = _ORIGINAL["float"], _ORIGINAL["softmax"]

    def as_float(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self if self.dtype == torch.float64 else float32(self, *args, **kwargs)

    def softmax(x: Any, dim: Any = None, dtype: Any = None, **kw: Any) -> Any:
        return softmax32(x, dim=dim, dtype=None if x.dtype == torch.float64 else dtype, **kw)

    @torch.no_grad()
    def rope(self: Any, x: Any, position_ids: Any, layer_type: str) -> Any:
        inv32 = getattr(self, f"{layer_type}_inv_freq").double()
        theta = self.config.rope_parameters[layer_type]["rope_theta"]
        dim = self.config.per_layer_config[layer_type].head_dim
        # the buffer holds theta ** (-2i / dim) rounded to float32: recover 2i, redo in float64
        two_i = torch.round(-torch.log(inv32.clamp_min(1e-30)) / math.log(theta) * dim)
        inv = torch.where(inv32 > 0, theta ** (-two_i / dim), torch.zeros_like(inv32))
        scale = getattr(self, f"{layer_type}_attention_scaling")
        emb = position_ids[..., None].double() * inv
        emb = torch.cat((emb, emb), dim=-1)
        return (emb.cos() * scale).to(x.dtype), (emb.sin() * scale).to(x.dtype)

    torch.Tensor.float = as_float if on else float32
    torch.nn.functional.softmax = softmax if on else softmax32
    mg.F.softmax = torch.nn.functional.softmax
    mg.Gemma4TextRotaryEmbedding.forward = rope if on else _ORIGINAL["rope"]


def reference(window: int, attn: str) -> Any:
    import torch
    import transformers

    raw = json.loads(E2B.read_text())
    for key in ("architectures", "model_type"):
        raw.pop(key, None)
    raw.update(
        vocab_size=512,
        vocab_size_per_layer_input=512,
        hidden_size=64,
        intermediate_size=128,
        hidden_size_per_layer_input=16,
        sliding_window=window,
    )
    config = transformers.Gemma4TextConfig(**raw, attn_implementation=attn)
    torch.manual_seed(0)
    ref = transformers.Gemma4ForCausalLM(config).eval().double()
    with torch.no_grad():
        for name, p in ref.named_parameters():
            p.copy_(1 + 0.3 * torch.randn_like(p)) if "norm" in name else p.normal_(0, 0.15)
        for name, b in ref.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(0.5 + torch.rand_like(b))
    return ref


def rel(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Per position: max |got - ref| / max |ref| (over the whole prompt)."""
    return np.asarray(np.abs(got - ref).max(-1)[0] / np.abs(ref).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--length", type=int, default=530)
    parser.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    args = parser.parse_args()
    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import torch

    from rigs.jax import checkpoint, model

    torch.set_num_threads(1)
    ref = reference(args.window, args.attn)
    ids = torch.randint(3, 512, (1, args.length), generator=torch.Generator().manual_seed(1))
    forward = jax.jit(model.forward_logits, static_argnums=1)
    with tempfile.TemporaryDirectory() as directory:
        ref.save_pretrained(directory)
        cfg = checkpoint.load_config(directory)
        widen_transformers(True)
        with torch.no_grad():
            truth = ref(ids).logits.numpy()
        jax64 = np.asarray(
            forward(checkpoint.load_params(directory, cfg, jnp.float64), cfg, ids.numpy())
        )
        widen_transformers(False)
        with torch.no_grad():
            torch32 = ref.float()(ids).logits.double().numpy()
        params32 = checkpoint.load_params(directory, cfg, jnp.float32)
        jax32 = np.asarray(forward(params32, cfg, ids.numpy())).astype(np.float64)
    err = rel(jax64, truth)
    w = args.window
    for start in range(0, args.length, w):
        last = min(args.length, start + w) - 1
        print(f"float64 positions {start}-{last}: {err[start : last + 1].max():.3e}")
    for name, got in (("transformers float32", torch32), ("jax float32", jax32)):
        e = rel(got, truth)
        print(f"{name} vs float64: position 4 {e[4]:.3e}, last {e[-1]:.3e}, max {e.max():.3e}")
    e = rel(jax32, torch32)
    print(f"jax float32 vs transformers float32: position 4 {e[4]:.3e}, last {e[-1]:.3e}")


if __name__ == "__main__":
    main()
