"""What a runtime must provide for the shared server to serve it.

The server owns HTTP, tokenisation, detokenisation, SSE and errors; an engine owns only
turning prompt token ids into generated token ids.
"""

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    min_tokens: int = 0
    ignore_eos: bool = False
    temperature: float = 0.0  # 0 means greedy
    top_p: float = 1.0
    seed: int | None = None


@dataclass(frozen=True)
class ScoredToken:
    """A generated token with its log-probability and the most likely tokens at its place.

    Log-probabilities are of the model's raw next-token distribution (before any EOS
    masking for `min_tokens`), as vLLM returns them by default."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # (token id, logprob), most likely first


class Engine(Protocol):
    """A loaded model that generates token ids, one request at a time or batched.

    Optional: `slots`, how many requests it generates at once (1 when absent); the server
    holds that many plus its `max_waiting` and refuses more."""

    model_name: str
    max_model_len: int  # prompt + generated tokens must fit
    vocab_size: int
    eos_token_ids: frozenset[int]

    def provenance(self) -> Mapping[str, str]:
        """Runtime versions, dtype, device and batching mode, for results rows.

        Optional: "token_delivery" "burst" and "tokens_per_burst" N for an engine that hands
        over N tokens at once (the server then advertises it in /v1/models); absent means
        "per_token"."""
        ...

    def generate(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[int]:
        """Yield generated token ids as they are produced.

        Stops after `params.max_tokens`, or at an EOS id once `params.min_tokens` have been
        produced unless `params.ignore_eos`. The EOS id itself is not yielded. The server
        closes the iterator (or cancels the task awaiting it) when the client goes away: the
        engine must then stop generating for the request.
        """
        ...


@runtime_checkable
class ScoringEngine(Engine, Protocol):
    """An engine that can also return log-probabilities (OpenAI `logprobs`)."""

    max_top_logprobs: int  # the most alternatives `generate_scored` returns per token

    def generate_scored(
        self, prompt_ids: list[int], params: SamplingParams, top_n: int
    ) -> AsyncIterator[ScoredToken]:
        """As `generate`, each token with its logprob and the `top_n` most likely tokens."""
        ...


class ScoredStreams:
    """`generate` and `generate_scored` over one `_stream` that yields plain token ids, or
    scored tokens when `top_n` is given: the engines' shared half of `ScoringEngine`."""

    max_top_logprobs: int

    def _stream(
        self, prompt_ids: list[int], params: SamplingParams, top_n: int | None
    ) -> AsyncIterator[int | ScoredToken]:
        raise NotImplementedError

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[int]:
        async for item in self._stream(prompt_ids, params, None):
            assert isinstance(item, int)
            yield item

    async def generate_scored(
        self, prompt_ids: list[int], params: SamplingParams, top_n: int
    ) -> AsyncIterator[ScoredToken]:
        if not 0 <= top_n <= self.max_top_logprobs:
            raise ValueError(f"top_n must be in [0, {self.max_top_logprobs}], got {top_n}")
        async for item in self._stream(prompt_ids, params, top_n):
            assert isinstance(item, ScoredToken)
            yield item
