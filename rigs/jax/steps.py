"""The jitted device programs the engine runs: prefill into a slot, and a chunk of decode
steps over the first `width` slots, with stopping decided on the device.

Per-slot request state lives on the device (`Slots`), so a chunk of several decode steps
needs no host round trip; the host reads back only the tokens and who is still active.
Cache and slot state are donated: XLA updates them in place.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

import jax
import jax.numpy as jnp
from jax import Array
from jax.typing import ArrayLike

from rigs.jax import model
from rigs.jax.sampling import sample


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Slots:
    """One row per slot ([S] each)."""

    token: Array  # int32: last token, the next step's input
    pos: Array  # int32: position of `token`
    generated: Array  # int32: tokens emitted so far
    active: Array  # bool
    max_tokens: Array  # int32
    min_tokens: Array  # int32: EOS is masked until this many were emitted
    ignore_eos: Array  # bool: EOS is an ordinary token
    temperature: Array  # float32 (0: greedy)
    top_p: Array  # float32
    seed: Array  # uint32

    def take(self, width: int) -> Slots:
        return jax.tree.map(lambda a: a[:width], self)

    def put(self, width: int, part: Slots) -> Slots:
        return jax.tree.map(lambda a, p: a.at[:width].set(p), self, part)


def empty_slots(count: int) -> Slots:
    def zeros(dtype: jnp.dtype) -> Array:
        return jnp.zeros((count,), dtype)

    i32 = jnp.dtype(jnp.int32)
    return Slots(
        token=zeros(i32),
        pos=zeros(i32),
        generated=zeros(i32),
        active=zeros(jnp.dtype(bool)),
        max_tokens=zeros(i32),
        min_tokens=zeros(i32),
        ignore_eos=zeros(jnp.dtype(bool)),
        temperature=zeros(jnp.dtype(jnp.float32)),
        top_p=jnp.ones((count,), jnp.float32),
        seed=zeros(jnp.dtype(jnp.uint32)),
    )


def advance(
    slots: Slots, logits: Array, eos_ids: Array, mode: str = "auto"
) -> tuple[Array, Array, Slots]:
    """Choose each active slot's next token from logits [B, V] after `slots.token`.

    Returns tokens [B], emitted [B] (a token the client gets: active and not a stopping
    EOS) and the slots advanced; a slot stops at max_tokens or at EOS. `mode`: see
    `sampling.sample`."""
    is_eos_id = jnp.zeros(logits.shape[-1], bool).at[eos_ids].set(True, mode="drop")  # [V]
    too_early = slots.generated < slots.min_tokens
    logits = jnp.where(too_early[:, None] & is_eos_id[None, :], -jnp.inf, logits)
    token = sample(logits, slots.temperature, slots.top_p, slots.seed, slots.generated, mode)
    stop_at_eos = is_eos_id[token] & ~slots.ignore_eos
    emitted = slots.active & ~stop_at_eos
    generated = slots.generated + emitted
    done = stop_at_eos | (generated >= slots.max_tokens)
    return (
        token,
        emitted,
        replace(
            slots,
            token=jnp.where(slots.active, token, slots.token),
            pos=slots.pos + slots.active,
            generated=generated,
            active=slots.active & ~done,
        ),
    )


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Request:
    """One request's sampling settings as device scalars (traced: no recompilation)."""

    max_tokens: ArrayLike
    min_tokens: ArrayLike
    ignore_eos: ArrayLike
    temperature: ArrayLike
    top_p: ArrayLike
    seed: ArrayLike


@partial(jax.jit, static_argnames=("cfg",), donate_argnames=("cache", "slots"))
def prefill_slot(
    params: model.Params,
    cfg: model.Config,
    cache: model.KVCache,
    slots: Slots,
    tokens: Array,
    length: Array,
    slot: Array,
    request: Request,
    eos_ids: Array,
) -> tuple[Array, Array, Array, model.KVCache, Slots]:
    """Prompt tokens [T] (length real ones) into `slot`; choose its first token.

    Returns (token, emitted, still active, cache, slots)."""
    logits, cache = model.prefill(params, cfg, tokens[None], length[None], slot[None], cache)
    fresh = Slots(
        token=tokens[length - 1][None],
        pos=(length - 1)[None],  # advance() moves it to `length`, the first new position
        generated=jnp.zeros((1,), jnp.int32),
        active=jnp.ones((1,), bool),
        max_tokens=jnp.reshape(request.max_tokens, (1,)),
        min_tokens=jnp.reshape(request.min_tokens, (1,)),
        ignore_eos=jnp.reshape(request.ignore_eos, (1,)),
        temperature=jnp.reshape(request.temperature, (1,)),
        top_p=jnp.reshape(request.top_p, (1,)),
        seed=jnp.reshape(request.seed, (1,)),
    )
    token, emitted, fresh = advance(fresh, logits, eos_ids)
    slots = jax.tree.map(lambda a, f: a.at[slot].set(f[0]), slots, fresh)
    return token[0], emitted[0], fresh.active[0], cache, slots


@partial(
    jax.jit,
    static_argnames=("cfg", "width", "steps", "greedy"),
    donate_argnames=("cache", "slots"),
)
def decode_chunk(
    params: model.Params,
    cfg: model.Config,
    cache: model.KVCache,
    slots: Slots,
    eos_ids: Array,
    width: int,
    steps: int,
    greedy: bool,
) -> tuple[Array, Array, Array, model.KVCache, Slots]:
    """`steps` decode steps over slots 0..width-1 in one device program.

    `greedy`: every slot in it is greedy, so the program has no sampling code and no
    branch. Returns tokens [steps, width], emitted [steps, width], active [width] after
    the chunk, the cache and the slots."""
    part = slots.take(width)

    def step(i: Array, carry: tuple) -> tuple:
        cache, part, tokens, emitted = carry
        logits, cache = model.decode_step(params, cfg, part.token, part.pos, cache)
        token, emit, part = advance(part, logits, eos_ids, "greedy" if greedy else "sample")
        return cache, part, tokens.at[i].set(token), emitted.at[i].set(emit)

    tokens = jnp.zeros((steps, width), jnp.int32)
    emitted = jnp.zeros((steps, width), bool)
    cache, part, tokens, emitted = jax.lax.fori_loop(0, steps, step, (cache, part, tokens, emitted))
    return tokens, emitted, part.active, cache, slots.put(width, part)


@partial(jax.jit, donate_argnames=("slots",))
def deactivate(slots: Slots, slot: Array) -> Slots:
    """Stop a slot whose request was cancelled."""
    return replace(slots, active=slots.active.at[slot].set(False))
