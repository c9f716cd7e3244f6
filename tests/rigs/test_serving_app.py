"""The shared server's lifecycle and the torch engine's stop rules, in-process on random:tiny."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
import torch
from typer.testing import CliRunner

import rigs.cli
from rigbench.cli import app
from rigs.serving.app import build_app, build_lazy_app
from rigs.serving.engine import Engine, SamplingParams, ScoredToken
from rigs.serving.tokenizer import ServingTokenizer
from rigs.sources import ModelSource
from rigs.torch.engine import TorchEngine
from tests import loopback
from tests.rigs.prompts import eos_prompt
from tests.rigs.rig_process import free_port

PROMPT = [2, *range(500, 520)]


@pytest.fixture(scope="module")
def engine(tiny: ModelSource) -> TorchEngine:
    return TorchEngine(tiny, batching="serial", max_batch=1, batch_gap_s=0, batch_wait_s=0)


@pytest.fixture(scope="module")
def tokenizer(tiny: ModelSource) -> ServingTokenizer:
    return ServingTokenizer.from_pretrained(tiny.path)


def _run(engine: Engine, params: SamplingParams, prompt: list[int] = PROMPT) -> list[int]:
    async def collect() -> list[int]:
        return [t async for t in engine.generate(prompt, params)]

    return asyncio.run(collect())


def test_eos_min_tokens_and_ignore_eos(engine: TorchEngine) -> None:
    first = _run(engine, SamplingParams(max_tokens=1, ignore_eos=True))[0]
    saved = engine.eos_token_ids
    engine.eos_token_ids = frozenset({first})  # make greedy's first token the EOS
    try:
        assert _run(engine, SamplingParams(max_tokens=8)) == []
        forced = _run(engine, SamplingParams(max_tokens=8, min_tokens=3))
        assert len(forced) >= 3
        assert first not in forced[:3]  # EOS is masked until min_tokens
        assert _run(engine, SamplingParams(max_tokens=8, ignore_eos=True))[0] == first
        assert len(_run(engine, SamplingParams(max_tokens=8, ignore_eos=True))) == 8
    finally:
        engine.eos_token_ids = saved


def test_the_checkpoints_own_eos_obeys_ignore_eos_and_min_tokens(engine: TorchEngine) -> None:
    assert engine.eos_token_ids == frozenset({1})
    prompt = eos_prompt()
    forced = _run(engine, SamplingParams(max_tokens=32, min_tokens=32, ignore_eos=True), prompt)
    assert len(forced) == 32
    assert forced[20] == 1
    assert _run(engine, SamplingParams(max_tokens=32), prompt) == forced[:20]
    at_least = _run(engine, SamplingParams(max_tokens=32, min_tokens=25), prompt)
    assert len(at_least) >= 25
    assert 1 not in at_least[:25]


def test_incremental_detokenisation_rebuilds_multibyte_text(tokenizer: ServingTokenizer) -> None:
    text = "naïve café — 東京 🙂 done"
    ids = tokenizer.encode(text)[1:]  # without BOS
    detok = tokenizer.detokenizer()
    deltas = [detok.push(i) for i in ids]
    deltas.append(detok.flush())
    assert "".join(deltas) == text
    assert all("\ufffd" not in d for d in deltas)


class _Breakable:
    """A real TorchEngine whose generations can be made to fail, to test /health."""

    def __init__(self, inner: TorchEngine) -> None:
        self.inner = inner
        self.broken = False
        self.model_name = inner.model_name
        self.max_model_len = inner.max_model_len
        self.vocab_size = inner.vocab_size
        self.eos_token_ids = inner.eos_token_ids

    def provenance(self) -> dict[str, str]:
        return dict(self.inner.provenance())

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[int]:
        if self.broken:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        async for token in self.inner.generate(prompt_ids, params):
            yield token


def _wait_for(base: str, status: int) -> httpx.Response:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        response = loopback.get(f"{base}/health")
        if response.status_code == status:
            return response
        time.sleep(0.05)
    raise AssertionError(f"/health never answered {status}")


@pytest.mark.slow
def test_health_follows_loading_warmup_and_real_generations(
    engine: TorchEngine, tokenizer: ServingTokenizer
) -> None:
    release = threading.Event()
    breakable = _Breakable(engine)

    def load() -> tuple[Engine, ServingTokenizer]:
        release.wait(30)
        return breakable, tokenizer

    with loopback.serve_in_thread(build_lazy_app(load)) as base:
        loading = loopback.get(f"{base}/health")
        assert loading.status_code == 503
        assert loading.json()["status"] == "loading"
        refused = loopback.post(f"{base}/v1/completions", json={"prompt": "hi"})
        assert refused.status_code == 503
        assert "loading" in refused.json()["error"]["message"]

        release.set()
        _wait_for(base, 200)

        breakable.broken = True
        failed = loopback.post(f"{base}/v1/completions", json={"prompt": "hi", "max_tokens": 2})
        assert failed.status_code == 500
        message = failed.json()["error"]["message"]
        assert message.startswith("generation failed in the engine (the rig's log has the")
        assert "illegal memory access" not in message  # the engine's own text stays in the log
        assert loopback.get(f"{base}/health").json()["error"] == "the last generation failed"

        breakable.broken = False
        ok = loopback.post(f"{base}/v1/completions", json={"prompt": "hi", "max_tokens": 2})
        assert ok.status_code == 200
        assert loopback.get(f"{base}/health").status_code == 200


@pytest.mark.slow
def test_boot_says_when_the_rig_began_loading_and_first_completed(
    engine: TorchEngine, tokenizer: ServingTokenizer
) -> None:
    release = threading.Event()

    def load() -> tuple[Engine, ServingTokenizer]:
        release.wait(30)
        return engine, tokenizer

    before = time.time()
    with loopback.serve_in_thread(build_lazy_app(load)) as base:
        loading = loopback.get(f"{base}/boot").json()
        assert loading["phase"] == "loading"
        assert set(loading["marks"]) == {"loading"}  # the engine was built before this app
        released = time.time()
        release.set()
        _wait_for(base, 200)
        ready = loopback.get(f"{base}/boot").json()
    assert ready["phase"] == "ready"
    marks = ready["marks"]
    # ready is the warm-up's real completion, after the engine was handed over
    assert before <= marks["loading"] <= released <= marks["ready"]


@pytest.mark.slow
def test_a_failed_load_is_reported_and_signalled() -> None:
    failures: list[str] = []

    def load() -> tuple[Engine, ServingTokenizer]:
        raise FileNotFoundError("model.safetensors")

    with loopback.serve_in_thread(build_lazy_app(load, on_failure=failures.append)) as base:
        body = _wait_for(base, 503).json()
        deadline = time.monotonic() + 10
        while body["status"] != "failed" and time.monotonic() < deadline:
            body = loopback.get(f"{base}/health").json()
        assert body == {"status": "failed", "error": "FileNotFoundError: model.safetensors"}
        assert failures == ["FileNotFoundError: model.safetensors"]


def test_rig_serve_exits_2_when_its_model_cannot_load(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object) -> None:
        raise AssertionError("the rig was started")

    monkeypatch.setattr(rigs.cli, "exec_rig", refuse)  # in-process: it would replace this one
    args = ["rig", "serve", "torch", "--model", "/nonexistent/model", "--host", "127.0.0.1"]
    result = CliRunner().invoke(app, [*args, "--port", str(free_port())], catch_exceptions=False)
    assert result.exit_code == 2  # bad input: one line, no traceback
    assert "model directory '/nonexistent/model' does not exist" in result.stderr


def test_batched_mode_runs_waiting_requests_together_with_generates_output(
    tiny: ModelSource, engine: TorchEngine
) -> None:
    batched = TorchEngine(tiny, batching="batched", max_batch=8, batch_gap_s=0.01, batch_wait_s=0.5)
    calls: list[int] = []
    real_generate = batched.model.generate

    def counting_generate(input_ids: object, **kwargs: object) -> object:
        calls.append(int(input_ids.shape[0]))  # type: ignore[attr-defined]
        return real_generate(input_ids, **kwargs)

    batched.model.generate = counting_generate
    # Unequal lengths (left padding) and unequal max_tokens in one batch.
    prompts = [[2, *range(1000 + 50 * i, 1006 + 50 * i + 7 * i)] for i in range(4)]
    lengths = [12, 5, 12, 9]

    async def all_at_once() -> list[list[int]]:
        async def one(prompt: list[int], n: int) -> list[int]:
            params = SamplingParams(max_tokens=n, ignore_eos=True)
            return [t async for t in batched.generate(prompt, params)]

        return list(
            await asyncio.gather(*(one(p, n) for p, n in zip(prompts, lengths, strict=True)))
        )

    got = asyncio.run(all_at_once())
    expected = [
        _run(engine, SamplingParams(max_tokens=n, ignore_eos=True), p)
        for p, n in zip(prompts, lengths, strict=True)
    ]
    assert got == expected
    assert calls == [4]
    assert batched.provenance()["batching"] == "batched"


def _logprobs_of(engine: TorchEngine, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """The model's own log-softmax [len(tokens), V] at each generated position."""
    ids = torch.tensor([prompt + tokens])
    with torch.inference_mode():
        logits = engine.model(ids).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits.float(), dim=-1)


def test_scored_generation_is_greedy_with_the_models_own_logprobs(engine: TorchEngine) -> None:
    params = SamplingParams(max_tokens=6, ignore_eos=True)

    async def collect() -> list[ScoredToken]:
        return [t async for t in engine.generate_scored(PROMPT, params, 3)]

    scored = asyncio.run(collect())
    assert [s.token for s in scored] == _run(engine, params)
    for s, row in zip(scored, _logprobs_of(engine, PROMPT, [s.token for s in scored]), strict=True):
        values, ids = row.topk(3)
        assert [t for t, _ in s.top] == ids.tolist()
        assert s.top[0][0] == s.token  # greedy: the chosen token is the most likely
        assert s.logprob == pytest.approx(float(row[s.token]), abs=1e-4)
        assert [lp for _, lp in s.top] == pytest.approx(values.tolist(), abs=1e-4)


@pytest.mark.slow
def test_logprobs_in_both_openai_shapes_and_refused_where_not_served(
    engine: TorchEngine, tokenizer: ServingTokenizer
) -> None:
    with loopback.serve_in_thread(build_lazy_app(lambda: (engine, tokenizer))) as base:
        _wait_for(base, 200)
        body = {"prompt": PROMPT, "max_tokens": 4, "temperature": 0, "return_token_ids": True}
        done = loopback.post(f"{base}/v1/completions", json={**body, "logprobs": 2}).json()
        choice = done["choices"][0]
        lp = choice["logprobs"]
        assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(choice["token_ids"]) == 4
        assert "".join(lp["tokens"]) == choice["text"]
        assert all(len(top) == 2 and max(top.values()) <= 0 for top in lp["top_logprobs"])
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0}
        answer = loopback.post(
            f"{base}/v1/chat/completions", json={**chat, "logprobs": True, "top_logprobs": 2}
        ).json()
        content = answer["choices"][0]["logprobs"]["content"]
        assert len(content) == 3
        for token in content:
            assert [t["logprob"] for t in token["top_logprobs"]] == sorted(
                (t["logprob"] for t in token["top_logprobs"]), reverse=True
            )
            assert token["logprob"] == token["top_logprobs"][0]["logprob"]
        # without logprobs nothing changes
        plain = loopback.post(f"{base}/v1/chat/completions", json=chat).json()["choices"][0]
        assert plain["logprobs"] is None
        assert plain["message"]["content"] == answer["choices"][0]["message"]["content"]
        for bad, words in [
            ({**chat, "top_logprobs": 2}, "top_logprobs requires logprobs: true"),
            ({**chat, "logprobs": True, "stream": True}, "without streaming"),
            ({**chat, "logprobs": True, "top_logprobs": 21}, "less than or equal"),
        ]:
            refused = loopback.post(f"{base}/v1/chat/completions", json=bad)
            assert refused.status_code == 400, refused.text
            assert words in refused.json()["error"]["message"]
    # an engine without `generate_scored` says so rather than leaving logprobs out
    with loopback.serve_in_thread(build_lazy_app(lambda: (_Breakable(engine), tokenizer))) as base:
        _wait_for(base, 200)
        refused = loopback.post(f"{base}/v1/completions", json={**body, "logprobs": 1})
        assert refused.status_code == 400
        assert refused.json()["error"]["message"] == (
            "logprobs are not supported by this rig's engine"
        )


LONG = {"prompt": PROMPT, "max_tokens": 900, "min_tokens": 900, "ignore_eos": True, "stream": True}


async def _hold_streams(base: str, count: int, started: asyncio.Event) -> None:
    """`count` long streams, each read until it is cancelled."""

    async def one(client: httpx.AsyncClient) -> None:
        async with client.stream("POST", f"{base}/v1/completions", json=LONG) as response:
            assert response.status_code == 200
            async for _ in response.aiter_bytes():
                started.set()

    async with loopback.async_client(timeout=600) as client:
        await asyncio.gather(*(one(client) for _ in range(count)))


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():  # noqa: ASYNC110 - the server counts on its own thread
        await asyncio.sleep(0.01)


@pytest.mark.slow
def test_requests_past_the_bound_are_refused_at_once_and_the_server_recovers(
    engine: TorchEngine, tokenizer: ServingTokenizer
) -> None:
    """Serial (one slot) with 2 waiting: the fourth request is refused with Retry-After while
    /health answers; once the streams are cancelled a normal request is served."""
    app = build_app(engine, tokenizer, max_waiting=2)
    state = app.state.rig

    async def scenario(base: str) -> None:
        started = asyncio.Event()
        held = asyncio.create_task(_hold_streams(base, 3, started))
        await _until(lambda: state.in_flight == 3)
        async with loopback.async_client(timeout=600) as client:
            refused = await client.post(f"{base}/v1/completions", json=LONG)
            assert refused.status_code == 503
            assert refused.headers["retry-after"] == "1"
            assert refused.json()["error"]["code"] == "server_overloaded"
            assert (await client.get(f"{base}/health")).status_code == 200
            await started.wait()  # the first stream is generating, two are waiting
            held.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await held
            await _until(lambda: state.in_flight == 0)
            ok = await client.post(f"{base}/v1/completions", json={"prompt": "hi", "max_tokens": 2})
            assert ok.status_code == 200
            assert ok.json()["usage"]["completion_tokens"] == 2

    with loopback.serve_in_thread(app) as base:
        _wait_for(base, 200)
        asyncio.run(scenario(base))


@pytest.mark.slow
def test_a_cell_as_wide_as_the_bound_is_never_refused(
    engine: TorchEngine, tokenizer: ServingTokenizer
) -> None:
    """One slot and 3 waiting hold a concurrency-4 cell whole: it queues, nothing is refused."""
    app = build_app(engine, tokenizer, max_waiting=3)
    body = {"prompt": PROMPT, "max_tokens": 8, "min_tokens": 8, "ignore_eos": True}

    async def cell(base: str) -> list[int]:
        async with loopback.async_client(timeout=600) as client:
            replies = await asyncio.gather(
                *(client.post(f"{base}/v1/completions", json=body) for _ in range(4))
            )
        return [r.status_code for r in replies]

    with loopback.serve_in_thread(app) as base:
        _wait_for(base, 200)
        assert asyncio.run(cell(base)) == [200] * 4


@pytest.mark.slow
def test_a_request_past_its_deadline_is_ended_by_name(
    engine: TorchEngine, tokenizer: ServingTokenizer
) -> None:
    """A 900-token generation cannot finish within 1 ms: 504 (an error event on a stream),
    the deadline named, and /health still 200 (the engine did not fail)."""
    app = build_app(engine, tokenizer, request_timeout_s=0.001)
    plain = {**LONG, "stream": False}
    with loopback.serve_in_thread(app) as base:
        _wait_for(base, 200)
        late = loopback.post(f"{base}/v1/completions", json=plain, timeout=600)
        assert late.status_code == 504
        assert late.json()["error"]["code"] == "request_timeout"
        assert "0.001 s" in late.json()["error"]["message"]
        with loopback.stream("POST", f"{base}/v1/completions", json=LONG, timeout=600) as stream:
            events = [line for line in stream.iter_lines() if line.startswith("data: {")]
        assert '"request_timeout"' in events[-1]
        assert loopback.get(f"{base}/health").status_code == 200
        assert app.state.rig.in_flight == 0
