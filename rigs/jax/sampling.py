"""Choosing the next token on the device: greedy at temperature 0, else seeded sampling.

Each slot's randomness is `fold_in(PRNGKey(seed), n)` for its n-th generated token, so a
seeded request gives the same tokens whatever else shares the batch."""

import jax
import jax.numpy as jnp
from jax import Array


def top_p_filter(logits: Array, top_p: Array) -> Array:
    """logits [B, V] with tokens outside each row's top-p nucleus set to -inf."""
    ordered = jnp.sort(logits, axis=-1)[:, ::-1]  # [B, V] descending
    probs = jax.nn.softmax(ordered, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs  # mass of strictly better tokens
    kept = before < top_p[:, None]
    threshold = jnp.min(jnp.where(kept, ordered, jnp.inf), axis=-1)  # [B]
    return jnp.where(logits < threshold[:, None], -jnp.inf, logits)


def sample(
    logits: Array,
    temperature: Array,
    top_p: Array,
    seeds: Array,
    counts: Array,
    mode: str = "auto",
) -> Array:
    """logits [B, V] float32 -> token ids [B] int32.

    temperature [B] (0: greedy), top_p [B], seeds [B] uint32, counts [B] int32 (tokens the
    slot has generated so far). `mode` is static: "greedy" (every row is greedy: argmax
    only), "sample" (some row samples), or "auto" (decided on the device with a branch; a
    GPU branch costs a device-to-host sync, so hot loops pick "greedy" or "sample")."""
    greedy = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    if mode == "greedy":
        return greedy

    def sampled(logits: Array) -> Array:
        scaled = logits / jnp.maximum(temperature, 1e-6)[:, None]
        scaled = jax.lax.cond(
            jnp.any(top_p < 1.0), lambda x: top_p_filter(x, top_p), lambda x: x, scaled
        )
        keys = jax.vmap(lambda s, n: jax.random.fold_in(jax.random.PRNGKey(s), n))(seeds, counts)
        draw = jax.vmap(lambda k, row: jax.random.categorical(k, row))(keys, scaled)
        return jnp.where(temperature > 0, draw.astype(jnp.int32), greedy)

    if mode == "sample":
        return sampled(logits)
    assert mode == "auto", mode
    return jax.lax.cond(jnp.any(temperature > 0), sampled, lambda _: greedy, logits)
