"""The report's "Output agreement" section: per rig pair, whether the agreement probe's greedy
outputs agree, in the terminal table's words, and the first diverging prompt side by side."""

from __future__ import annotations

import statistics

from markupsafe import Markup

from analysis.agreement import AGREEMENT_CAPTION as CAPTION
from analysis.agreement import (
    PairAgreement,
    PromptAgreement,
    basis_words,
    counts_words,
    first_words,
    output_agreement,
    pair_name,
)
from harness.agreement import AgreementProbe
from rigbench.report.data import SweepData
from rigbench.report.html import Section, render_table

INTRO = (
    "Before its load cells every boot answers the same fixed prompts greedily, with the top-2 "
    "log-probabilities at each token. Per rig pair: prompts identical to the end, prompts that "
    "first diverge at a near tie (either rig's top-2 margin below the threshold there: "
    "rounding, not a bug), and prompts that diverge where both rigs were confident."
)


def agreement_of(data: SweepData) -> list[PairAgreement]:
    """Per rig pair, from each rig's first boot whose report carries the probe."""
    probes: dict[str, list[tuple[int, AgreementProbe | None]]] = {}
    for boot in sorted(data.boots, key=lambda b: (b.rig, b.boot)):
        raw = (boot.report or {}).get("agreement")
        probe = AgreementProbe.model_validate(raw) if isinstance(raw, dict) else None
        probes.setdefault(boot.rig, []).append((boot.boot, probe))
    return output_agreement(probes)


def probe_cost(data: SweepData) -> list[str]:
    """Per rig, the probe's duration against the boots' instance time (the 5% budget)."""
    lines = []
    for rig in data.rigs:
        pairs = [
            (float(b.report["agreement"]["duration_s"]), b.instance_seconds)
            for b in data.boots
            if b.rig == rig and b.report and b.report.get("agreement") and b.instance_seconds
        ]
        if pairs:
            probe = statistics.median(p for p, _ in pairs)
            share = statistics.median(p / boot for p, boot in pairs)
            lines.append(
                f"{rig}: the probe took {probe:.1f} s, {share:.1%} of a boot's instance time "
                f"(medians over {len(pairs)} boot(s))"
            )
    return lines


def _side_by_side(pair: PairAgreement, first: PromptAgreement) -> str:
    """The first diverging prompt: its end, then each rig's answer, the shared part plain."""
    a, b = first.texts
    shared = len(_common_prefix(a, b))

    def answer(text: str) -> Markup:
        return Markup("{}<mark>{}</mark>").format(text[:shared], text[shared:])

    margins = [f"{m:.3g}" if m is not None else "n/a" for m in first.margins]
    rows = [
        [
            rig,
            Markup('<pre class="answer">{}</pre>').format(answer(text)),
            f"margin {margin} nats at token {first.first_divergence}",
        ]
        for rig, text, margin in zip(pair.rigs, (a, b), margins, strict=True)
    ]
    caption = (
        f"{pair_name(pair)}, prompt {first.prompt_id} ({first.outcome.replace('_', ' ')}), "
        f"which ends: “{first.prompt_preview}”. Highlighted: from the first character that "
        "differs."
    )
    return render_table(["rig", "answer", "at the divergence"], rows, caption=caption)


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


def agreement_section(pairs: list[PairAgreement], cost: list[str] | None = None) -> Section:
    rows = [
        [
            pair_name(p),
            Markup('<span class="{}">{}</span>').format(
                "better" if p.verdict == "agree" else "worse", p.words
            ),
            counts_words(p),
            "none"
            if p.mean_first_divergence is None
            else f"mean token {p.mean_first_divergence:.1f}; {first_words(p)}",
            basis_words(p),
        ]
        for p in pairs
    ]
    blocks = [
        render_table(
            ["rigs", "verdict", "prompts", "first divergence", "basis"],
            rows,
            caption=CAPTION,
            css="comparison",
        )
    ]
    unsplit = [pair_name(p) for p in pairs if not p.near_tie_split]
    if unsplit:
        blocks.append(
            str(
                Markup(
                    "<p>The near-tie split is unavailable for {}: a rig returned no "
                    "logprobs, so every divergence there counts as diverged.</p>"
                ).format(", ".join(unsplit))
            )
        )
    if cost:
        blocks.append(str(Markup("<p>{}.</p>").format("; ".join(cost))))
    blocks += [_side_by_side(p, p.first_diverging) for p in pairs if p.first_diverging]
    return Section("Output agreement", "agreement", intro=INTRO, blocks=blocks)
