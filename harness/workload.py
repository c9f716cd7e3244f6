"""What a run's requests ask for: random prompts of fixed or distributed lengths, groups
sharing a prefix, or the lines of a dataset (harness.dataset).

Every generated length is exact: completions prompts are token ids (no re-tokenisation drift),
chat prompts are words of one token each (checked against the server's usage). Lengths drawn
from a distribution are seeded, rounded, and kept within [1, mean + 3 stddev] so that a boot
can size its context for the longest request (`longest`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

# The Lambdas validate workloads with these models and never draw from them: numpy, which
# drawing needs, is not in their package (tests/orchestrator/test_template.py).
if TYPE_CHECKING:
    pass

MAX_TOKENS = 131_072


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class LengthDistribution(_Model):
    """A normal distribution of lengths in tokens, rounded, within [1, mean + 3 stddev]."""

    mean: int = Field(ge=1, le=MAX_TOKENS)
    stddev: float = Field(ge=0, le=MAX_TOKENS)

    @property
    def longest(self) -> int:
        return self.mean + math.ceil(3 * self.stddev)


Length = Annotated[int, Field(ge=1, le=MAX_TOKENS)] | LengthDistribution


def longest(length: Length) -> int:
    return length if isinstance(length, int) else length.longest


class RandomWorkload(_Model):
    """Random token ids (or words, on the chat endpoint) of fixed or distributed lengths."""

    kind: Literal["random"] = "random"
    prompt_tokens: Length = Field(default=512, description="prompt length, tokens")
    output_tokens: Length = Field(default=128, description="generated length, tokens (forced)")


class SharedPrefixWorkload(_Model):
    """`groups` distinct prefixes of `prefix_tokens`; each request is one prefix (taken in
    turn) followed by its own random suffix: the traffic a prefix cache is for."""

    kind: Literal["shared_prefix"]
    groups: int = Field(ge=1, le=4096, description="distinct prefixes")
    prefix_tokens: int = Field(ge=1, le=MAX_TOKENS, description="tokens in each prefix")
    suffix_tokens: Length = Field(description="tokens after the prefix, each request its own")
    output_tokens: Length = Field(default=128, description="generated length, tokens (forced)")


class DatasetWorkload(_Model):
    """The lines of a JSONL dataset (harness.dataset): a bundled name (`sample-chat`), a file,
    or an `s3://bucket/key` the harness downloads."""

    kind: Literal["dataset"]
    path: str = Field(min_length=1, max_length=1024, pattern=r"^[^\s]+$")
    output_tokens: int | None = Field(
        default=None,
        ge=1,
        le=32_768,
        description="output length of lines that give none (default: the run's output length)",
    )


Workload = Annotated[
    RandomWorkload | SharedPrefixWorkload | DatasetWorkload, Field(discriminator="kind")
]


def describe(workload: RandomWorkload | SharedPrefixWorkload | DatasetWorkload) -> str:
    """The workload in a few words, wherever results are shown."""

    def length(value: Length) -> str:
        if isinstance(value, int):
            return str(value)
        return f"{value.mean}±{value.stddev:g}"

    if isinstance(workload, RandomWorkload):
        return (
            f"random prompts of {length(workload.prompt_tokens)} tokens, "
            f"{length(workload.output_tokens)} out"
        )
    if isinstance(workload, SharedPrefixWorkload):
        return (
            f"shared prefix: {workload.groups} groups of {workload.prefix_tokens} tokens + "
            f"{length(workload.suffix_tokens)} own, {length(workload.output_tokens)} out"
        )
    return f"dataset {workload.path}"
