"""The jitted device programs the engine runs: prefill prompts into slots, and a chunk of decode
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

TOP_LOGPROBS = 5  # alternatives every program returns per token (static: one compilation)


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


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Scores:
    """Log-probabilities of the raw next-token distribution (before EOS masking)."""

    chosen: Array  # [..., B] float32: of the token chosen
    top_ids: Array  # [..., B, TOP_LOGPROBS] int32: the most likely tokens, best first
    top: Array  # [..., B, TOP_LOGPROBS] float32: their log-probabilities


def scores(logits: Array, token: Array) -> Scores:
    """logits [B, V], tokens chosen [B] -> their Scores."""
    logits = logits.astype(jnp.float32)
    norm = jax.nn.logsumexp(logits, axis=-1)  # [B]
    top, top_ids = jax.lax.top_k(logits, TOP_LOGPROBS)  # [B, K]
    chosen = jnp.take_along_axis(logits, token[:, None], axis=-1)[:, 0]
    return Scores(chosen=chosen - norm, top_ids=top_ids, top=top - norm[:, None])


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
    """Requests' sampling settings, one row per prompt of a prefill ([B] arrays, traced:
    no recompilation)."""

    max_tokens: ArrayLike
    min_tokens: ArrayLike
    ignore_eos: ArrayLike
    temperature: ArrayLike
    top_p: ArrayLike
    seed: ArrayLike


@partial(jax.jit, static_argnames=("cfg",), donate_argnames=("cache", "slots"))
def prefill_slots(
    params: model.Params,
    cfg: model.Config,
    cache: model.KVCache,
    slots: Slots,
    tokens: Array,
    lengths: Array,
    slot_ids: Array,
    request: Request,
    eos_ids: Array,
) -> tuple[Array, Array, Array, Scores, model.KVCache, Slots]:
    """Prompts tokens [B, T] (lengths [B] real ones, right-padded) into slots slot_ids [B];
    choose each one's first token. `request` holds [B] arrays.

    A row whose slot id is past the last slot is padding: its cache and slot writes are
    dropped. Returns (token [B], emitted [B], still active [B], their Scores, cache, slots)."""
    logits, cache = model.prefill(params, cfg, tokens, lengths, slot_ids, cache)
    b = tokens.shape[0]
    fresh = Slots(
        token=tokens[jnp.arange(b), lengths - 1],
        pos=lengths - 1,  # advance() moves it to `length`, the first new position
        generated=jnp.zeros((b,), jnp.int32),
        active=jnp.ones((b,), bool),
        max_tokens=jnp.asarray(request.max_tokens, jnp.int32),
        min_tokens=jnp.asarray(request.min_tokens, jnp.int32),
        ignore_eos=jnp.asarray(request.ignore_eos, bool),
        temperature=jnp.asarray(request.temperature, jnp.float32),
        top_p=jnp.asarray(request.top_p, jnp.float32),
        seed=jnp.asarray(request.seed, jnp.uint32),
    )
    token, emitted, fresh = advance(fresh, logits, eos_ids)
    slots = jax.tree.map(lambda a, f: a.at[slot_ids].set(f, mode="drop"), slots, fresh)
    return token, emitted, fresh.active, scores(logits, token), cache, slots


@partial(
    jax.jit,
    static_argnames=("cfg", "width", "steps", "greedy", "context"),
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
    context: int | None = None,
) -> tuple[Array, Array, Array, Scores | None, model.KVCache, Slots]:
    """`steps` decode steps over slots 0..width-1 in one device program.

    `greedy`: every slot in it is greedy and none wants logprobs, so the program has no
    sampling code, no branch and no Scores (their top-k over the vocabulary is a cost of
    every step). `context`: every active slot's positions in the chunk are below it
    (attention reads that many cache rows; None: all). Returns tokens [steps, width],
    emitted [steps, width], active [width] after the chunk, the tokens' Scores ([steps,
    width, ...]; None if greedy), the cache and the slots."""
    part = slots.take(width)

    def step(i: Array, carry: tuple) -> tuple:
        cache, part, tokens, emitted, scored = carry
        logits, cache = model.decode_step(params, cfg, part.token, part.pos, cache, context)
        token, emit, part = advance(part, logits, eos_ids, "greedy" if greedy else "sample")
        if scored is not None:
            now = scores(logits, token)
            scored = jax.tree.map(lambda all_, one: all_.at[i].set(one), scored, now)
        return cache, part, tokens.at[i].set(token), emitted.at[i].set(emit), scored

    tokens = jnp.zeros((steps, width), jnp.int32)
    emitted = jnp.zeros((steps, width), bool)
    scored = None
    if not greedy:
        scored = Scores(
            chosen=jnp.zeros((steps, width), jnp.float32),
            top_ids=jnp.zeros((steps, width, TOP_LOGPROBS), jnp.int32),
            top=jnp.zeros((steps, width, TOP_LOGPROBS), jnp.float32),
        )
    cache, part, tokens, emitted, scored = jax.lax.fori_loop(
        0, steps, step, (cache, part, tokens, emitted, scored)
    )
    return tokens, emitted, part.active, scored, cache, slots.put(width, part)


@partial(jax.jit, donate_argnames=("slots",))
def deactivate(slots: Slots, slot: Array) -> Slots:
    """Stop a slot whose request was cancelled."""
    return replace(slots, active=slots.active.at[slot].set(False))
