"""The output agreement of a sweep in words: one line per rig pair, and a terminal table."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from harness.agreement import MAX_TOKENS, PROMPT_SET, TOP_N, PairAgreement


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


CAPTION = (
    f"Agreement probe {PROMPT_SET}: 16 fixed prompts, greedy, {MAX_TOKENS} tokens, top "
    f"{TOP_N} logprobs. 'outputs diverge': some prompt diverged where both rigs were "
    "confident (top-2 margin at or above the near-tie threshold); 'outputs agree' rests on "
    "these prompts only (see harness/agreement.py)."
)


def render_agreement(pairs: Sequence[PairAgreement]) -> Table:
    table = Table(title="output agreement", caption=CAPTION, caption_justify="left")
    for column in ("rigs", "verdict", "prompts", "first divergence", "basis"):
        table.add_column(column, overflow="fold")
    for pair in pairs:
        style = "green" if pair.verdict == "agree" else "bold red"
        mean = (
            f"mean token {pair.mean_first_divergence:.1f}"
            if pair.mean_first_divergence is not None
            else "none"
        )
        first = first_words(pair)
        table.add_row(
            pair_name(pair),
            Text(pair.words, style=style),
            counts_words(pair),
            mean + (f"; {first}" if first else ""),
            basis_words(pair),
        )
    return table
