"""The torch rig's continuous engine sized as the JAX rig is: 'auto' slots from free GPU memory
(32 on a CPU, which reports none), and decode steps of 8 or more slots reading a context
bucket of the cache, not all of it, with the same greedy tokens as plain `generate`."""

import asyncio
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from rigs.serving.engine import SamplingParams
from rigs.serving.sizing import AUTO, AUTO_SLOTS_NO_STATS
from rigs.sources import ModelSource
from rigs.torch.continuous import ContinuousEngine
from rigs.torch.slots import SlotBuffers

NEW_TOKENS = 24


def test_auto_slots_on_a_cpu_fill_the_cache_with_32_slots(tiny: ModelSource) -> None:
    engine = ContinuousEngine(
        tiny, device="cpu", slots=AUTO, compile="off", admit_gap_s=0, admit_wait_s=0
    )
    assert engine.slots == AUTO_SLOTS_NO_STATS
    assert engine.widths[-1] == AUTO_SLOTS_NO_STATS
    assert engine.provenance()["max_batch"] == str(AUTO_SLOTS_NO_STATS)
    per_slot = SlotBuffers.bytes_per_slot(
        engine.model.get_decoder(), engine.max_model_len, engine.model.dtype
    )
    assert engine.slot_model.buffers.nbytes() == AUTO_SLOTS_NO_STATS * per_slot


def _greedy_reference(tiny: ModelSource, prompts: list[list[int]]) -> list[list[int]]:
    model: Any = AutoModelForCausalLM.from_pretrained(tiny.path).eval()
    model.generation_config.eos_token_id = None  # every request below ignores EOS
    outputs = []
    with torch.inference_mode():
        for prompt in prompts:
            out = model.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False)
            outputs.append([int(t) for t in out[0, len(prompt) :]])
    return outputs


def test_steps_across_context_buckets_keep_generates_greedy_tokens(tiny: ModelSource) -> None:
    engine = ContinuousEngine(
        tiny,
        device="cpu",
        slots=8,
        compile="off",
        context_start=16,
        admit_gap_s=0.2,
        admit_wait_s=2.0,
    )
    assert engine.contexts == (16, 64, 256, 1024)
    assert engine.contexts_for(8) == engine.contexts
    assert engine.contexts_for(4) == (1024,)
    # eight prompts: one decode width of 8, positions crossing 16, 64 and 256 as they decode
    lengths = [3, 9, 14, 30, 50, 60, 120, 250]
    prompts = [[2, *range(100 + n, 100 + 2 * n)][:n] for n in lengths]
    params = SamplingParams(max_tokens=NEW_TOKENS, ignore_eos=True)

    async def one(prompt: list[int]) -> list[int]:
        return [token async for token in engine.generate(prompt, params)]

    async def all_at_once() -> list[list[int]]:
        return list(await asyncio.gather(*(one(p) for p in prompts)))

    assert asyncio.run(all_at_once()) == _greedy_reference(tiny, prompts)
    assert engine.provenance()["context_buckets"] == "16,64,256,1024"
