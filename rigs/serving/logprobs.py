"""Log-probabilities in OpenAI's two response shapes, from an engine's `ScoredToken`s."""

from __future__ import annotations

from collections.abc import Sequence

from rigs.serving.engine import ScoredToken
from rigs.serving.protocol import ChatLogprobs, CompletionLogprobs, TokenLogprob, TopLogprob
from rigs.serving.tokenizer import ServingTokenizer


def completion_logprobs(
    tokenizer: ServingTokenizer, scored: Sequence[ScoredToken]
) -> CompletionLogprobs:
    pieces = [tokenizer.decode([s.token]) for s in scored]
    offsets, at = [], 0
    for piece in pieces:
        offsets.append(at)
        at += len(piece)
    return CompletionLogprobs(
        tokens=pieces,
        token_logprobs=[s.logprob for s in scored],
        top_logprobs=[{tokenizer.decode([t]): lp for t, lp in s.top} for s in scored],
        text_offset=offsets,
    )


def chat_logprobs(tokenizer: ServingTokenizer, scored: Sequence[ScoredToken]) -> ChatLogprobs:
    def top(token: int, logprob: float) -> TopLogprob:
        piece = tokenizer.decode([token])
        return TopLogprob(token=piece, logprob=logprob, bytes=list(piece.encode()))

    content = []
    for s in scored:
        chosen = top(s.token, s.logprob)
        content.append(
            TokenLogprob(**chosen.model_dump(), top_logprobs=[top(t, lp) for t, lp in s.top])
        )
    return ChatLogprobs(content=content)
