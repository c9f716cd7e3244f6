"""The agreement probe: a fixed, versioned prompt set answered greedily, with logprobs.

Every boot runs it before its load cells (`rigbench bench --agreement`), so a sweep can ask
whether its rigs computed the same thing (analysis.agreement compares them). Each prompt is
one non-streaming request through the same OpenAI API the load uses: temperature 0,
`max_tokens` 32, the generated token ids (`return_token_ids`, as vLLM) and the top 2
alternatives at each position (`logprobs: 2` on completions; `logprobs: true,
top_logprobs: 2` on chat). A server that refuses logprobs is asked again without them: its
answers still count for exact match and first divergence.
"""

from __future__ import annotations

import asyncio
import time
from functools import cache
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field

from harness.agreement import MAX_TOKENS, PROMPT_SET, TOP_N, AgreementProbe, ProbeAnswer

_DATA = Path(__file__).parent / "data"


class ProbePrompt(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    kind: Literal["completion", "chat"]
    prompt: str | None = None
    messages: list[dict[str, str]] | None = Field(default=None, min_length=1)

    def preview(self, chars: int = 160) -> str:
        """The end of the prompt (what the answer continues), for a side-by-side view."""
        text = self.prompt if self.prompt is not None else (self.messages or [{}])[-1]["content"]
        return text if len(text) <= chars else "…" + text[-chars:]


@cache
def prompt_set(name: str = PROMPT_SET) -> tuple[ProbePrompt, ...]:
    path = _DATA / f"{name}.jsonl"
    lines = path.read_text().splitlines()
    return tuple(ProbePrompt.model_validate_json(line) for line in lines if line.strip())


def request_body(model: str, prompt: ProbePrompt, logprobs: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": False,
        "return_token_ids": True,
    }
    if prompt.kind == "completion":
        body["prompt"] = prompt.prompt
        if logprobs:
            body["logprobs"] = TOP_N
    else:
        body["messages"] = prompt.messages
        if logprobs:
            body |= {"logprobs": True, "top_logprobs": TOP_N}
    return body


def _margin(values: list[float]) -> float | None:
    """Top-1 minus top-2 log-probability; None when fewer than two came back."""
    best = sorted(values, reverse=True)[:2]
    return best[0] - best[1] if len(best) == 2 else None


def parse_answer(prompt: ProbePrompt, doc: dict[str, Any]) -> ProbeAnswer:
    """One OpenAI response (either shape) as a ProbeAnswer; margins only where logprobs came."""
    choice = doc["choices"][0]
    chat = prompt.kind == "chat"
    text = choice["message"]["content"] if chat else choice["text"]
    lp = choice.get("logprobs")
    tokens: list[str] = []
    margins: list[float | None] | None = None
    if lp and chat and lp.get("content") is not None:
        tokens = [t["token"] for t in lp["content"]]
        margins = [_margin([a["logprob"] for a in t["top_logprobs"]]) for t in lp["content"]]
    elif lp and not chat and lp.get("tokens") is not None:
        tokens = list(lp["tokens"])
        margins = [_margin(list((alts or {}).values())) for alts in lp["top_logprobs"]]
    ids = choice.get("token_ids")
    return ProbeAnswer(
        prompt_id=prompt.id,
        prompt_preview=prompt.preview(),
        token_ids=list(ids) if ids is not None else None,
        tokens=tokens,
        text=text or "",
        margins=[None if m is None else round(m, 5) for m in margins] if margins else margins,
    )


class _Refused(Exception):
    """The server answered 4xx to the request with logprobs."""


async def _ask(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post(path, json=body)
    if 400 <= response.status_code < 500 and ("logprobs" in body or "top_logprobs" in body):
        raise _Refused(f"HTTP {response.status_code}: {response.text[:200]}")
    response.raise_for_status()
    doc: dict[str, Any] = response.json()
    return doc


async def _dtype(client: httpx.AsyncClient) -> str | None:
    """The dtype a rigbench rig states at /provenance; None elsewhere (e.g. vLLM's server)."""
    try:
        response = await client.get("/provenance")
        dtype = response.json().get("dtype") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return dtype if isinstance(dtype, str) else None


async def run_probe(
    url: str, model: str, *, timeout_s: float = 120.0, name: str = PROMPT_SET
) -> AgreementProbe:
    """Every prompt of the set, all in flight at once (as a batching rig serves a burst; a
    serial rig answers them in turn); never raises: a failure is recorded on the probe or
    on the prompt's answer."""
    start = time.perf_counter()
    prompts = prompt_set(name)
    async with httpx.AsyncClient(base_url=url.rstrip("/"), timeout=timeout_s) as client:
        dtype = await _dtype(client)
        first = await _answer(client, model, prompts[0], logprobs=True)
        logprobs = first[1] is None
        rest = await asyncio.gather(*(_answer(client, model, p, logprobs) for p in prompts[1:]))
    answers = [first[0], *(answer for answer, _ in rest)]
    return AgreementProbe(
        prompt_set=name,
        max_tokens=MAX_TOKENS,
        top_logprobs=TOP_N,
        logprobs=any(a.margins is not None for a in answers),
        logprobs_refused=first[1],
        dtype=dtype,
        duration_s=round(time.perf_counter() - start, 3),
        answers=answers,
    )


async def _answer(
    client: httpx.AsyncClient, model: str, prompt: ProbePrompt, logprobs: bool
) -> tuple[ProbeAnswer, str | None]:
    """The prompt's answer, and why logprobs were refused if they were (then it is asked
    again without them)."""
    path = "/v1/completions" if prompt.kind == "completion" else "/v1/chat/completions"
    refused = None
    try:
        try:
            doc = await _ask(client, path, request_body(model, prompt, logprobs))
        except _Refused as exc:
            refused = str(exc)
            doc = await _ask(client, path, request_body(model, prompt, logprobs=False))
        return parse_answer(prompt, doc), refused
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        failed = ProbeAnswer(
            prompt_id=prompt.id,
            prompt_preview=prompt.preview(),
            error=f"{type(exc).__name__}: {str(exc)[:300]}",
        )
        return failed, refused
