"""What a runtime must provide for the shared server to serve it.

The server owns HTTP, tokenisation, detokenisation, SSE and errors; an engine owns only
turning prompt token ids into generated token ids.
"""

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    min_tokens: int = 0
    ignore_eos: bool = False
    temperature: float = 0.0  # 0 means greedy
    top_p: float = 1.0
    seed: int | None = None


class Engine(Protocol):
    """A loaded model that generates token ids, one request at a time or batched."""

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
