"""The Gemma 4 text decoder in JAX, read top to bottom.

Config, weights (shapes declared once), KV cache, pure functions (`rms_norm`, `rope`,
`attend`, `forward_layer`), then `forward` (no cache, for tests), `prefill` and
`decode_step`. transformers' `modeling_gemma4.py` is the reference for every formula.

Shape letters: B batch (or slots), T query tokens, S cached positions, D hidden,
H query heads, K key/value heads, G = H // K, E head dim, F MLP width, L layers,
P per-layer-input width, V vocabulary.

Weights keep the checkpoint's [out, in] layout ("fd"), so loading copies nothing but the
bytes. Query, key and value projections are fused into one matrix per layer and gate/up
into another, so a decode step launches fewer, larger matrix-vector products.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array

from rigs.jax import gemv

SLIDING = "sliding_attention"
FULL = "full_attention"


# --- config ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Rope:
    theta: float
    partial_factor: float = 1.0  # "proportional": share of frequency pairs that rotate
    factor: float = 1.0  # divides the inverse frequencies ("proportional" only)


@dataclass(frozen=True)
class Config:
    vocab_size: int
    hidden_size: int  # D
    intermediate_size: int  # F (doubled on KV-sharing layers when use_double_wide_mlp)
    num_layers: int  # L
    num_heads: int  # H
    layer_types: tuple[str, ...]  # SLIDING or FULL per layer
    head_dims: tuple[int, ...]  # E per layer (sliding 256, global 512 in E2B)
    num_kv_heads: tuple[int, ...]  # K per layer
    sliding_window: int
    num_kv_shared_layers: int
    per_layer_input_size: int  # P (0: no per-layer inputs)
    per_layer_vocab_size: int
    final_logit_softcap: float | None
    use_double_wide_mlp: bool
    tie_word_embeddings: bool
    rms_norm_eps: float
    rope_sliding: Rope
    rope_full: Rope
    eos_token_ids: tuple[int, ...] = (1,)
    max_position_embeddings: int = 131_072  # positions past it were never trained
    # How decode steps compute their weight products (rigs/jax/gemv.py: "xla" or "pallas");
    # prefill, whose products have many rows, always uses XLA's.
    kernels: str = "xla"

    def __post_init__(self) -> None:
        if self.kernels not in gemv.KERNELS:
            raise ValueError(f"Config.kernels must be one of {gemv.KERNELS}, got {self.kernels!r}")

    def rope(self, kind: str) -> Rope:
        return self.rope_sliding if kind == SLIDING else self.rope_full

    @property
    def first_shared_layer(self) -> int:
        return self.num_layers - self.num_kv_shared_layers

    def is_shared(self, i: int) -> bool:
        return self.num_kv_shared_layers > 0 and i >= self.first_shared_layer

    @property
    def kv_source(self) -> tuple[int, ...]:
        """For each layer, the layer whose keys and values it attends to.

        A KV-sharing layer reads the last non-shared layer of its own type."""
        out = []
        for i, kind in enumerate(self.layer_types):
            if not self.is_shared(i):
                out.append(i)
                continue
            earlier = [j for j in range(self.first_shared_layer) if self.layer_types[j] == kind]
            if not earlier:
                raise ValueError(f"layer {i} shares KV but no earlier {kind} layer exists")
            out.append(earlier[-1])
        return tuple(out)

    @property
    def cache_layers(self) -> tuple[int, ...]:
        """Layers that produce a KV cache (every layer before the sharing ones)."""
        return tuple(i for i in range(self.num_layers) if not self.is_shared(i))

    def mlp_width(self, i: int) -> int:
        wide = self.use_double_wide_mlp and self.is_shared(i)
        return self.intermediate_size * (2 if wide else 1)

    @staticmethod
    def from_hf(raw: Mapping[str, Any]) -> Config:
        """Build from a transformers config.json dict (Gemma4TextConfig, or a Gemma4Config
        whose `text_config` holds it). Anything this port does not implement is refused."""
        c: dict[str, Any] = dict(raw.get("text_config", raw))
        if c.get("model_type") not in ("gemma4_text", None):
            raise ValueError(f"model_type {c.get('model_type')!r} is not gemma4_text")
        for key, ok in (
            ("enable_moe_block", False),
            ("attention_k_eq_v", False),
            ("attention_bias", False),
            ("use_bidirectional_attention", None),
        ):
            if c.get(key, ok) != ok:
                raise ValueError(f"config {key}={c[key]!r} is not supported by the JAX port")
        if c.get("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
            raise ValueError(f"hidden_activation {c['hidden_activation']!r} is not supported")
        n = int(c["num_hidden_layers"])
        types = tuple(c["layer_types"])
        if len(types) != n or set(types) - {SLIDING, FULL}:
            raise ValueError(f"layer_types must be {n} of {SLIDING!r}/{FULL!r}, got {types}")
        head_dim = int(c["head_dim"])
        kv_heads = int(c["num_key_value_heads"])
        # config.json from save_pretrained has per_layer_config; the constructor kwargs
        # (rigs/configs/e2b.json) have global_head_dim.
        overrides: dict[int, dict[str, int]] = {
            int(k): v for k, v in (c.get("per_layer_config") or {}).items()
        }
        if not overrides:
            global_dim = int(c.get("global_head_dim", 512))
            overrides = {i: {"head_dim": global_dim} for i, t in enumerate(types) if t == FULL}
        head_dims = tuple(int(overrides.get(i, {}).get("head_dim", head_dim)) for i in range(n))
        kv = tuple(int(overrides.get(i, {}).get("num_key_value_heads", kv_heads)) for i in range(n))
        rope = c.get("rope_parameters") or {
            SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},
            FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6},
        }
        ropes = {}
        for kind in (SLIDING, FULL):
            p: dict[str, Any] = rope.get(kind) or rope[SLIDING]
            if p.get("rope_type", "default") not in ("default", "proportional"):
                raise ValueError(f"rope_type {p['rope_type']!r} for {kind} is not supported")
            if p.get("rope_type") == "proportional":
                partial, factor = p.get("partial_rotary_factor", 1.0), p.get("factor", 1.0)
                ropes[kind] = Rope(float(p["rope_theta"]), float(partial), float(factor))
            else:
                ropes[kind] = Rope(float(p["rope_theta"]))
        eos = c.get("eos_token_id", 1)
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
        return Config(
            vocab_size=int(c["vocab_size"]),
            hidden_size=int(c["hidden_size"]),
            intermediate_size=int(c["intermediate_size"]),
            num_layers=n,
            num_heads=int(c["num_attention_heads"]),
            layer_types=types,
            head_dims=head_dims,
            num_kv_heads=kv,
            sliding_window=int(c["sliding_window"]),
            num_kv_shared_layers=int(c.get("num_kv_shared_layers", 0)),
            per_layer_input_size=int(c.get("hidden_size_per_layer_input") or 0),
            per_layer_vocab_size=int(c.get("vocab_size_per_layer_input", c["vocab_size"])),
            final_logit_softcap=c.get("final_logit_softcapping"),
            use_double_wide_mlp=bool(c.get("use_double_wide_mlp", False)),
            tie_word_embeddings=bool(c.get("tie_word_embeddings", True)),
            rms_norm_eps=float(c.get("rms_norm_eps", 1e-6)),
            rope_sliding=ropes[SLIDING],
            rope_full=ropes[FULL],
            eos_token_ids=eos_ids,
            max_position_embeddings=int(c.get("max_position_embeddings", 131_072)),
        )


# --- weights --------------------------------------------------------------------------


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Layer:
    w_qkv: Array  # [(H + 2K) * E, D]; shared layers: [H * E, D] (queries only)
    q_norm: Array  # [E]
    k_norm: Array | None  # [E]; None on shared layers
    w_o: Array  # [D, H * E]
    w_gate_up: Array  # [2F, D]: gate rows then up rows
    w_down: Array  # [D, F]
    ln_attn_in: Array  # [D]
    ln_attn_out: Array  # [D]
    ln_mlp_in: Array  # [D]
    ln_mlp_out: Array  # [D]
    w_ple_gate: Array | None  # [P, D]
    w_ple_proj: Array | None  # [D, P]
    ln_ple: Array | None  # [D]
    scalar: Array  # [1]


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Params:
    embed: Array  # [V, D]; also the output projection when embeddings are tied
    ple_embed: Array | None  # [Vp, L * P]
    ple_proj: Array | None  # [L * P, D]
    ple_norm: Array | None  # [P]
    final_norm: Array  # [D]
    lm_head: Array | None  # [V, D] only when embeddings are not tied
    layers: tuple[Layer, ...]


def layer_shapes(cfg: Config, i: int) -> dict[str, tuple[int, ...] | None]:
    """The shape of every weight of layer i (None: absent)."""
    d, h, k, e, f, p = (
        cfg.hidden_size,
        cfg.num_heads,
        cfg.num_kv_heads[i],
        cfg.head_dims[i],
        cfg.mlp_width(i),
        cfg.per_layer_input_size,
    )
    shared = cfg.is_shared(i)
    return {
        "w_qkv": ((h * e if shared else (h + 2 * k) * e), d),
        "q_norm": (e,),
        "k_norm": None if shared else (e,),
        "w_o": (d, h * e),
        "w_gate_up": (2 * f, d),
        "w_down": (d, f),
        "ln_attn_in": (d,),
        "ln_attn_out": (d,),
        "ln_mlp_in": (d,),
        "ln_mlp_out": (d,),
        "w_ple_gate": (p, d) if p else None,
        "w_ple_proj": (d, p) if p else None,
        "ln_ple": (d,) if p else None,
        "scalar": (1,),
    }


def param_shapes(cfg: Config) -> dict[str, tuple[int, ...] | None]:
    """The shape of every top-level weight (None: absent)."""
    d, p, n = cfg.hidden_size, cfg.per_layer_input_size, cfg.num_layers
    return {
        "embed": (cfg.vocab_size, d),
        "ple_embed": (cfg.per_layer_vocab_size, n * p) if p else None,
        "ple_proj": (n * p, d) if p else None,
        "ple_norm": (p,) if p else None,
        "final_norm": (d,),
        "lm_head": None if cfg.tie_word_embeddings else (cfg.vocab_size, d),
    }


def init_params(cfg: Config, key: Array, dtype: Any = jnp.bfloat16) -> Params:
    """Random weights like transformers' init (normal 0.02, norms 1), made on the device."""
    keys = iter(jax.random.split(key, 64 * (cfg.num_layers + 1)))

    def make(name: str, shape: tuple[int, ...] | None) -> Any:
        if shape is None:
            return None
        if name.startswith(("ln_", "q_norm", "k_norm", "final_norm", "ple_norm", "scalar")):
            return jnp.ones(shape, dtype)
        return (0.02 * jax.random.normal(next(keys), shape, jnp.float32)).astype(dtype)

    layers = tuple(
        Layer(**{n: make(n, s) for n, s in layer_shapes(cfg, i).items()})
        for i in range(cfg.num_layers)
    )
    return Params(**{n: make(n, s) for n, s in param_shapes(cfg).items()}, layers=layers)


# --- KV cache -------------------------------------------------------------------------


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class KVCache:
    """Keys and values of the layers in `cfg.cache_layers`, per slot.

    Sliding layers keep a ring of `sliding_window` positions (position p at p % window);
    global layers keep every position up to `max_len`. KV-sharing layers own no cache."""

    k: tuple[Array, ...]  # per cache layer [S, C, K, E]; C = window (sliding) or max_len
    v: tuple[Array, ...]  # same


def cache_length(cfg: Config, i: int, max_len: int) -> int:
    return min(cfg.sliding_window, max_len) if cfg.layer_types[i] == SLIDING else max_len


def init_cache(cfg: Config, slots: int, max_len: int, dtype: Any) -> KVCache:
    shapes = [
        (slots, cache_length(cfg, i, max_len), cfg.num_kv_heads[i], cfg.head_dims[i])
        for i in cfg.cache_layers
    ]
    return KVCache(
        k=tuple(jnp.zeros(s, dtype) for s in shapes), v=tuple(jnp.zeros(s, dtype) for s in shapes)
    )


# --- pure functions -------------------------------------------------------------------


def wide(dtype: Any) -> Any:
    """The dtype norms, RoPE angles, softmax and logits are computed in: float32, or float64
    for a float64 model (parity experiments with jax_enable_x64)."""
    return jnp.promote_types(dtype, jnp.float32)


def rms_norm(x: Array, w: Array | None, eps: float) -> Array:
    """RMSNorm in float32, scaled by w itself (Gemma 4 has no 1 + w offset)."""
    xf = x.astype(wide(x.dtype))
    y = xf * jnp.power(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps, -0.5)
    if w is not None:
        y = y * w.astype(xf.dtype)
    return y.astype(x.dtype)


def inv_freq(cfg: Config, kind: str, head_dim: int, dtype: Any = jnp.float32) -> Array:
    """[E/2] inverse frequencies. "proportional" RoPE (global layers) rotates only the
    first partial_factor * E/2 frequency pairs, with exponents over the full head dim;
    the rest have frequency 0 (cos 1, sin 0: passed through)."""
    r = cfg.rope(kind)
    rotated = int(r.partial_factor * head_dim // 2)
    exps = jnp.arange(0, 2 * rotated, 2, dtype=wide(dtype)) / head_dim
    freqs = 1.0 / (r.theta**exps)
    freqs = jnp.concatenate([freqs, jnp.zeros(head_dim // 2 - rotated, freqs.dtype)])
    return freqs / r.factor


def rope(x: Array, positions: Array, freqs: Array) -> Array:
    """x [B, T, N, E] rotated by positions [B, T] (rotate-half convention)."""
    angles = positions.astype(wide(x.dtype))[..., None] * freqs  # [B, T, E/2]
    angles = jnp.concatenate([angles, angles], axis=-1)[:, :, None, :]  # [B, T, 1, E]
    cos, sin = jnp.cos(angles).astype(x.dtype), jnp.sin(angles).astype(x.dtype)
    half = x.shape[-1] // 2
    rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def attend(q: Array, k: Array, v: Array, mask: Array) -> Array:
    """q [B, T, H, E], k/v [B, S, K, E], mask [B, T, S] -> [B, T, H * E].

    Gemma 4 scales scores by 1 (q and k are RMS-normalised); softmax in float32."""
    b, t, h, e = q.shape
    kv_heads = k.shape[2]
    q = q.reshape(b, t, kv_heads, h // kv_heads, e)
    scores = jnp.einsum("btkge,bske->bkgts", q, k, preferred_element_type=wide(q.dtype))
    scores = jnp.where(mask[:, None, None, :, :], scores, -jnp.inf)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("bkgts,bske->btkge", probs, v)
    return out.reshape(b, t, h * e)


def embed(
    params: Params, cfg: Config, tokens: Array, kernels: str = "xla"
) -> tuple[Array, Array | None]:
    """tokens [B, T] -> hidden [B, T, D] and per-layer inputs [B, T, L, P].

    `kernels`: how the weight products are computed (`gemv.project`), here and below."""
    dtype = params.embed.dtype
    x = params.embed[tokens] * jnp.asarray(math.sqrt(cfg.hidden_size), dtype)
    if not cfg.per_layer_input_size:
        return x, None
    b, t = tokens.shape
    n, p = cfg.num_layers, cfg.per_layer_input_size
    assert params.ple_embed is not None
    assert params.ple_proj is not None
    by_token = params.ple_embed[tokens] * jnp.asarray(math.sqrt(p), dtype)
    by_token = by_token.reshape(b, t, n, p)
    by_context = gemv.project(x, params.ple_proj, kernels) * cfg.hidden_size**-0.5
    by_context = rms_norm(by_context.reshape(b, t, n, p), params.ple_norm, cfg.rms_norm_eps)
    return x, (by_context + by_token) * 2.0**-0.5


def project_qkv(
    w: Layer, cfg: Config, i: int, x: Array, positions: Array, kernels: str = "xla"
) -> tuple[Array, Array | None, Array | None]:
    """x [B, T, D] (normed) -> q [B, T, H, E], k and v [B, T, K, E] (None on shared layers),
    with q/k RMS-normed and rotated, v RMS-normed without a scale."""
    b, t, _ = x.shape
    h, k, e = cfg.num_heads, cfg.num_kv_heads[i], cfg.head_dims[i]
    qkv = gemv.project(x, w.w_qkv, kernels)  # [B, T, (H + 2K) * E]
    freqs = inv_freq(cfg, cfg.layer_types[i], e, x.dtype)
    q = rms_norm(qkv[..., : h * e].reshape(b, t, h, e), w.q_norm, cfg.rms_norm_eps)
    q = rope(q, positions, freqs)
    if cfg.is_shared(i):
        return q, None, None
    keys = rms_norm(qkv[..., h * e : (h + k) * e].reshape(b, t, k, e), w.k_norm, cfg.rms_norm_eps)
    keys = rope(keys, positions, freqs)
    values = rms_norm(qkv[..., (h + k) * e :].reshape(b, t, k, e), None, cfg.rms_norm_eps)
    return q, keys, values


def finish_layer(
    w: Layer,
    cfg: Config,
    i: int,
    x: Array,
    attn: Array,
    ple: Array | None,
    kernels: str = "xla",
) -> Array:
    """Everything after attention: output projection, MLP and the per-layer input.

    x [B, T, D] is the layer's input, attn [B, T, H * E], ple [B, T, L, P]."""
    eps = cfg.rms_norm_eps
    out = gemv.project(attn, w.w_o, kernels)  # [B, T, D]
    x = x + rms_norm(out, w.ln_attn_out, eps)
    h = rms_norm(x, w.ln_mlp_in, eps)
    gate_up = gemv.project(h, w.w_gate_up, kernels)  # [B, T, 2F]
    f = gate_up.shape[-1] // 2
    h = jax.nn.gelu(gate_up[..., :f], approximate=True) * gate_up[..., f:]
    h = gemv.project(h, w.w_down, kernels)  # [B, T, D]
    x = x + rms_norm(h, w.ln_mlp_out, eps)
    if ple is not None:
        assert w.w_ple_gate is not None
        assert w.w_ple_proj is not None
        g = jax.nn.gelu(gemv.project(x, w.w_ple_gate, kernels), approximate=True)  # [B, T, P]
        g = gemv.project(g * ple[:, :, i, :], w.w_ple_proj, kernels)  # [B, T, D]
        x = x + rms_norm(g, w.ln_ple, eps)
    return x * w.scalar


def logits_from_hidden(params: Params, cfg: Config, x: Array, kernels: str = "xla") -> Array:
    """x [B, D] (final-normed) -> float32 logits [B, V], soft-capped.

    The product is rounded to the weight dtype first, as transformers' lm_head does, so
    greedy choices agree with it in bfloat16 too."""
    head = params.embed if params.lm_head is None else params.lm_head
    logits = gemv.project(x, head, kernels).astype(wide(x.dtype))  # [B, V]
    if cfg.final_logit_softcap:
        cap = cfg.final_logit_softcap
        logits = jnp.tanh(logits / cap) * cap
    return logits


def prompt_mask(cfg: Config, i: int, t: int) -> Array:
    """[T, T] causal mask, limited to the window on sliding layers."""
    q = jnp.arange(t)[:, None]
    k = jnp.arange(t)[None, :]
    mask = k <= q
    if cfg.layer_types[i] == SLIDING:
        mask &= q - k < cfg.sliding_window
    return mask


# --- forward over a whole prompt (no cache) --------------------------------------------


def forward(params: Params, cfg: Config, tokens: Array) -> tuple[Array, dict[int, Any]]:
    """tokens [B, T] from position 0 -> final-normed hidden [B, T, D] and the keys/values
    of each cache layer ({layer: (k [B, T, K, E], v)})."""
    b, t = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(t), (b, t))
    x, ple = embed(params, cfg, tokens)
    kv: dict[int, Any] = {}
    for i, w in enumerate(params.layers):
        h = rms_norm(x, w.ln_attn_in, cfg.rms_norm_eps)
        q, k, v = project_qkv(w, cfg, i, h, positions)
        if k is not None:
            kv[i] = (k, v)
        ks, vs = kv[cfg.kv_source[i]]
        mask = jnp.broadcast_to(prompt_mask(cfg, i, t), (b, t, t))
        x = finish_layer(w, cfg, i, x, attend(q, ks, vs, mask), ple)
    return rms_norm(x, params.final_norm, cfg.rms_norm_eps), kv


def forward_logits(params: Params, cfg: Config, tokens: Array) -> Array:
    """tokens [B, T] -> logits [B, T, V] at every position (parity tests)."""
    x, _ = forward(params, cfg, tokens)
    b, t, d = x.shape
    return logits_from_hidden(params, cfg, x.reshape(b * t, d)).reshape(b, t, -1)


# --- prefill and decode ---------------------------------------------------------------


def prefill(
    params: Params, cfg: Config, tokens: Array, lengths: Array, slots: Array, cache: KVCache
) -> tuple[Array, KVCache]:
    """Run prompts tokens [B, T] (real lengths [B], right-padded) into cache slots [B].

    Returns the logits after each prompt's last real token [B, V] and the cache. A
    sliding layer's ring gets, at index r, the last prompt position p with p % W == r."""
    _b, t = tokens.shape
    x, kv = forward(params, cfg, tokens)
    last = jnp.take_along_axis(x, (lengths - 1)[:, None, None], axis=1)[:, 0]  # [B, D]
    new_k, new_v = list(cache.k), list(cache.v)
    for c, i in enumerate(cfg.cache_layers):
        k, v = kv[i]  # [B, T, K, E]
        size = cache.k[c].shape[1]
        if cfg.layer_types[i] == SLIDING:
            ring = jnp.arange(size)[None, :]  # [1, W]
            src = ring + size * jnp.floor_divide(lengths[:, None] - 1 - ring, size)
            src = jnp.clip(src, 0, t - 1)  # indices never written are masked at decode
            k = jnp.take_along_axis(k, src[:, :, None, None], axis=1)
            v = jnp.take_along_axis(v, src[:, :, None, None], axis=1)
        else:
            k, v = k[:, :size], v[:, :size]
        n = k.shape[1]
        new_k[c] = new_k[c].at[slots, :n].set(k.astype(new_k[c].dtype), mode="drop")
        new_v[c] = new_v[c].at[slots, :n].set(v.astype(new_v[c].dtype), mode="drop")
    return logits_from_hidden(params, cfg, last), KVCache(k=tuple(new_k), v=tuple(new_v))


def decode_step(
    params: Params,
    cfg: Config,
    tokens: Array,
    positions: Array,
    cache: KVCache,
    context: int | None = None,
) -> tuple[Array, KVCache]:
    """One token for each of the first B slots: tokens [B] at positions [B] -> logits
    [B, V] and the cache with their keys and values written in.

    The cache may hold more slots than B; only slots 0..B-1 are read and written.
    `context`: every position is below it, so attention reads only the first `context`
    rows of each cache (a step's KV reads grow with the context, not with max_len).
    `cfg.kernels` computes the weight products (rigs/jax/gemv.py)."""
    b = tokens.shape[0]
    pos = positions[:, None]  # [B, 1]
    x, ple = embed(params, cfg, tokens[:, None], cfg.kernels)
    new_k, new_v = list(cache.k), list(cache.v)
    index = {i: c for c, i in enumerate(cfg.cache_layers)}
    rows = jnp.arange(b)
    for i, w in enumerate(params.layers):
        h = rms_norm(x, w.ln_attn_in, cfg.rms_norm_eps)
        q, k, v = project_qkv(w, cfg, i, h, pos, cfg.kernels)
        if k is not None and v is not None:
            c = index[i]
            size = new_k[c].shape[1]
            at = positions % size if cfg.layer_types[i] == SLIDING else positions
            new_k[c] = new_k[c].at[rows, at].set(k[:, 0].astype(new_k[c].dtype), mode="drop")
            new_v[c] = new_v[c].at[rows, at].set(v[:, 0].astype(new_v[c].dtype), mode="drop")
        c = index[cfg.kv_source[i]]
        rows_read = new_k[c].shape[1] if context is None else min(context, new_k[c].shape[1])
        ks, vs = new_k[c][:b, :rows_read], new_v[c][:b, :rows_read]  # [B, C, K, E]
        # ring index r holds position <= current exactly when r <= current (see prefill)
        mask = jnp.arange(ks.shape[1])[None, None, :] <= pos[:, :, None]  # [B, 1, C]
        x = finish_layer(w, cfg, i, x, attend(q, ks, vs, mask), ple, cfg.kernels)
    x = rms_norm(x[:, 0], params.final_norm, cfg.rms_norm_eps)
    return logits_from_hidden(params, cfg, x, cfg.kernels), KVCache(k=tuple(new_k), v=tuple(new_v))
