"""Weight products of a decode step: x [..., D] times w [F, D] (stored [out, in]) -> [..., F].

`project(x, w, "xla")` is the einsum the model always used. `project(x, w, "pallas")` runs a
Pallas kernel where it can: a decode step has 1 to 8 rows, so the product is a
matrix-vector product that streams the weight once, and XLA's reach 2.5 TB/s of an H200's
4 TB/s. Each program of the kernel owns `block_f` weight rows, streams them `block_d`
columns at a time and keeps one float32 sum per (row of x, weight row): an elementwise
multiply and a sum over the columns, not `dot` (Triton's dot wants 16 rows; a decode step
has 1). With `split_k` > 1, that many programs share a block's columns and write float32
partial sums that one small fusion adds afterwards (a w_down [1536, 6144] has 24 blocks of
64 rows: too few programs for 132 SMs without it).

Where it runs: the Triton lowering on a CUDA GPU of compute capability 8.0 or more; the
Pallas interpreter on a CPU (slow: for tests); the einsum everywhere else, and for more
than MAX_ROWS rows or a dimension without a power-of-two block of at least MIN_BLOCK.

Numerics: both paths multiply in float32 and accumulate in float32, then round the sum to
the output dtype once, so they differ by their summation orders (a few float32 ulps of the
sum of |x_i w_i|) and, in bfloat16, by at most one bfloat16 ulp where the two float32 sums
fall on either side of a rounding boundary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

KERNELS = ("xla", "pallas")
MAX_ROWS = 8  # decode widths the kernel takes; wider products are compute-shaped: XLA's GEMM
MIN_BLOCK = 16  # smallest block edge (Triton wants powers of two; tiny ones waste lanes)
TARGET_PROGRAMS = 256  # about two per SM of an H100/H200 (132 SMs): split-K until reached
MIN_COMPUTE_CAPABILITY = 8.0


@dataclass(frozen=True)
class Blocks:
    """How the Pallas kernel tiles one product (static: part of the compiled program)."""

    block_f: int = 64  # weight rows per program (a power of two)
    block_d: int = 256  # columns per loop iteration (a power of two)
    split_k: int = 0  # programs per row block, each over D / split_k columns (0: choose)
    num_warps: int = 4
    num_stages: int = 3  # Triton's software pipelining depth of the column loop
    # Keep a [block_f, block_d] float32 tile of sums per row and reduce it across lanes once
    # at the end, instead of after every chunk: no shuffles in the loop, but rows x block_f x
    # block_d / (32 num_warps) registers per thread for them (spills beyond ~128).
    defer_reduce: bool = False

    def __post_init__(self) -> None:
        for name in ("block_f", "block_d"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"Blocks.{name} must be a power of two, got {value}")
        if self.split_k < 0 or self.num_warps < 1 or self.num_stages < 1:
            raise ValueError(f"bad Blocks: {self}")


def project(x: Array, w: Array, kernel: str, blocks: Blocks | None = None) -> Array:
    """einsum("...d,fd->...f", x, w) by `kernel` ("xla" or "pallas"; see the module doc)."""
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    if kernel == "pallas":
        mode = pallas_mode()
        rows = math.prod(x.shape[:-1])
        fitted = fit(blocks or Blocks(), w.shape[0], w.shape[1])
        if mode is not None and fitted is not None and 1 <= rows <= MAX_ROWS:
            flat = x.reshape(rows, x.shape[-1])
            out = _gemv_jitted(flat, w, fitted, interpret=mode == "interpret")
            return out.reshape(*x.shape[:-1], w.shape[0])
    return jnp.einsum("...d,fd->...f", x, w)


def pallas_mode() -> str | None:
    """How Pallas runs on the default device: "triton", "interpret", or None (use XLA)."""
    device = jax.devices()[0]
    if device.platform == "cpu":
        return "interpret"
    if device.platform != "gpu":
        return None
    try:  # "9.0" on CUDA; ROCm's ("gfx90a") and other devices' are not numbers
        capability = float(getattr(device, "compute_capability", ""))
    except ValueError:
        return None
    return "triton" if capability >= MIN_COMPUTE_CAPABILITY else None


def largest_block(n: int, at_most: int) -> int:
    """The largest power of two that divides n and is at most `at_most`."""
    return min(n & -n, at_most)


def fit(blocks: Blocks, f: int, d: int) -> Blocks | None:
    """`blocks` shrunk to divide an [F, D] weight, split-K chosen if 0; None if no block of
    at least MIN_BLOCK divides it."""
    block_f, block_d = largest_block(f, blocks.block_f), largest_block(d, blocks.block_d)
    if min(block_f, block_d) < MIN_BLOCK:
        return None
    chunks = d // block_d
    divisors = [s for s in range(1, chunks + 1) if chunks % s == 0]
    if blocks.split_k:
        split = max(s for s in divisors if s <= blocks.split_k)
    else:
        enough = [s for s in divisors if f // block_f * s >= TARGET_PROGRAMS]
        split = enough[0] if enough else chunks
    return replace(blocks, block_f=block_f, block_d=block_d, split_k=split)


def gemv(x: Array, w: Array, blocks: Blocks, interpret: bool = False) -> Array:
    """x [R, D] times w [F, D] -> [R, F] by the Pallas kernel, with `blocks` that divide w
    (see `fit`). Rows are padded to a power of two (Triton's block shapes)."""
    rows, d = x.shape
    f = w.shape[0]
    if (
        w.shape[1] != d
        or f % blocks.block_f
        or d % (blocks.block_d * max(blocks.split_k, 1))
        or not 1 <= rows <= MAX_ROWS
    ):
        raise ValueError(f"blocks {blocks} do not tile x {x.shape} @ w {w.shape}")
    dtype = jnp.result_type(x.dtype, w.dtype)
    padded = 1 << (rows - 1).bit_length()
    if padded != rows:
        x = jnp.pad(x, ((0, padded - rows), (0, 0)))
    split = max(blocks.split_k, 1)
    part = d // split  # columns per program
    kernel = partial(
        _kernel,
        rows=padded,
        block_d=blocks.block_d,
        chunks=part // blocks.block_d,
        defer_reduce=blocks.defer_reduce,
    )
    out = pl.pallas_call(
        kernel,
        grid=(f // blocks.block_f, split),
        in_specs=[
            pl.BlockSpec((padded, part), lambda i, s: (0, s)),
            pl.BlockSpec((blocks.block_f, part), lambda i, s: (i, s)),
        ],
        out_specs=pl.BlockSpec((pl.squeezed, padded, blocks.block_f), lambda i, s: (s, 0, i)),
        out_shape=jax.ShapeDtypeStruct((split, padded, f), jnp.float32 if split > 1 else dtype),
        compiler_params=plgpu.CompilerParams(
            num_warps=blocks.num_warps, num_stages=blocks.num_stages
        ),
        interpret=interpret,
        name="gemv",
    )(x, w)
    out = out.sum(axis=0).astype(dtype) if split > 1 else out[0]
    return out[:rows]


# Products of one shape share one lowering (one Triton compile) inside a traced decode step.
_gemv_jitted = jax.jit(gemv, static_argnames=("blocks", "interpret"))


def _kernel(
    x_ref: Any,
    w_ref: Any,
    o_ref: Any,
    *,
    rows: int,
    block_d: int,
    chunks: int,
    defer_reduce: bool,
) -> None:
    """x_ref [R, C], w_ref [BF, C], o_ref [R, BF]: o = x . w over this program's C columns."""
    block_f = w_ref.shape[0]

    def step(k: Array, sums: tuple[Array, ...]) -> tuple[Array, ...]:
        cols = pl.ds(pl.multiple_of(k * block_d, block_d), block_d)
        w = w_ref[:, cols].astype(jnp.float32)  # [BF, BD]
        products = (w * x_ref[r, cols].astype(jnp.float32)[None, :] for r in range(rows))
        if defer_reduce:
            return tuple(total + p for total, p in zip(sums, products, strict=True))
        return tuple(total + jnp.sum(p, axis=1) for total, p in zip(sums, products, strict=True))

    zero = jnp.zeros((block_f, block_d) if defer_reduce else (block_f,), jnp.float32)
    sums = jax.lax.fori_loop(0, chunks, step, (zero,) * rows)
    if defer_reduce:
        sums = tuple(jnp.sum(total, axis=1) for total in sums)
    for r, total in enumerate(sums):
        o_ref[r, :] = total.astype(o_ref.dtype)
