"""The answer first: per rig, the load it carries within the SLO, its output there, and what
a million output tokens cost there, from each boot's capacity search (harness.capacity).

The rig's capacity is the geometric mean of its boots' (analysis.stats, as every metric), with
the interval its boots allow; whether two rigs' capacities differ is the comparison's verdict
on the `capacity` cell, not claimed here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from analysis.stats import BootAggregate, aggregate_boots
from harness.schemas import CapacityResult


class RigCapacity(BaseModel):
    """One rig's capacity line."""

    model_config = ConfigDict(frozen=True)

    rig: str
    by: Literal["concurrency", "rate"]
    boots: list[float | None]  # each boot's capacity; None: the boot ran no search
    aggregate: BootAggregate | None
    output_tok_s: float | None  # mean over boots of the output at each boot's capacity
    usd_per_mtok: float | None  # mean over boots of the cost per million output tokens there
    slo: str  # the targets in words, with the percentile
    words: str  # the line as people read it


def usd_per_million_tokens(price_usd_per_hour: float, output_tok_s: float) -> float | None:
    """What a million output tokens cost at this throughput on an instance at this price."""
    if output_tok_s <= 0:
        return None
    return price_usd_per_hour / (output_tok_s * 3600) * 1e6


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def capacity_lines(
    reports: Mapping[str, Sequence[Mapping[str, Any]]],
    prices: Mapping[str, Sequence[float | None]] | None = None,
) -> list[RigCapacity]:
    """Per rig whose boots searched capacity: its line. `prices[rig]` is each boot's price in
    USD per hour (boot order, as `reports`), where known."""
    lines: list[RigCapacity] = []
    for rig, boot_reports in reports.items():
        results = [
            CapacityResult.model_validate(r["capacity"]) if r.get("capacity") else None
            for r in boot_reports
        ]
        found = [r for r in results if r is not None]
        if not found:
            continue
        first = found[0]
        boots = [None if r is None else r.value for r in results]
        present = [v for v in boots if v is not None]
        aggregate = aggregate_boots(present) if present else None
        tok_s = [None if r is None else r.output_tok_s for r in results]
        rig_prices = list((prices or {}).get(rig, []))
        costs = [
            usd_per_million_tokens(price, t) if price is not None and t is not None else None
            for price, t in zip(rig_prices + [None] * len(tok_s), tok_s, strict=False)
        ]
        slo = f"{first.slo.words()}, for {first.slo.percentile:g}% of requests"
        line = RigCapacity(
            rig=rig,
            by=first.by,
            boots=boots,
            aggregate=aggregate,
            output_tok_s=_mean(tok_s),
            usd_per_mtok=_mean(costs),
            slo=slo,
            words="",
        )
        lines.append(line.model_copy(update={"words": _words(line, found)}))
    return lines


def _words(line: RigCapacity, found: Sequence[CapacityResult]) -> str:
    unit = "users at once" if line.by == "concurrency" else "requests/s"
    agg = line.aggregate
    if agg is None:
        return f"{line.rig}: no boot finished a capacity search"
    value = f"{agg.value:.3g}"
    spread = agg.interval_words
    if agg.interval != "none":
        spread = f"[{agg.ci_low:.3g}, {agg.ci_high:.3g}], {spread}"
    parts = [f"{line.rig}: {value} {unit} within the SLO ({line.slo}; {spread})"]
    if line.output_tok_s is not None:
        parts.append(f"{line.output_tok_s:,.0f} output tok/s there")
    if line.usd_per_mtok is not None:
        parts.append(f"${line.usd_per_mtok:,.3g} per million output tokens there")
    bounded = sorted({r.stopped for r in found} - {"bracketed", "floor"})
    if bounded:
        parts.append(
            "at least this: " + ", ".join({"max": "every load up to max met the SLO",
                                           "deadline": "the deadline cut a search short",
                                           "interrupted": "a search was interrupted"}[b]
                                          for b in bounded)
        )  # fmt: skip
    return "; ".join(parts)
