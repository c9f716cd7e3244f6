"""Boots in rounds until a comparison is decided: a group sequential design by alpha spending.

A sweep that adds boots until its verdict is decided looks at the test several times; testing
each look at 5% would call an A/A pair different far more often than 5% (peeking). An alpha
spending function (Lan and DeMets 1983) fixes how much of the overall error rate may be spent
by each look: `spent(t)` for the information fraction t = boots so far / the cap, with
spent(1) = alpha. Each look then tests at the *increment* spent(t_k) - spent(t_(k-1)).

The boundary used is that increment itself, not the exact Lan-DeMets boundary found by
integrating the joint normal distribution of the looks' statistics: with 2 to 10 boots a side
the looks' Welch statistics are t-distributed on a few degrees of freedom and nothing like
jointly normal, so that integration would not hold its level; the increments do, by the union
bound, whatever the dependence between looks (sum of increments = alpha), at some cost in
power. `benchmarks/sequential_boots.py` measures the resulting error rate and boots spent.

Three spending functions:
- **Pocock-type** `alpha * ln(1 + (e - 1) t)`: spends about evenly, so a large difference
  can stop the sweep at its first look; the price is less alpha left for the last look.
- **O'Brien-Fleming-type** `2 - 2 Phi(z_(1-alpha/2) / sqrt(t))`: spends almost nothing
  early and nearly all of alpha at the cap, so the last look is nearly a fixed-n test; it
  rarely stops early on a few boots.
- **Hwang-Shih-DeCani** `alpha (1 - exp(-gamma t)) / (1 - exp(-gamma))`, a family between
  the two (gamma = 1 is close to Pocock's, -4 to O'Brien-Fleming's); gamma = -1 here.

Measured (docs/measurements.md, "Boots until decided"), three looks at 3, 5 and 10 boots per
rig: O'Brien-Fleming-type spending keeps nearly the power of 10 fixed boots at 1.1x but stops
a 2x difference at the first look in about 1 comparison in 8, and a sweep tests several
comparisons at once (Holm), so on real sweeps it practically never stopped at the first round.
Hwang-Shih-DeCani with gamma = -1 stops a 2x difference at the first look in most comparisons
and gives up a few points of power at 1.1x; it is the design adaptive boots use
(`"boots_per_rig": "auto"`: functions/rounds.py after each round). A look after every boot
wastes the union bound's slack (2% of the 5%).
"""

import math
from collections.abc import Sequence
from enum import StrEnum

from scipy import special

from analysis.stats import ALPHA


class Spending(StrEnum):
    POCOCK = "pocock"
    OBRIEN_FLEMING = "obrien-fleming"
    HWANG_SHIH_DECANI = "hwang-shih-decani"


# between Pocock's (about 1) and O'Brien-Fleming's (about -4): see the module's docstring
HSD_GAMMA = -1.0


def spent(kind: Spending, t: float, alpha: float = ALPHA) -> float:
    """The error rate spent by information fraction t (0 < t <= 1)."""
    if not 0.0 < t <= 1.0:
        raise ValueError(f"information fraction must be in (0, 1], got {t!r}")
    if kind is Spending.POCOCK:
        return alpha * math.log(1 + (math.e - 1) * t)
    if kind is Spending.HWANG_SHIH_DECANI:
        return alpha * math.expm1(-HSD_GAMMA * t) / math.expm1(-HSD_GAMMA)
    z = float(special.ndtri(1 - alpha / 2))
    return float(2 - 2 * special.ndtr(z / math.sqrt(t)))


def look_levels(kind: Spending, looks: Sequence[int], alpha: float = ALPHA) -> list[float]:
    """The level each look tests at: `looks` are the boots per rig at each look, increasing,
    the last the cap; the levels sum to `alpha`."""
    if not looks or list(looks) != sorted(set(looks)) or looks[0] < 1:
        raise ValueError(f"looks must be increasing boot counts, got {list(looks)!r}")
    cap = looks[-1]
    fractions = [n / cap for n in looks]
    cumulative = [spent(kind, t, alpha) for t in fractions]
    return [c - p for c, p in zip(cumulative, [0.0, *cumulative[:-1]], strict=True)]
