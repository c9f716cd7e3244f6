"""Token choice on the device: greedy, top-p nucleus, seeded draws."""

import jax
import jax.numpy as jnp
import numpy as np

from rigs.jax import sampling

sample = jax.jit(sampling.sample)  # one compilation for every call below
top_p_filter = jax.jit(sampling.top_p_filter)


def test_top_p_keeps_the_smallest_nucleus() -> None:
    probs = np.array([[0.5, 0.3, 0.15, 0.05], [0.25, 0.25, 0.25, 0.25]], np.float32)
    logits = jnp.log(jnp.asarray(probs))
    kept = np.isfinite(np.asarray(top_p_filter(logits, jnp.asarray([0.7, 1.0]))))
    assert kept.tolist() == [[True, True, False, False], [True, True, True, True]]


def test_greedy_rows_ignore_the_seed_and_sampled_rows_follow_it() -> None:
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(3, 50)), jnp.float32)
    temperature = jnp.asarray([0.0, 1.0, 1.0])
    top_p = jnp.ones(3)
    counts = jnp.zeros(3, jnp.int32)
    a = sample(logits, temperature, top_p, jnp.asarray([1, 2, 2], jnp.uint32), counts)
    b = sample(logits, temperature, top_p, jnp.asarray([9, 2, 2], jnp.uint32), counts)
    assert int(a[0]) == int(jnp.argmax(logits[0]))
    np.testing.assert_array_equal(a, b)
    draws = {
        int(sample(logits, temperature, top_p, jnp.asarray([0, s, s], jnp.uint32), counts)[1])
        for s in range(20)
    }
    assert len(draws) > 3  # seeds matter
