"""The JAX rig over HTTP: `rigbench rig serve jax` on random:tiny, a real server process."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from transformers import AutoModelForCausalLM

from rigs.sources import ModelSource
from tests.rigs.rig_process import REPO, free_port, stop_process_group

# Longer than the tiny config's sliding window (16), so generation crosses it.
PROMPT_IDS = [2, *range(300, 330)]
SETTINGS = ["max_model_len=128", "max_slots=4", "steps_per_call=4"]


class Rig:
    def __init__(self, base: str, health_codes: list[int]) -> None:
        self.base = base
        self.health_codes = health_codes  # /health answers seen while starting


@pytest.fixture(scope="module")
def jax_rig(
    rig_cache: Path, tiny: ModelSource, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Rig]:
    log = tmp_path_factory.mktemp("jax-rig") / "server.log"
    port = free_port()
    # CPU codegen at -O0 compiles the buckets twice as fast; numerics are unchanged.
    env = {
        **os.environ,
        "RIGBENCH_CACHE": str(rig_cache),
        "PYTHONPATH": str(REPO),
        "XLA_FLAGS": "--xla_backend_optimization_level=0",
    }
    argv = [sys.executable, "-m", "rigbench", "rig", "serve", "jax", "--model", "random:tiny"]
    argv += ["--host", "127.0.0.1", "--port", str(port)]
    for s in SETTINGS:
        argv += ["--set", s]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    base = f"http://127.0.0.1:{port}"
    codes: list[int] = []
    try:
        deadline = time.monotonic() + 300
        while not codes or codes[-1] != 200:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"rig not healthy ({proc.returncode}):\n{log.read_text()[-4000:]}"
                )
            with contextlib.suppress(httpx.TransportError):
                codes.append(httpx.get(f"{base}/health", timeout=2).status_code)
            time.sleep(0.2)
        yield Rig(base, codes)
    finally:
        stop_process_group(proc)


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


def test_health_is_503_until_compiled(jax_rig: Rig) -> None:
    assert jax_rig.health_codes[0] == 503
    assert jax_rig.health_codes[-1] == 200


def test_greedy_matches_generate_token_for_token(jax_rig: Rig, reference: Any) -> None:
    expected = reference(PROMPT_IDS, 40)
    assert len(expected) == 40
    body = {"prompt": PROMPT_IDS, "max_tokens": 40, "temperature": 0, "return_token_ids": True}
    response = httpx.post(f"{jax_rig.base}/v1/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert choice["token_ids"] == expected
    assert choice["finish_reason"] == "length"


def test_concurrent_requests_share_decode_steps(jax_rig: Rig, reference: Any) -> None:
    """Six requests on four slots at once, each identical to generate alone; serving them
    compiles nothing new."""
    prompts = [[2, *range(100 + 7 * i, 100 + 7 * i + 5 + 9 * i)] for i in range(6)]
    before = httpx.get(f"{jax_rig.base}/provenance", timeout=10).json()

    async def one(client: httpx.AsyncClient, prompt: list[int]) -> list[int]:
        body = {"prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True}
        r = await client.post(
            f"{jax_rig.base}/v1/completions", json={**body, "return_token_ids": True}
        )
        assert r.status_code == 200, r.text
        return list(r.json()["choices"][0]["token_ids"])

    async def main() -> list[list[int]]:
        async with httpx.AsyncClient(timeout=120) as client:
            return list(await asyncio.gather(*(one(client, p) for p in prompts)))

    got = asyncio.run(main())
    for prompt, tokens in zip(prompts, got, strict=True):
        assert tokens == reference(prompt, 24)
    after = httpx.get(f"{jax_rig.base}/provenance", timeout=10).json()
    assert after["compilations"] == before["compilations"]
    assert after["batching"] == "continuous, 4 slots"


def test_bad_request_is_4xx_and_rig_keeps_serving(jax_rig: Rig) -> None:
    too_long = {"prompt": [5] * 120, "max_tokens": 20}
    r = httpx.post(f"{jax_rig.base}/v1/completions", json=too_long, timeout=30)
    assert 400 <= r.status_code < 500, r.text
    assert "error" in r.json()
    ok = httpx.post(
        f"{jax_rig.base}/v1/completions", json={"prompt": [5, 6], "max_tokens": 2}, timeout=30
    )
    assert ok.status_code == 200
