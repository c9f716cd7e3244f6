"""The JAX engine through the Engine protocol: continuous batching against transformers."""

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rigs.jax import checkpoint
from rigs.jax.engine import EngineOptions, JaxEngine
from rigs.serving.engine import SamplingParams
from tests.rigs.jax.conftest import torch

# The module's engine compiles every program first (inside the first test): on a loaded
# 2-core machine that alone has taken over 600 s.
pytestmark = [pytest.mark.timeout(1200), pytest.mark.slow]

OPTIONS = EngineOptions(
    max_slots=4,
    max_model_len=128,
    steps_per_call=4,
    prompt_buckets=(32, 128),
    slot_widths=(2, 4),
    prefill_batches=(1, 4),
    # positions past 64 (prompts up to 40 tokens + 64 new ones) move a request's chunks
    # from the 64-row context program to the whole cache's
    context_buckets=(64, 128),
    context_min_width=4,
)


@pytest.fixture(scope="module")
def engine(tiny_checkpoint: tuple[Path, Any]) -> Iterator[JaxEngine]:
    directory, _ = tiny_checkpoint
    cfg = checkpoint.load_config(directory)
    params = checkpoint.load_params(directory, cfg, jnp.float32)
    e = JaxEngine(params, cfg, OPTIONS, model_name="tiny")
    e.start()
    e.wait_ready(timeout=900)  # compiling on a loaded 2-core machine
    yield e
    e.close()


def greedy_reference(reference: Any, prompt: list[int], n: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = reference.generate(
        ids, max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0
    )
    return out[0, len(prompt) :].tolist()


async def collect(engine: JaxEngine, prompt: list[int], params: SamplingParams) -> list[int]:
    return [t async for t in engine.generate(prompt, params)]


def run_all(engine: JaxEngine, jobs: list[tuple[list[int], SamplingParams]]) -> list[list[int]]:
    async def main() -> list[list[int]]:
        return list(await asyncio.gather(*(collect(engine, p, s) for p, s in jobs)))

    return asyncio.run(main())


PROMPTS = [np.random.default_rng(n).integers(3, 512, size=n).tolist() for n in (3, 9, 17, 30, 40)]


def test_concurrent_greedy_matches_transformers(engine: JaxEngine, tiny_checkpoint: Any) -> None:
    """Five requests on four slots (one waits for a free slot), 64 tokens each."""
    _, reference = tiny_checkpoint
    params = SamplingParams(max_tokens=64, ignore_eos=True)
    compiled = engine.compiles.snapshot()["executables"]
    got = run_all(engine, [(p, params) for p in PROMPTS])
    for prompt, tokens in zip(PROMPTS, got, strict=True):
        assert tokens == greedy_reference(reference, prompt, 64)
    assert engine.compiles.snapshot()["executables"] == compiled  # warm-up compiled it all


def test_eos_stops_unless_min_tokens_or_ignore_eos(engine: JaxEngine, tiny_checkpoint: Any) -> None:
    _, reference = tiny_checkpoint
    prompt = PROMPTS[1]
    ref = greedy_reference(reference, prompt, 40)
    stop = ref[10]  # pretend this token is EOS
    first = ref.index(stop)
    engine.eos_token_ids = frozenset({stop})
    engine._eos = jax.device_put(np.asarray([stop], np.int32), engine.device)
    try:
        [stopped, forced, ignored, short] = run_all(
            engine,
            [
                (prompt, SamplingParams(max_tokens=40)),
                (prompt, SamplingParams(max_tokens=40, min_tokens=first + 3)),
                (prompt, SamplingParams(max_tokens=40, ignore_eos=True)),
                (prompt, SamplingParams(max_tokens=first)),
            ],
        )
    finally:
        engine.eos_token_ids = frozenset({1})
        engine._eos = jax.device_put(np.asarray([1], np.int32), engine.device)
    assert stopped == ref[:first]  # stops at EOS, EOS not yielded
    assert len(forced) >= first + 3  # EOS masked until min_tokens
    assert forced[:first] == ref[:first]
    assert forced[first] != stop
    assert stop not in forced[: first + 3]
    assert ignored == ref  # EOS is an ordinary token
    assert short == ref[:first]  # max_tokens


def test_seeded_sampling_is_reproducible_whatever_the_batch(engine: JaxEngine) -> None:
    hot = SamplingParams(max_tokens=24, temperature=1.0, seed=7, ignore_eos=True)
    alone = run_all(engine, [(PROMPTS[2], hot)])[0]
    crowd = run_all(
        engine,
        [
            (PROMPTS[0], SamplingParams(max_tokens=30, ignore_eos=True)),
            (PROMPTS[2], hot),
            (PROMPTS[3], SamplingParams(max_tokens=10, temperature=0.7, top_p=0.9, seed=1)),
        ],
    )
    other = run_all(engine, [(PROMPTS[2], SamplingParams(**{**hot.__dict__, "seed": 8}))])[0]
    assert crowd[1] == alone
    assert other != alone
    assert len(crowd[2]) == 10


def test_cancelled_request_frees_its_slot(engine: JaxEngine, tiny_checkpoint: Any) -> None:
    _, reference = tiny_checkpoint

    async def main() -> list[int]:
        stream = engine.generate(PROMPTS[0], SamplingParams(max_tokens=100, ignore_eos=True))
        got = [await anext(stream) for _ in range(3)]
        await stream.aclose()
        assert len(got) == 3
        jobs = [
            collect(engine, p, SamplingParams(max_tokens=8, ignore_eos=True)) for p in PROMPTS[:4]
        ]
        outs = await asyncio.gather(*jobs)
        return outs[3]

    assert asyncio.run(main()) == greedy_reference(reference, PROMPTS[3], 8)
    assert not any(engine._owners)


@pytest.mark.parametrize(
    ("prompt", "params", "message"),
    [
        ([], SamplingParams(max_tokens=4), "prompt is empty"),
        ([5, 512], SamplingParams(max_tokens=4), r"outside \[0, 512\)"),
        ([5] * 100, SamplingParams(max_tokens=29), "exceeds max_model_len 128"),
        ([5], SamplingParams(max_tokens=0), "max_tokens must be at least 1"),
        ([5], SamplingParams(max_tokens=4, min_tokens=5), "min_tokens"),
    ],
)
def test_bad_requests_are_refused(
    engine: JaxEngine, prompt: list[int], params: SamplingParams, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        run_all(engine, [(prompt, params)])


def test_provenance_counts_compilations(engine: JaxEngine) -> None:
    p = engine.provenance()
    assert p["batching"] == "continuous, 4 slots"
    assert p["kernels"] == "xla"  # the default: rigs/jax/gemv.py's Pallas GEMV is opt-in
    # 2 prompt buckets + 2 slot widths + deactivate, at least
    assert int(p["compilations"]) >= 5
    assert float(p["warm_up_seconds"]) > 0


def test_greedy_decode_program_has_no_sampling_branch(engine: JaxEngine) -> None:
    """A branch costs a device-to-host sync per step on a GPU: greedy chunks have none,
    nor the logprobs' top-k over the vocabulary (a request that wants them runs the other
    program)."""
    greedy = engine._decode_programs[(4, 64, True)].as_text()
    sampled = engine._decode_programs[(4, 64, False)].as_text()
    assert "conditional(" not in greedy
    assert "sort(" not in greedy
    assert '"TopK"' not in greedy
    assert "sort(" in sampled  # top-p, behind its own branch
    assert '"TopK"' in sampled


def test_batched_prefill_matches_one_prompt_per_call(engine: JaxEngine) -> None:
    """Three prompts and a padding row in one call leave the cache and slots exactly as
    three single-prompt calls do; the padding row writes nothing."""
    prompts = [PROMPTS[0], PROMPTS[2], PROMPTS[3]]
    rows = [(SamplingParams(max_tokens=9, min_tokens=2), 5)] * 3
    pad = OPTIONS.max_slots
    singles = []
    engine._reset_device_state()
    for slot, (prompt, row) in enumerate(zip(prompts, rows, strict=True)):
        singles.append(jax.device_get(engine._prefill(32, [prompt], [row], [slot])))
    one_by_one = jax.device_get((engine._cache, engine._slots))
    engine._reset_device_state()
    batched = jax.device_get(engine._prefill(32, [*prompts, [0]], [*rows, rows[0]], [0, 1, 2, pad]))
    together = jax.device_get((engine._cache, engine._slots))
    engine._reset_device_state()
    for got, want in zip(batched[:3], list(zip(*singles, strict=True))[:3], strict=True):
        np.testing.assert_array_equal(got[:3], np.concatenate(want))
    for got, want in zip(jax.tree.leaves(together), jax.tree.leaves(one_by_one), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)  # batch shapes
    assert not together[1].active[3]  # slot 3 untouched by the padding row
    assert not np.any(together[0].k[0][3])


def test_decode_programs_per_width_and_context() -> None:
    o = EngineOptions(max_slots=64, max_model_len=4096)
    assert o.widths == (1, 2, 4, 8, 16, 32, 64)  # concurrency 32 runs at width 32
    assert o.contexts == (1024, 4096)
    assert o.contexts_for(4) == (4096,)  # narrow steps: KV reads are a few % of a step
    assert o.contexts_for(8) == (1024, 4096)
    assert len(o.decode_keys) == 2 * (3 + 4 * 2)
    assert EngineOptions(max_model_len=128).contexts == (128,)
    with pytest.raises(ValueError, match="context_buckets must rise strictly to 128"):
        EngineOptions(max_model_len=128, context_buckets=(64,))


def test_prefill_programs_per_bucket_and_batch_size() -> None:
    o = EngineOptions(max_slots=8, max_model_len=4096, prefill_batches=(1, 4, 16))
    assert o.prefill_sizes(1024) == (1, 4, 8)  # 16 capped at max_slots
    assert o.prefill_sizes(2048) == (1,)  # long prompts one per call
    assert len(o.prefill_keys) == 5 * 3 + 2
    with pytest.raises(ValueError, match="prefill_batches must rise strictly from 1"):
        EngineOptions(prefill_batches=(4, 8))


def test_scored_tokens_are_greedy_with_the_references_logprobs(
    engine: JaxEngine, tiny_checkpoint: Any
) -> None:
    """The first token comes from a prefill program, the rest from decode chunks: both
    return the reference's log-softmax, chosen token first."""
    _, reference = tiny_checkpoint
    prompt, n = PROMPTS[2], 6
    params = SamplingParams(max_tokens=n, ignore_eos=True)

    async def main() -> list[Any]:
        return [t async for t in engine.generate_scored(prompt, params, 2)]

    scored = asyncio.run(main())
    tokens = [s.token for s in scored]
    assert tokens == greedy_reference(reference, prompt, n)
    with torch.inference_mode():
        logits = reference(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]
    rows = torch.log_softmax(logits.float(), dim=-1)
    for s, row in zip(scored, rows, strict=True):
        values, ids = row.topk(2)
        assert [t for t, _ in s.top] == ids.tolist()
        assert s.top[0][0] == s.token
        np.testing.assert_allclose(s.logprob, float(row[s.token]), atol=1e-4)
        np.testing.assert_allclose([lp for _, lp in s.top], values.tolist(), atol=1e-4)
