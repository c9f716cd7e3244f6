"""Prompts of a known length, seeded so a run is reproducible.

Token-id prompts are exact: the server sees precisely `length` tokens, with no client-side
re-tokenisation to drift. Text prompts (the chat endpoint) are `length` words drawn from a
list of common English words that most BPE vocabularies hold as one token each with their
leading space; their real length is checked against the server's `usage.prompt_tokens`.
"""

from __future__ import annotations

import numpy as np

# Ids far from the special tokens at the start of common vocabularies and below 32,000, the
# smallest vocabulary in common use.
TOKEN_ID_RANGE = (1_000, 30_000)

_WORDS = [
    "time",
    "year",
    "people",
    "way",
    "day",
    "man",
    "thing",
    "woman",
    "life",
    "child",
    "world",
    "school",
    "state",
    "family",
    "student",
    "group",
    "country",
    "problem",
    "hand",
    "part",
    "place",
    "case",
    "week",
    "company",
    "system",
    "program",
    "question",
    "work",
    "government",
    "number",
    "night",
    "point",
    "home",
    "water",
    "room",
    "mother",
    "area",
    "money",
    "story",
    "fact",
    "month",
    "lot",
    "right",
    "study",
    "book",
    "eye",
    "job",
    "word",
    "business",
    "issue",
    "side",
    "kind",
    "head",
    "house",
    "service",
    "friend",
    "father",
    "power",
    "hour",
    "game",
    "line",
    "end",
    "member",
    "law",
    "car",
    "city",
    "community",
    "name",
    "president",
    "team",
    "minute",
    "idea",
    "kid",
    "body",
    "information",
    "back",
    "parent",
    "face",
    "others",
    "level",
    "office",
    "door",
    "health",
    "person",
    "art",
    "war",
    "history",
    "party",
    "result",
    "change",
    "morning",
    "reason",
    "research",
    "girl",
    "guy",
    "moment",
    "air",
    "teacher",
    "force",
]


def token_id_range(vocab_size: int | None = None) -> tuple[int, int]:
    """TOKEN_ID_RANGE, or the top three quarters of a smaller vocabulary."""
    low, high = TOKEN_ID_RANGE
    if vocab_size is not None and vocab_size < high:
        low, high = min(low, vocab_size // 4), vocab_size
    return low, high


def token_id_prompts(
    count: int, length: int, seed: int, vocab_size: int | None = None
) -> list[list[int]]:
    """Random ids in TOKEN_ID_RANGE, or in the top three quarters of a smaller vocabulary."""
    low, high = token_id_range(vocab_size)
    rng = np.random.default_rng(seed)
    ids = rng.integers(low, high, size=(count, length))
    return [row.tolist() for row in ids]


def as_text(ids: list[int]) -> str:
    """A text prompt of exactly len(ids) words (one token each), drawn by the ids."""
    return " ".join(_WORDS[i % len(_WORDS)] for i in ids)


def text_prompts(count: int, length: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(_WORDS), size=(count, length))
    return [" ".join(_WORDS[i] for i in row) for row in picks]
