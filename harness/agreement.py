"""The agreement probe's answers, as a boot records them in its report: each prompt's greedy
answer with the top-2 log-probability margin at each position (harness.agreement_probe asks
the rig). Whether two rigs' answers agree is analysis.agreement's.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

PROMPT_SET = "agreement-v1"  # harness/data/agreement-v1.jsonl: 16 prompts
MAX_TOKENS = 32
TOP_N = 2  # logprob alternatives per position


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProbeAnswer(_Model):
    """One prompt's greedy answer, as the rig gave it."""

    prompt_id: str
    prompt_preview: str = ""
    token_ids: list[int] | None = None  # None: the server did not return them
    tokens: list[str] = []  # token strings from logprobs (empty without logprobs)
    text: str = ""
    margins: list[float | None] | None = Field(
        default=None,
        description="per position, top-1 minus top-2 logprob (nats); None without logprobs",
    )
    error: str | None = None

    def sequence(self) -> list[int] | list[str]:
        """What is compared: token ids, else token strings, else the text's characters."""
        if self.token_ids is not None:
            return self.token_ids
        return self.tokens or list(self.text)

    def margin_at(self, position: int) -> float | None:
        if self.margins is None or position >= len(self.margins):
            return None
        return self.margins[position]


class AgreementProbe(_Model):
    """A boot's answers to the probe (stored in its harness report and results rows)."""

    prompt_set: str
    max_tokens: int
    top_logprobs: int
    logprobs: bool = Field(description="whether the rig returned logprobs (margins)")
    logprobs_refused: str | None = Field(
        default=None, description="why the rig refused logprobs, when it did"
    )
    dtype: str | None = Field(
        default=None, description="the rig's dtype as its /provenance says (None: unknown)"
    )
    duration_s: float
    answers: list[ProbeAnswer]
