"""Do the rigs compute the same thing? Greedy outputs of the agreement probe, per rig pair.

The same checkpoint in the same dtype gives the same greedy tokens up to rounding. Two rigs'
answers to a prompt are compared token by token to their first divergence, and the
divergence is classified by the top-2 log-probability margin each rig reported there:

- **near tie**: either rig's margin (its chosen token's logprob minus its runner-up's) is
  below the pair's threshold (`NEAR_TIE_NATS`, by dtype). Rounding can swap two tokens that
  close: not a bug.
- **diverged**: both rigs were confident (margins at or above the threshold) and still chose
  differently. For rounding to do that it must move the gap between the two tokens' logits
  by at least twice the threshold between the rigs.

A pair with a confident divergence gets the verdict "diverge" ("outputs diverge"); else
"agree". What "agree" rests on (its error rate): it says no prompt of the set (16 prompts,
32 tokens each) diverged confidently; a bug that never reaches the greedy choice there, or
only at near ties, is not seen. What "diverge" rests on: the pair's own rounding noise,
measured at every position where both rigs chose the same token (`margin_shift`: how far the
top-2 margin moved between them): when its maximum over N positions is far below twice the
threshold, rounding moving a gap that far is rarer than about 3/N per position (the rule of
three, 95%), so a confident divergence is not rounding.

The thresholds, by the coarser dtype of the pair (a rig that does not say, such as vLLM's
server, which has no /provenance, gets the bfloat16 one): bfloat16 keeps 8 significant
bits, so a logit of magnitude up to 30 (Gemma's final softcap) rounds by up to 0.06-0.12 at
each step, and random-weight Gemma 4 e2b in bfloat16 shows top-2 gaps of 0.0-0.375 at its
divergences (docs/design.md): 0.5 nats. float16 keeps 11 bits (8x finer): 0.1. float32
keeps 24 (65,536x finer than bfloat16): rounding moves margins by about 1e-5, so 1e-3 keeps
a factor of 100. Each pair's measured `margin_shift` says whether its rounding stayed
within that.

Rigs that return no logprobs still get exact-match and first-divergence figures; without
margins a divergence cannot be split, so it counts as "diverged" (the verdict errs towards
a warning) and `near_tie` is None.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.agreement import MAX_TOKENS, PROMPT_SET, TOP_N, AgreementProbe, ProbeAnswer

NEAR_TIE_NATS: dict[str, float] = {"float32": 1e-3, "float16": 0.1, "bfloat16": 0.5}
UNKNOWN_DTYPE_NATS = NEAR_TIE_NATS["bfloat16"]


def near_tie_threshold(*dtypes: str | None) -> float:
    """The near-tie threshold of a pair: the coarsest of its rigs' dtypes' thresholds."""
    return max(NEAR_TIE_NATS.get(d or "", UNKNOWN_DTYPE_NATS) for d in dtypes)


Verdict = Literal["agree", "diverge"]
Outcome = Literal["identical", "near_tie", "diverged"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PromptAgreement(_Model):
    prompt_id: str
    outcome: Outcome
    first_divergence: int | None = None  # position (tokens, or characters without ids)
    margins: tuple[float | None, float | None] = (None, None)  # at the divergence
    prompt_preview: str = ""
    texts: tuple[str, str] = ("", "")


class PairAgreement(_Model):
    """Agreement of one rig pair over the probe's prompts."""

    rigs: tuple[str, str]
    boots: tuple[int, int] = Field(description="the boot whose probe stands for each rig")
    prompts: int  # prompts both rigs answered
    identical: int
    near_tie: int | None = Field(description="None when the near-tie split is unavailable")
    diverged: int
    mean_first_divergence: float | None  # over the prompts that diverged; None if none did
    verdict: Verdict
    near_tie_split: bool = Field(description="both rigs returned logprobs")
    threshold_nats: float
    margin_shift_max: float | None = Field(
        default=None, description="largest |margin A - margin B| where both chose the same token"
    )
    margin_positions: int = 0  # positions that statistic covers
    first_diverging: PromptAgreement | None = Field(
        default=None, description="the first confident divergence, else the first divergence"
    )
    note: str = ""

    @property
    def words(self) -> str:
        return "outputs agree" if self.verdict == "agree" else "outputs diverge"


def first_divergence(a: ProbeAnswer, b: ProbeAnswer) -> int | None:
    """The first position where the two answers differ (one ending first counts); None if
    they are identical to the end."""
    if a.token_ids is not None and b.token_ids is not None:
        x: Sequence[object] = a.token_ids
        y: Sequence[object] = b.token_ids
    elif a.tokens and b.tokens:
        x, y = a.tokens, b.tokens
    else:
        x, y = list(a.text), list(b.text)
    for i, (p, q) in enumerate(zip(x, y, strict=False)):
        if p != q:
            return i
    return None if len(x) == len(y) else min(len(x), len(y))


def classify(a: ProbeAnswer, b: ProbeAnswer, threshold: float) -> PromptAgreement:
    at = first_divergence(a, b)
    common = PromptAgreement(
        prompt_id=a.prompt_id,
        outcome="identical",
        prompt_preview=a.prompt_preview,
        texts=(a.text, b.text),
    )
    if at is None:
        return common
    margins = (a.margin_at(at), b.margin_at(at))
    near = any(m is not None and m < threshold for m in margins)
    return common.model_copy(
        update={
            "outcome": "near_tie" if near else "diverged",
            "first_divergence": at,
            "margins": margins,
        }
    )


def _margin_shifts(a: ProbeAnswer, b: ProbeAnswer, end: int | None) -> list[float]:
    """|margin A - margin B| at each position both chose the same token (before `end`)."""
    if a.margins is None or b.margins is None:
        return []
    stop = min(len(a.margins), len(b.margins)) if end is None else end
    pairs = zip(a.margins[:stop], b.margins[:stop], strict=False)
    return [abs(x - y) for x, y in pairs if x is not None and y is not None]


def pair_agreement(
    rigs: tuple[str, str],
    boots: tuple[int, int],
    probes: tuple[AgreementProbe, AgreementProbe],
    threshold: float | None = None,
) -> PairAgreement:
    """`threshold`: the near-tie threshold in nats; default by the rigs' dtypes."""
    a, b = probes
    threshold = threshold if threshold is not None else near_tie_threshold(a.dtype, b.dtype)
    theirs = {x.prompt_id: x for x in b.answers if x.error is None}
    compared: list[PromptAgreement] = []
    shifts: list[float] = []
    for answer in a.answers:
        other = theirs.get(answer.prompt_id)
        if answer.error is not None or other is None:
            continue
        outcome = classify(answer, other, threshold)
        compared.append(outcome)
        shifts += _margin_shifts(answer, other, outcome.first_divergence)
    split = a.logprobs and b.logprobs
    divergent = [p for p in compared if p.outcome != "identical"]
    confident = [p for p in divergent if p.outcome == "diverged" or not split]
    positions = [p.first_divergence for p in divergent if p.first_divergence is not None]
    notes = []
    if not split:
        missing = [r for r, p in zip(rigs, probes, strict=True) if not p.logprobs]
        notes.append(
            f"near-tie split unavailable: {', '.join(missing)} returned no logprobs, so every "
            "divergence counts as diverged"
        )
    if len(compared) < len(a.answers):
        notes.append(f"{len(a.answers) - len(compared)} prompt(s) not answered by both rigs")
    return PairAgreement(
        rigs=rigs,
        boots=boots,
        prompts=len(compared),
        identical=len(compared) - len(divergent),
        near_tie=len(divergent) - len(confident) if split else None,
        diverged=len(confident),
        mean_first_divergence=statistics.fmean(positions) if positions else None,
        verdict="diverge" if confident else "agree",
        near_tie_split=split,
        threshold_nats=threshold,
        margin_shift_max=round(max(shifts), 5) if shifts else None,
        margin_positions=len(shifts),
        first_diverging=next(iter(confident or divergent), None),
        note="; ".join(notes),
    )


def output_agreement(
    per_rig_probe_results: Mapping[str, Sequence[tuple[int, AgreementProbe | None]]],
    threshold: float | None = None,
) -> list[PairAgreement]:
    """One entry per rig pair (rigs in name order). Each rig is represented by its first
    boot whose probe answered every prompt (else its first boot with a probe); a rig
    without any probe is left out."""
    chosen: dict[str, tuple[int, AgreementProbe]] = {}
    for rig in sorted(per_rig_probe_results):
        found = [(boot, p) for boot, p in per_rig_probe_results[rig] if p is not None]
        complete = [(boot, p) for boot, p in found if all(a.error is None for a in p.answers)]
        if complete or found:
            chosen[rig] = (complete or found)[0]
    return [
        pair_agreement(
            (x, y), (chosen[x][0], chosen[y][0]), (chosen[x][1], chosen[y][1]), threshold
        )
        for x, y in itertools.combinations(chosen, 2)
    ]


def probes_from_reports(
    reports_by_rig: Mapping[str, Sequence[Mapping[str, object]]],
) -> dict[str, list[tuple[int, AgreementProbe | None]]]:
    """Per rig, (boot number, probe) from report-shaped documents in boot order: a harness
    report, or a stored results row (both carry `agreement`, and a row its `boot`)."""
    found: dict[str, list[tuple[int, AgreementProbe | None]]] = {}
    for rig, reports in reports_by_rig.items():
        for index, report in enumerate(reports):
            raw = report.get("agreement")
            boot = report.get("boot", index)
            probe = AgreementProbe.model_validate(raw) if isinstance(raw, dict) else None
            found.setdefault(rig, []).append((boot if isinstance(boot, int) else index, probe))
    return found


# The agreement in words: one line per rig pair, what it rests on.


def pair_name(pair: PairAgreement) -> str:
    return f"{pair.rigs[0]} vs {pair.rigs[1]}"


def counts_words(pair: PairAgreement) -> str:
    near = "near-tie split unavailable" if pair.near_tie is None else f"{pair.near_tie} near tie"
    return f"{pair.identical}/{pair.prompts} identical, {near}, {pair.diverged} diverged"


def first_words(pair: PairAgreement) -> str:
    """Where the first (confident, if any) divergence is: prompt and token position."""
    first = pair.first_diverging
    if first is None:
        return ""
    return f"first at prompt {first.prompt_id}, token {first.first_divergence}"


def basis_words(pair: PairAgreement) -> str:
    """What the verdict rests on: the threshold and the pair's own rounding noise."""
    shift = (
        f"top-2 margins moved by at most {pair.margin_shift_max:.2g} nats between the rigs over "
        f"{pair.margin_positions} agreeing positions"
        if pair.margin_shift_max is not None
        else "no margins to measure rounding noise on"
    )
    return f"near tie: a margin below {pair.threshold_nats:g} nats at the divergence; {shift}" + (
        f"; {pair.note}" if pair.note else ""
    )


def agreement_line(pair: PairAgreement) -> str:
    first = first_words(pair)
    return (
        f"{pair_name(pair)}: {pair.words} ({counts_words(pair)}"
        + (f"; {first}" if first else "")
        + ")"
    )


AGREEMENT_CAPTION = (
    f"Agreement probe {PROMPT_SET}: 16 fixed prompts, greedy, {MAX_TOKENS} tokens, top "
    f"{TOP_N} logprobs. 'outputs diverge': some prompt diverged where both rigs were "
    "confident (top-2 margin at or above the near-tie threshold); 'outputs agree' rests on "
    "these prompts only (see analysis/agreement.py)."
)
