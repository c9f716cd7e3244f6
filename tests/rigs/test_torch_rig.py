"""The torch rig over HTTP (a real server process on random:tiny) against transformers."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rigs.sources import ModelSource
from tests import loopback
from tests.rigs.conftest import RIG_SERVERS_GROUP
from tests.rigs.prompts import eos_prompt
from tests.rigs.rig_process import rig_server
from tests.rigs.sse_client import stream_events

# Longer than the tiny config's sliding window (16), so generation crosses it.
pytestmark = [RIG_SERVERS_GROUP, pytest.mark.slow]

PROMPT_IDS = [2, *range(300, 330)]
NEW_TOKENS = 40


@pytest.fixture(scope="module")
def reference(tiny: ModelSource) -> Any:
    model = AutoModelForCausalLM.from_pretrained(tiny.path).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny.path)

    def generate(prompt_ids: list[int], new_tokens: int) -> list[int]:
        with torch.inference_mode():
            out = model.generate(
                torch.tensor([prompt_ids]), max_new_tokens=new_tokens, do_sample=False
            )
        return [int(t) for t in out[0, len(prompt_ids) :]]

    generate.tokenizer = tokenizer  # type: ignore[attr-defined]
    return generate


def _complete(base: str, **body: Any) -> dict[str, Any]:
    response = loopback.post(f"{base}/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_greedy_matches_generate_token_for_token(torch_rig: str, reference: Any) -> None:
    expected = reference(PROMPT_IDS, NEW_TOKENS)
    assert len(expected) == NEW_TOKENS  # no EOS in the reference, so lengths must agree
    body = _complete(
        torch_rig,
        prompt=PROMPT_IDS,
        max_tokens=NEW_TOKENS,
        temperature=0,
        return_token_ids=True,
    )
    choice = body["choices"][0]
    assert choice["token_ids"] == expected
    assert choice["text"] == reference.tokenizer.decode(expected, skip_special_tokens=True)
    assert choice["finish_reason"] == "length"
    assert body["usage"] == {
        "prompt_tokens": len(PROMPT_IDS),
        "completion_tokens": NEW_TOKENS,
        "total_tokens": len(PROMPT_IDS) + NEW_TOKENS,
    }


def test_finish_reason_stop_at_eos_and_length_with_ignore_eos(torch_rig: str) -> None:
    prompt = eos_prompt()  # greedy reaches EOS after 20 tokens
    stopped = _complete(torch_rig, prompt=prompt, max_tokens=32, temperature=0)
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert stopped["usage"]["completion_tokens"] == 20
    forced = _complete(
        torch_rig, prompt=prompt, max_tokens=32, min_tokens=32, ignore_eos=True, temperature=0
    )
    assert forced["choices"][0]["finish_reason"] == "length"
    assert forced["usage"]["completion_tokens"] == 32


def test_text_prompt_is_tokenised_like_transformers(torch_rig: str, reference: Any) -> None:
    prompt = "The quick brown fox jumps over the lazy dog"
    prompt_ids = reference.tokenizer(prompt)["input_ids"]
    body = _complete(torch_rig, prompt=prompt, max_tokens=12, temperature=0, return_token_ids=True)
    assert body["usage"]["prompt_tokens"] == len(prompt_ids)
    assert body["choices"][0]["token_ids"] == reference(prompt_ids, 12)


def test_stream_concatenates_to_the_full_text(torch_rig: str) -> None:
    request = {"prompt": PROMPT_IDS, "max_tokens": 24, "temperature": 0, "ignore_eos": True}
    full = _complete(torch_rig, **request)["choices"][0]["text"]
    events, done = stream_events(
        torch_rig,
        "/v1/completions",
        {**request, "stream": True, "stream_options": {"include_usage": True}},
    )
    assert done
    *chunks, last_choice, usage = events
    assert all(c["choices"][0]["text"] for c in chunks), "empty content chunk"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == full
    assert last_choice["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == []
    assert usage["usage"]["completion_tokens"] == 24
    assert len({e["id"] for e in events}) == 1


def test_stream_without_usage_has_no_usage_chunk(torch_rig: str) -> None:
    events, done = stream_events(
        torch_rig,
        "/v1/completions",
        {"prompt": "hi", "max_tokens": 3, "temperature": 0, "stream": True},
    )
    assert done
    assert all("usage" not in e for e in events)  # OpenAI: the key only with include_usage
    assert events[-1]["choices"][0]["finish_reason"] in ("length", "stop")


def test_chat_completion_streaming_and_not(torch_rig: str, reference: Any) -> None:
    messages = [{"role": "user", "content": "Say something"}]
    response = loopback.post(
        f"{torch_rig}/v1/chat/completions",
        json={
            "messages": messages,
            "max_tokens": 10,
            "temperature": 0,
            "ignore_eos": True,
            "return_token_ids": True,
        },
        timeout=60,
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "chat.completion"
    prompt_ids = reference.tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False
    )
    prompt_ids = reference.tokenizer(prompt_ids, add_special_tokens=False)["input_ids"]
    assert body["usage"]["prompt_tokens"] == len(prompt_ids)
    assert body["choices"][0]["token_ids"] == reference(prompt_ids, 10)

    events, done = stream_events(
        torch_rig,
        "/v1/chat/completions",
        {
            "messages": messages,
            "max_completion_tokens": 10,
            "temperature": 0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    assert done
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert text == body["choices"][0]["message"]["content"]
    assert events[-1]["usage"]["completion_tokens"] == 10


def test_concurrent_requests_each_get_their_own_output(torch_rig: str, reference: Any) -> None:
    prompts = [[2, *range(400 + 7 * i, 420 + 7 * i)] for i in range(4)]

    async def one(client: httpx.AsyncClient, prompt: list[int]) -> list[int]:
        response = await client.post(
            "/v1/completions",
            json={
                "prompt": prompt,
                "max_tokens": 8,
                "temperature": 0,
                "ignore_eos": True,
                "return_token_ids": True,
            },
        )
        assert response.status_code == 200, response.text
        ids: list[int] = response.json()["choices"][0]["token_ids"]
        return ids

    async def all_at_once() -> list[list[int]]:
        async with loopback.async_client(base_url=torch_rig, timeout=120) as client:
            return list(await asyncio.gather(*(one(client, p) for p in prompts)))

    assert asyncio.run(all_at_once()) == [reference(p, 8) for p in prompts]


def test_sampling_with_a_seed_is_reproducible(torch_rig: str) -> None:
    request = {"prompt": PROMPT_IDS, "max_tokens": 16, "temperature": 1.0, "ignore_eos": True}
    first = _complete(torch_rig, **request, seed=7, return_token_ids=True)
    again = _complete(torch_rig, **request, seed=7, return_token_ids=True)
    other = _complete(torch_rig, **request, seed=8, return_token_ids=True)
    assert first["choices"][0]["token_ids"] == again["choices"][0]["token_ids"]
    assert first["choices"][0]["token_ids"] != other["choices"][0]["token_ids"]


def test_models_health_and_provenance(torch_rig: str) -> None:
    assert loopback.get(f"{torch_rig}/health").json() == {"status": "ok"}
    models = loopback.get(f"{torch_rig}/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["random:tiny"]
    assert models["data"][0]["max_model_len"] == 1024
    provenance = loopback.get(f"{torch_rig}/provenance").json()
    assert provenance["rig"] == "torch"
    assert provenance["batching"] == "serial"
    assert provenance["model_revision"].startswith("seed0-float32-")


def test_client_disconnect_mid_stream_leaves_the_rig_serving(torch_rig: str) -> None:
    body = {"prompt": PROMPT_IDS, "max_tokens": 500, "ignore_eos": True, "stream": True}
    with loopback.stream("POST", f"{torch_rig}/v1/completions", json=body, timeout=60) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")
    # The abandoned request is cancelled, so this one is not stuck behind 500 tokens.
    result = _complete(torch_rig, prompt="again", max_tokens=2, temperature=0, ignore_eos=True)
    assert result["usage"]["completion_tokens"] == 2


# -- batched and continuous modes ---------------------------------------------------------

# Requests of a wave are sent 15 ms apart: a window counted from the first arrival (the old
# rule, 20 ms) splits them. The idle gap is wide so that a loaded machine (load 17 on two
# cores, seen here) does not open one inside a wave.
WAVE_SETTINGS = ["batch_gap_ms=400", "batch_wait_ms=5000"]
WAVE_SPACING_S = 0.015


@dataclass(frozen=True)
class CheckpointRig:
    base: str
    checkpoint: Path


@pytest.fixture(scope="module")
def batched_checkpoint_rig(
    tiny: ModelSource, rig_cache: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CheckpointRig]:
    """The batched engine, serving random:tiny's weights from a plain directory (`rigbench rig
    serve torch --model DIR`): one server start for both."""
    folder = tmp_path_factory.mktemp("torch-batched")
    checkpoint = folder / "my-checkpoint"
    shutil.copytree(tiny.path, checkpoint)
    settings = ["batching=batched", *WAVE_SETTINGS]
    with rig_server(
        "torch", str(checkpoint), cache=rig_cache, log=folder / "server.log", settings=settings
    ) as base:
        yield CheckpointRig(base=base, checkpoint=checkpoint)


@pytest.fixture(scope="module")
def batched_rig(batched_checkpoint_rig: CheckpointRig) -> str:
    return batched_checkpoint_rig.base


def test_serves_a_local_checkpoint_directory(
    batched_checkpoint_rig: CheckpointRig, reference: Any
) -> None:
    """A plain directory, served under its path, with no revision to name."""
    base, checkpoint = batched_checkpoint_rig.base, batched_checkpoint_rig.checkpoint
    models = loopback.get(f"{base}/v1/models").json()
    assert [m["id"] for m in models["data"]] == [str(checkpoint)]
    body = _complete(
        base,
        model=str(checkpoint),
        prompt=PROMPT_IDS,
        max_tokens=16,
        temperature=0,
        return_token_ids=True,
    )
    assert body["choices"][0]["token_ids"] == reference(PROMPT_IDS, 16)
    assert loopback.get(f"{base}/provenance").json()["model_revision"] == "local"


@pytest.fixture(scope="module")
def continuous_rig(rig_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Three slots, so the tests' requests outnumber them and must join as others leave."""
    log = tmp_path_factory.mktemp("torch-continuous") / "server.log"
    settings = ["batching=continuous", "max_batch=3", *WAVE_SETTINGS]
    with rig_server("torch", "random:tiny", cache=rig_cache, log=log, settings=settings) as base:
        yield base


async def _greedy_ids(
    client: httpx.AsyncClient, prompt: list[int], max_tokens: int, delay_s: float = 0.0
) -> list[int]:
    await asyncio.sleep(delay_s)
    response = await client.post(
        "/v1/completions",
        json={
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "return_token_ids": True,
        },
    )
    assert response.status_code == 200, response.text
    ids: list[int] = response.json()["choices"][0]["token_ids"]
    return ids


def _wave(base: str, prompts: list[list[int]], max_tokens: list[int], spacing_s: float) -> Any:
    async def run() -> list[list[int]]:
        async with loopback.async_client(base_url=base, timeout=120) as client:
            calls = (
                _greedy_ids(client, p, n, i * spacing_s)
                for i, (p, n) in enumerate(zip(prompts, max_tokens, strict=True))
            )
            return list(await asyncio.gather(*calls))

    return asyncio.run(run())


def _recorded(base: str, key: str) -> list[int]:
    value: str = loopback.get(f"{base}/provenance").json()[key]
    return [int(n) for n in value.split(",") if n]


def _until_eos(ids: list[int]) -> list[int]:
    """generate() keeps the EOS it stops at; the rig does not send it."""
    return ids[:-1] if ids and ids[-1] == 1 else ids


def test_a_wave_of_concurrent_requests_runs_as_one_batch(batched_rig: str, reference: Any) -> None:
    prompts = [[2, *range(500 + 9 * i, 520 + 9 * i)] for i in range(8)]  # one length: no padding
    before = _recorded(batched_rig, "recent_batches")
    outputs = _wave(batched_rig, prompts, [6] * 8, WAVE_SPACING_S)
    assert _recorded(batched_rig, "recent_batches")[len(before) :] == [8]
    assert outputs == [_until_eos(reference(p, 6)) for p in prompts]


def test_continuous_greedy_outputs_equal_generate(continuous_rig: str, reference: Any) -> None:
    """Seven requests of different lengths through three slots: each joins when one frees
    up, between decode steps, and still gets plain `generate`'s greedy tokens."""
    prompts = [[2, *range(600 + 11 * i, 610 + 11 * i + 4 * i)] for i in range(7)]
    max_tokens = [12, 30, 5, 17, 40, 9, 3]  # prompts up to 35 tokens: past the window (16)
    outputs = _wave(continuous_rig, prompts, max_tokens, 0.0)
    assert outputs == [
        _until_eos(reference(p, n)) for p, n in zip(prompts, max_tokens, strict=True)
    ]
    assert [len(o) for o in outputs] == max_tokens  # no EOS reached: every row ran its length


def test_continuous_admits_a_wave_in_one_prefill(continuous_rig: str) -> None:
    before = _recorded(continuous_rig, "recent_prefill_batches")
    prompts = [[2, *range(700 + 13 * i, 716 + 13 * i)] for i in range(3)]
    _wave(continuous_rig, prompts, [4] * 3, WAVE_SPACING_S)
    assert _recorded(continuous_rig, "recent_prefill_batches")[len(before) :] == [3]


def test_continuous_eos_min_tokens_and_seeded_sampling(continuous_rig: str) -> None:
    prompt = eos_prompt()  # greedy reaches EOS after 20 tokens
    stopped = _complete(continuous_rig, prompt=prompt, max_tokens=32, temperature=0)
    assert stopped["choices"][0]["finish_reason"] == "stop"
    assert stopped["usage"]["completion_tokens"] == 20
    held = _complete(continuous_rig, prompt=prompt, max_tokens=32, min_tokens=25, temperature=0)
    assert held["usage"]["completion_tokens"] >= 25
    request = {"prompt": PROMPT_IDS, "max_tokens": 16, "temperature": 1.0, "ignore_eos": True}
    first = _complete(continuous_rig, **request, seed=7, return_token_ids=True)
    again = _complete(continuous_rig, **request, seed=7, return_token_ids=True)
    other = _complete(continuous_rig, **request, seed=8, return_token_ids=True)
    assert first["choices"][0]["token_ids"] == again["choices"][0]["token_ids"]
    assert first["choices"][0]["token_ids"] != other["choices"][0]["token_ids"]


def test_continuous_provenance_and_abandoned_stream(continuous_rig: str) -> None:
    provenance = loopback.get(f"{continuous_rig}/provenance").json()
    assert provenance["batching"] == "continuous"
    assert provenance["compile"] == "off"  # the CPU default
    assert provenance["decode_widths"] == "1,2,3"
    assert float(provenance["ready_s"]) >= float(provenance["compile_s"]) >= 0
    body = {"prompt": PROMPT_IDS, "max_tokens": 900, "ignore_eos": True, "stream": True}
    for _ in range(3):  # as many abandoned streams as slots: each must free its slot
        with loopback.stream("POST", f"{continuous_rig}/v1/completions", json=body) as response:
            assert next(response.iter_lines()).startswith("data: ")
    result = _complete(continuous_rig, prompt="again", max_tokens=2, ignore_eos=True)
    assert result["usage"]["completion_tokens"] == 2


def test_continuous_scores_tokens_as_the_batched_engine_does(
    continuous_rig: str, batched_rig: str
) -> None:
    """Logprobs from the slots (the agreement probe's near-tie split needs them) match those
    `generate` gives on the same prompt, token for token."""
    body = {"prompt": PROMPT_IDS, "max_tokens": 6, "temperature": 0, "logprobs": 2,
            "return_token_ids": True}  # fmt: skip
    slots, batched = (_complete(rig, **body)["choices"][0] for rig in (continuous_rig, batched_rig))
    assert slots["token_ids"] == batched["token_ids"]
    got, want = slots["logprobs"], batched["logprobs"]
    assert got["tokens"] == want["tokens"]
    assert got["token_logprobs"] == pytest.approx(want["token_logprobs"], abs=1e-3)
    for mine, theirs in zip(got["top_logprobs"], want["top_logprobs"], strict=True):
        assert mine.keys() == theirs.keys()
        assert list(mine.values()) == pytest.approx(list(theirs.values()), abs=1e-3)
