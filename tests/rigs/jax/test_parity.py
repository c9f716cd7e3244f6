"""The JAX port against transformers on the same random weights, in float32, on a CPU."""

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rigs.jax import checkpoint, model
from tests.rigs.jax.conftest import WINDOW, torch

RTOL = 1e-4  # max |jax - transformers| / max |transformers| over the compared logits
prefill = jax.jit(model.prefill, static_argnums=1)
decode_step = jax.jit(model.decode_step, static_argnums=1)
forward_logits = jax.jit(model.forward_logits, static_argnums=1)


SLOTS, MAX_LEN, BUCKET = 4, 128, 32  # one shape for every test: each step compiles once


def new_cache(cfg: model.Config) -> model.KVCache:
    # committed to the device like the jitted steps' outputs, so the step compiles once
    cache = model.init_cache(cfg, SLOTS, MAX_LEN, jnp.float32)
    return jax.device_put(cache, jax.devices()[0])


def prefill_one(
    cfg: model.Config, params: model.Params, prompt: Any, slot: int, cache: model.KVCache
) -> tuple[Any, model.KVCache]:
    padded = np.zeros((1, BUCKET), np.int32)
    padded[0, : len(prompt)] = prompt
    length, slots = np.array([len(prompt)], np.int32), np.array([slot], np.int32)
    logits, cache = prefill(params, cfg, padded, length, slots, cache)
    return logits[0], cache


def rel_err(got: Any, ref: Any) -> float:
    return float(np.abs(np.asarray(got) - np.asarray(ref)).max() / np.abs(ref).max())


@pytest.fixture(scope="module")
def loaded(tiny_checkpoint: tuple[Path, Any]) -> tuple[model.Config, model.Params, Any]:
    directory, reference = tiny_checkpoint
    cfg = checkpoint.load_config(directory)
    return cfg, checkpoint.load_params(directory, cfg, jnp.float32), reference


def test_tiny_config_crosses_window_and_sharing(loaded: Any) -> None:
    cfg, _, _ = loaded
    assert cfg.sliding_window == WINDOW
    assert cfg.head_dims == (16, 16, 16, 16, 32) * 2
    assert cfg.cache_layers == (0, 1, 2, 3, 4, 5)
    assert cfg.kv_source == (0, 1, 2, 3, 4, 5, 5, 5, 5, 4)
    assert [cfg.mlp_width(i) for i in range(10)] == [128] * 6 + [256] * 4


def test_forward_logits_match_every_position(loaded: Any) -> None:
    cfg, params, reference = loaded
    ids = torch.randint(
        3, cfg.vocab_size, (2, 4 * WINDOW + 3), generator=torch.Generator().manual_seed(1)
    )
    with torch.no_grad():
        ref = reference(ids).logits.numpy()
    got = forward_logits(params, cfg, jnp.asarray(ids.numpy()))
    assert got.shape == ref.shape
    assert rel_err(got, ref) < RTOL


def test_prefill_then_decode_through_ring_buffer(loaded: Any) -> None:
    """Two prompts of different lengths in slots 2 and 0, decoded together step by step
    past 3 windows; every step's logits match transformers' full forward at that position."""
    cfg, params, reference = loaded
    total = 4 * WINDOW + 5
    ids = torch.randint(3, cfg.vocab_size, (2, total), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = reference(ids).logits.numpy()
    seqs = ids.numpy().astype(np.int32)
    lengths = np.array([5, 13], np.int32)  # one inside the first window, one past it
    slots = np.array([2, 0], np.int32)
    cache = new_cache(cfg)
    for b, n in enumerate(lengths):
        logits, cache = prefill_one(cfg, params, seqs[b, :n], slots[b], cache)
        assert rel_err(logits, ref[b, n - 1]) < RTOL

    pos = np.zeros(SLOTS, np.int32)
    pos[slots] = lengths
    steps = 0
    while pos[2] < total and pos[0] < total:
        step_tokens = np.zeros(SLOTS, np.int32)
        step_tokens[slots] = seqs[np.arange(2), pos[slots]]
        logits, cache = decode_step(params, cfg, step_tokens, pos, cache)
        for b, slot in enumerate(slots):
            assert rel_err(logits[slot], ref[b, pos[slot]]) < RTOL, (b, pos[slot])
        pos[slots] += 1
        steps += 1
    assert steps >= 3 * WINDOW


def greedy_jax(
    cfg: model.Config, params: model.Params, prompts: list[list[int]], slots: list[int], n: int
) -> list[list[int]]:
    """Prompts prefilled into the given slots, then decoded together greedily."""
    cache = new_cache(cfg)
    out: list[list[int]] = [[] for _ in prompts]
    token = np.zeros(SLOTS, np.int32)
    pos = np.zeros(SLOTS, np.int32)
    for b, (prompt, slot) in enumerate(zip(prompts, slots, strict=True)):
        logits, cache = prefill_one(cfg, params, prompt, slot, cache)
        token[slot] = int(np.argmax(logits))
        pos[slot] = len(prompt)
        out[b].append(int(token[slot]))
    for _ in range(n - 1):
        logits, cache = decode_step(params, cfg, token, pos, cache)
        token = np.asarray(jnp.argmax(logits, axis=-1), np.int32)
        pos = pos + 1
        for b, slot in enumerate(slots):
            out[b].append(int(token[slot]))
    return out


def greedy_transformers(reference: Any, prompt: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = reference.generate(
        ids, max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0
    )
    return out[0, len(prompt) :].tolist()


def test_greedy_64_tokens_single(loaded: Any) -> None:
    cfg, params, reference = loaded
    prompt = list(range(7, 7 + 2 * WINDOW + 3))
    assert greedy_jax(cfg, params, [prompt], [0], 64)[0] == greedy_transformers(
        reference, prompt, 64
    )


def test_greedy_64_tokens_batched_in_slots(loaded: Any) -> None:
    cfg, params, reference = loaded
    rng = np.random.default_rng(3)
    prompts = [rng.integers(3, cfg.vocab_size, size=n).tolist() for n in (3, 11, 26)]
    got = greedy_jax(cfg, params, prompts, [1, 3, 0], 64)
    for prompt, tokens in zip(prompts, got, strict=True):
        assert tokens == greedy_transformers(reference, prompt, 64)
