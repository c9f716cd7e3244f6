"""The JAX rig over HTTP: `rigbench rig serve jax` on random:tiny, a real server process."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
import torch
from transformers import AutoModelForCausalLM

from rigs.sources import ModelSource
from tests import loopback
from tests.rigs.conftest import RIG_SERVERS_GROUP, JaxRig

# Longer than the tiny config's sliding window (16), so generation crosses it.
PROMPT_IDS = [2, *range(300, 330)]
CONTEXT = 1024  # what the rig serves of the 4096 it is asked for (tests/rigs/conftest.py)
pytestmark = [RIG_SERVERS_GROUP, pytest.mark.slow]


@pytest.fixture(scope="module")
def reference(tiny: ModelSource) -> Any:
    model = AutoModelForCausalLM.from_pretrained(tiny.path).eval()

    def generate(prompt_ids: list[int], new_tokens: int) -> list[int]:
        with torch.inference_mode():
            out = model.generate(
                torch.tensor([prompt_ids]), max_new_tokens=new_tokens, do_sample=False
            )
        return [int(t) for t in out[0, len(prompt_ids) :]]

    return generate


def test_health_is_503_until_compiled(jax_rig_server: JaxRig) -> None:
    assert jax_rig_server.health_codes[0] == 503
    assert jax_rig_server.health_codes[-1] == 200


def test_settings_reach_the_engine(jax_rig_server: JaxRig) -> None:
    """The fixture's prompt buckets (the served context always the last) and batching."""
    provenance = loopback.get(f"{jax_rig_server.base}/provenance", timeout=10).json()
    assert provenance["prompt_buckets"] == f"64,{CONTEXT}"
    assert provenance["batched_prefill_max_len"] == "64"
    assert provenance["max_model_len"] == str(CONTEXT)
    assert provenance["model_revision"].startswith("seed0-")  # what it loaded, for the rows


def test_greedy_matches_generate_token_for_token(jax_rig_server: JaxRig, reference: Any) -> None:
    expected = reference(PROMPT_IDS, 40)
    assert len(expected) == 40
    body = {"prompt": PROMPT_IDS, "max_tokens": 40, "temperature": 0, "return_token_ids": True}
    response = loopback.post(f"{jax_rig_server.base}/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert choice["token_ids"] == expected
    assert choice["finish_reason"] == "length"


def test_concurrent_requests_share_decode_steps(jax_rig_server: JaxRig, reference: Any) -> None:
    """Six requests on four slots at once, each identical to generate alone; serving them
    compiles nothing new."""
    prompts = [[2, *range(100 + 7 * i, 100 + 7 * i + 5 + 9 * i)] for i in range(6)]
    before = loopback.get(f"{jax_rig_server.base}/provenance", timeout=10).json()

    async def one(client: httpx.AsyncClient, prompt: list[int]) -> list[int]:
        body = {"prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True}
        r = await client.post(
            f"{jax_rig_server.base}/v1/completions", json={**body, "return_token_ids": True}
        )
        assert r.status_code == 200, r.text
        return list(r.json()["choices"][0]["token_ids"])

    async def main() -> list[list[int]]:
        async with loopback.async_client(timeout=120) as client:
            return list(await asyncio.gather(*(one(client, p) for p in prompts)))

    got = asyncio.run(main())
    for prompt, tokens in zip(prompts, got, strict=True):
        assert tokens == reference(prompt, 24)
    after = loopback.get(f"{jax_rig_server.base}/provenance", timeout=10).json()
    assert after["compilations"] == before["compilations"]
    assert after["batching"] == "continuous, 4 slots"


def test_bad_request_is_4xx_and_rig_keeps_serving(jax_rig_server: JaxRig) -> None:
    too_long = {"prompt": [5] * (CONTEXT - 8), "max_tokens": 20}
    r = loopback.post(f"{jax_rig_server.base}/v1/completions", json=too_long, timeout=30)
    assert 400 <= r.status_code < 500, r.text
    assert "error" in r.json()
    ok = loopback.post(
        f"{jax_rig_server.base}/v1/completions",
        json={"prompt": [5, 6], "max_tokens": 2},
        timeout=30,
    )
    assert ok.status_code == 200
