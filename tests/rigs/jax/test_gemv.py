"""The Pallas GEMV (rigs/jax/gemv.py) against XLA's einsum in Pallas' interpreter on a CPU, its
lowering to Triton for E2B's shapes, and decode steps of random:tiny with kernels="pallas"."""

import itertools
from dataclasses import replace
from typing import Any

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from rigs import sources
from rigs.jax import gemv, model

# E2B's divisibility at an eighth of its width: D = 3 x 64 (E2B: 1536 = 3 x 512) in blocks of
# 64 columns, so the column loop and split-K see 3 or 12 chunks as E2B's do with 512.
D = 192
SHAPES = {  # [F, D] as the model stores them
    "w_qkv": (320, D),
    "w_o": (D, 256),
    "w_gate_up": (768, D),
    "w_down": (D, 768),
    "lm_head": (2048, D),
}
BLOCKS = gemv.Blocks(block_f=32, block_d=64)  # split-K chosen by `fit`: 2 to 12 here
UNSPLIT = replace(BLOCKS, split_k=1)
DEFERRED = replace(BLOCKS, defer_reduce=True)
run_gemv = jax.jit(gemv.gemv, static_argnames=("blocks", "interpret"))
TRITON_CALLS = ("__gpu$xla.gpu.triton", "triton_kernel_call_ffi")  # jaxlib <= 0.10.2, later


def bound(x: Any, w: Any, dtype: Any) -> Any:
    """Largest |pallas - einsum| each element may show when both sum in float32.

    Each side's float32 sum of D products is within (D + 1) u S of the exact one (u = 2^-24,
    S = sum |x_i w_i|: Higham's bound for recursive summation, +1 for rounding the products,
    which bfloat16 inputs make exact). In bfloat16 each side then rounds its sum once, half
    an ulp each: one bfloat16 ulp apart at most, <= 2^-7 of the value."""
    x64, w64 = np.asarray(x, np.float64), np.asarray(w, np.float64)
    d = x64.shape[-1]
    sums = 2 * (d + 1) * 2.0**-24 * (np.abs(x64) @ np.abs(w64).T)
    rounding = 2.0**-7 * np.abs(x64 @ w64.T) if dtype == jnp.bfloat16 else 0.0
    return sums + rounding + 2.0**-7 * sums


def operands(f: int, d: int, rows: int, dtype: Any, seed: int = 0) -> tuple[Any, Any]:
    kx, kw = jax.random.split(jax.random.key(seed))
    x = jax.random.normal(kx, (rows, d), jnp.float32).astype(dtype)
    w = (0.02 * jax.random.normal(kw, (f, d), jnp.float32)).astype(dtype)
    return x, w


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("rows", [1, 2, 4, 8])
def test_kernel_matches_einsum(dtype: Any, rows: int) -> None:
    for name, (f, d) in SHAPES.items():
        more = (UNSPLIT, DEFERRED) if name == "w_down" else ()  # 12 chunks in one program
        for blocks in (gemv.fit(b, f, d) for b in (BLOCKS, *more)):
            assert blocks is not None
            x, w = operands(f, d, rows, dtype)
            got = run_gemv(x, w, blocks, interpret=True)
            ref = jnp.einsum("rd,fd->rf", x, w)
            assert got.dtype == ref.dtype
            assert got.shape == ref.shape == (rows, f)
            err = np.abs(np.asarray(got, np.float64) - np.asarray(ref, np.float64))
            limit = bound(x, w, dtype)
            assert (err <= limit).all(), (name, blocks, float((err - limit).max()))


def test_project_pads_rows_and_keeps_leading_dims() -> None:
    """Three rows (padded to four inside) in a [B, T, D] batch, as decode steps pass them."""
    x, w = operands(256, D, 3, jnp.float32)
    x = x.reshape(3, 1, D)
    got = gemv.project(x, w, "pallas", BLOCKS)
    assert got.shape == (3, 1, 256)
    err = np.abs(np.asarray(got) - np.asarray(jnp.einsum("btd,fd->btf", x, w)))
    assert (err <= bound(x[:, 0], w, jnp.float32)[:, None]).all()


def pallas_calls(fn: Any, *args: Any) -> int:
    """How many times tracing fn runs a Pallas kernel, through nested jits and loops."""

    def count(jaxpr: Any) -> int:
        total = 0
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "pallas_call":
                total += 1
                continue
            for value in eqn.params.values():
                for sub in value if isinstance(value, tuple) else (value,):
                    if isinstance(sub, jax.extend.core.ClosedJaxpr):
                        total += count(sub.jaxpr)
                    elif isinstance(sub, jax.extend.core.Jaxpr):
                        total += count(sub)
        return total

    return count(jax.make_jaxpr(fn)(*args).jaxpr)


def test_project_falls_back_to_einsum_where_the_kernel_does_not_apply() -> None:
    x9, w = operands(256, D, 9, jnp.float32)  # more rows than a decode step
    assert pallas_calls(lambda a: gemv.project(a, w, "pallas"), x9) == 0
    x, w_odd = operands(200, 24, 1, jnp.float32)  # no power-of-two block of 16 divides 200 x 24
    assert gemv.fit(gemv.Blocks(), 200, 24) is None
    assert pallas_calls(lambda a: gemv.project(a, w_odd, "pallas"), x) == 0
    assert pallas_calls(lambda a: gemv.project(a, w, "pallas"), x9[:1]) == 1
    assert pallas_calls(lambda a: gemv.project(a, w, "xla"), x9[:1]) == 0


def test_bad_choices_are_refused_by_name() -> None:
    x, w = operands(256, D, 1, jnp.float32)
    with pytest.raises(ValueError, match="kernel must be one of"):
        gemv.project(x, w, "triton")
    with pytest.raises(ValueError, match="block_f must be a power of two"):
        gemv.Blocks(block_f=48)
    with pytest.raises(ValueError, match="do not tile"):
        gemv.gemv(x, w, replace(BLOCKS, block_d=128, split_k=3))
    cfg = model.Config.from_hf(sources.random_config("tiny"))
    with pytest.raises(ValueError, match=r"Config\.kernels must be one of"):
        replace(cfg, kernels="cuda")


def e2b_products() -> set[tuple[int, int]]:
    """Every [F, D] weight a decode step of E2B multiplies by (the PLE table is gathered)."""
    cfg = model.Config.from_hf(sources.random_config("e2b"))
    shapes = [s for i in range(cfg.num_layers) for s in model.layer_shapes(cfg, i).values()]
    top = model.param_shapes(cfg)
    shapes += [s for name, s in top.items() if name != "ple_embed"]
    return {s for s in shapes if s is not None and len(s) == 2}  # type: ignore[misc]


@pytest.mark.parametrize("rows", [1, 8])
def test_kernel_lowers_to_triton_for_every_e2b_product(rows: int) -> None:
    """JAX's Triton lowering of the kernel, for CUDA, run on this CPU (compiled to PTX only on
    a GPU): a construct Triton cannot express fails here, not on the first GPU call."""
    products = e2b_products()
    assert {(262144, 1536), (1536, 12288), (24576, 1536)} <= products  # head, widest MLP
    for (f, d), defer in zip(sorted(products), itertools.cycle((False, True)), strict=False):
        blocks = gemv.fit(gemv.Blocks(defer_reduce=defer), f, d)
        assert blocks is not None, (f, d)
        args = (jax.ShapeDtypeStruct((rows, d), jnp.bfloat16),)
        args += (jax.ShapeDtypeStruct((f, d), jnp.bfloat16),)
        exported = export.export(
            jax.jit(lambda x, w, b=blocks: gemv.gemv(x, w, b)),
            platforms=["cuda"],
            disabled_checks=[export.DisabledSafetyCheck.custom_call(t) for t in TRITON_CALLS],
        )(*args)
        text = exported.mlir_module()
        assert any(f"@{t}(" in text for t in TRITON_CALLS), (f, d)


# --- decode steps on random:tiny ---------------------------------------------------------------

WIDTH, STEPS, MAX_LEN = 3, 4, 64  # 3 rows: padded to 4 inside every product
decode_step = jax.jit(model.decode_step, static_argnums=1)
LOGITS_RTOL = 1e-5  # float32 summation orders (~1e-7 of each product) through 6 layers


@pytest.fixture(scope="module")
def tiny() -> tuple[model.Config, model.Params]:
    cfg = model.Config.from_hf(sources.random_config("tiny"))
    return cfg, model.init_params(cfg, jax.random.key(0), jnp.float32)


def test_every_decode_product_runs_the_kernel_and_prefill_none(tiny: Any) -> None:
    cfg, params = tiny
    pallas = replace(cfg, kernels="pallas")
    cache = model.init_cache(cfg, WIDTH, MAX_LEN, jnp.float32)
    tokens = jnp.zeros((WIDTH,), jnp.int32)
    leaves = jax.tree.leaves(params)
    streamed = sum(1 for a in leaves if a.ndim == 2) - 1  # every matrix but the PLE table
    step = jax.jit(model.decode_step, static_argnums=1)
    assert pallas_calls(lambda *a: step(params, pallas, *a), tokens, tokens, cache) == streamed
    assert pallas_calls(lambda *a: step(params, cfg, *a), tokens, tokens, cache) == 0
    prompt = jnp.zeros((1, 8), jnp.int32)
    one = jnp.ones((1,), jnp.int32)
    prefill = jax.jit(model.prefill, static_argnums=1)
    assert pallas_calls(lambda *a: prefill(params, pallas, *a), prompt, one, one, cache) == 0


def test_decode_steps_with_pallas_match_xla(tiny: Any) -> None:
    """Prompts prefilled (XLA), then greedy steps with each kernel choice from the same cache:
    the same tokens, logits within float32 summation differences."""
    cfg, params = tiny
    rng = np.random.default_rng(0)
    cache = model.init_cache(cfg, WIDTH, MAX_LEN, jnp.float32)
    lengths = np.array([5, 17, 30], np.int32)  # the sliding window is 16
    prompts = rng.integers(3, cfg.vocab_size, (WIDTH, 32)).astype(np.int32)
    logits, cache = jax.jit(model.prefill, static_argnums=1)(
        params, cfg, prompts, lengths, np.arange(WIDTH, dtype=np.int32), cache
    )
    start = (jnp.argmax(logits, axis=-1).astype(jnp.int32), jnp.asarray(lengths), cache)
    runs = {}
    for kernels in ("xla", "pallas"):
        token, pos, c = start
        c = jax.tree.map(jnp.copy, c)
        seen = []
        for _ in range(STEPS):
            logits, c = decode_step(params, replace(cfg, kernels=kernels), token, pos, c)
            token, pos = jnp.argmax(logits, axis=-1).astype(jnp.int32), pos + 1
            seen.append((np.asarray(token), np.asarray(logits)))
        runs[kernels] = seen
    for (tok_x, log_x), (tok_p, log_p) in zip(runs["xla"], runs["pallas"], strict=True):
        np.testing.assert_array_equal(tok_p, tok_x)
        assert np.abs(log_p - log_x).max() <= LOGITS_RTOL * np.abs(log_x).max()
