"""Statistics across requests and across boots.

Within a cell: `percentiles` summarises a sample (mean, p50, p90, p99).

Across boots each boot contributes one value per metric (its median, say). The method:

- **The test: Welch's t-test on the logarithms of the boot values** (`difference`,
  `verdict`). Boot-to-boot variation of a runtime is multiplicative (a slower boot is slower
  by a factor), and the differences people ask about are ratios ("1.5x faster"), so the test
  works on logs and its effect is a ratio of geometric means. Welch's test (Welch 1947) does
  not assume the two rigs vary alike, and with as many boots per rig (the usual design) it
  keeps its level; it is also conservative for samples with a heavy upper tail. Simulated
  against this module (`benchmarks/verdict_calibration.py`, lognormal boots, 10% spread): the
  false-verdict rate of one A/A comparison stays under 5% at every number of boots from 2 to
  10, also when one boot in ten is 1.5x slow, and a real 1.5x difference is found in nearly
  every trial at 5 boots per rig. The bootstrap intervals this replaced called A/A pairs
  different 29-38% of the time at 2 boots: a percentile bootstrap of 2 or 3 boots is their
  range, not a 95% interval. An exact permutation test was the alternative; with 2 boots per
  rig its smallest p-value is 1/3 (2 of 6 labellings), so it can never decide there, and at 3
  it is 1/10: Welch's test uses the values' spread and can decide at 2 boots a side when the
  difference dwarfs it.
- **Across a sweep: Holm's step-down correction** (`holm`, Holm 1979) over every verdict of
  the sweep (metrics x cells x rig pairs) holds the chance that a sweep of identical rigs
  shows *any* difference at 5% (family-wise, under any dependence between metrics). It is
  uniformly more powerful than Bonferroni; Benjamini-Hochberg would allow 5% of the claimed
  differences to be false instead, which a report of a few claims cannot honour.
- **What is printed** (`aggregate_boots`): the geometric mean of the boots (the centre of the
  test), and around it, from 3 boots on, its 95% t-interval (on logs, back-transformed); with 2
  boots the range of the 2 boots, called a range (a 95% t-interval on one degree of freedom
  is 12.7 times as wide, and a range is what the reader can check); with 1 boot no interval.
- **No verdict possible**: with 1 boot on a side (no spread to judge from), or when neither
  rig's boots varied at all. Where the test finds nothing, `min_detectable_ratio` says what
  ratio it would have found 80% of the time at this n and the spread observed.

`ranking_flips` finds rigs whose order reversed from one boot to another.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from enum import StrEnum
from itertools import combinations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator
from scipy import special

from analysis.metrics import Direction

DEFAULT_CONFIDENCE = 0.95
ALPHA = 0.05  # per comparison, and family-wise across a sweep after Holm
POWER = 0.8  # what a minimum detectable ratio is detected with


class Verdict(StrEnum):
    """How rig A stands against rig B on one metric."""

    FASTER = "faster"
    SLOWER = "slower"
    INDISTINGUISHABLE = "indistinguishable"  # tested, and no difference shown
    NO_VERDICT = "no verdict possible"  # untestable: a side has 1 boot, or no spread at all


class Percentiles(BaseModel):
    model_config = ConfigDict(frozen=True)

    mean: float
    p50: float
    p90: float
    p99: float


class BootAggregate(BaseModel):
    """The boots of one rig, cell and metric: their centre with an interval, as printed.

    `value` is the geometric mean of the boots (their arithmetic mean when a value is 0 or
    below, where logs do not exist: `log_scale` False). `interval` says what [ci_low, ci_high]
    is: "none" (1 boot), "range" (2 boots: their range) or "t" (3 boots or more: the
    `confidence` t-interval of the centre).
    """

    model_config = ConfigDict(frozen=True)

    value: float
    ci_low: float
    ci_high: float
    n_boots: int = Field(ge=1)
    confidence: float = Field(gt=0.0, lt=1.0)
    interval: str = Field(default="none", pattern="^(none|range|t)$")
    log_scale: bool = True

    @model_validator(mode="after")
    def _interval_contains_value(self) -> BootAggregate:
        if not self.ci_low <= self.value <= self.ci_high:
            raise ValueError(
                f"confidence interval [{self.ci_low}, {self.ci_high}] "
                f"does not contain the value {self.value}"
            )
        return self

    @property
    def has_interval(self) -> bool:
        return self.n_boots >= 2

    @computed_field  # type: ignore[prop-decorator]
    @property
    def interval_words(self) -> str:
        """What the interval is and its n: "range of 2 boots", "95% interval, 6 boots"."""
        if self.interval == "t":
            return f"{self.confidence:.0%} interval, {self.n_boots} boots"
        if self.interval == "range":
            return f"range of {self.n_boots} boots"
        return "1 boot, no interval" if self.n_boots == 1 else f"{self.n_boots} equal boots"


class PairFlip(BaseModel):
    """Two rigs whose order reversed: each list holds the boots in which that rig was ahead."""

    model_config = ConfigDict(frozen=True)

    rig_a: str
    rig_b: str
    boots_a_ahead: list[int]
    boots_b_ahead: list[int]


class RankingFlips(BaseModel):
    """Per-boot orderings of rigs (best first) and every pair whose order reversed."""

    model_config = ConfigDict(frozen=True)

    flipped: bool
    orderings: list[list[str]]
    pairs: list[PairFlip]
    boots: list[int]  # every boot that took part in a reversal


def _finite_array(values: Sequence[float], what: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1:
        raise ValueError(f"{what}: expected a flat sequence of numbers, got shape {array.shape}")
    if array.size == 0:
        raise ValueError(f"{what}: the sample is empty")
    bad = np.flatnonzero(~np.isfinite(array))
    if bad.size:
        raise ValueError(
            f"{what}: value {float(array[bad[0]])!r} at index {int(bad[0])} is not a finite number"
        )
    return array


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence!r}")


def percentiles(values: Sequence[float]) -> Percentiles:
    """Mean, p50, p90 and p99 of a sample (linear interpolation between order statistics)."""
    array = _finite_array(values, "percentiles")
    p50, p90, p99 = np.percentile(array, [50.0, 90.0, 99.0])
    return Percentiles(mean=float(array.mean()), p50=float(p50), p90=float(p90), p99=float(p99))


def aggregate_boots(
    per_boot: Sequence[float], *, confidence: float = DEFAULT_CONFIDENCE
) -> BootAggregate:
    """The geometric mean of per-boot values with the interval the module docstring names."""
    _check_confidence(confidence)
    array = _finite_array(per_boot, "aggregate_boots")
    log_scale = bool(np.all(array > 0))
    scaled = np.log(array) if log_scale else array
    centre = float(scaled.mean())
    back = math.exp if log_scale else float
    value = float(back(centre))
    n = int(array.size)
    if n == 1 or np.all(array == array[0]):
        return BootAggregate(
            value=value, ci_low=value, ci_high=value, n_boots=n, confidence=confidence,
            log_scale=log_scale,
        )  # fmt: skip
    if n == 2:
        low, high, kind = float(array.min()), float(array.max()), "range"
    else:
        half = special.stdtrit(n - 1, 0.5 + confidence / 2) * scaled.std(ddof=1) / math.sqrt(n)
        low, high, kind = float(back(centre - half)), float(back(centre + half)), "t"
        if not log_scale and array.min() >= 0:
            low = max(low, 0.0)  # a latency of 0 (a burst) is possible, one below 0 is not
    # exp(log(x)) can land an ulp off: the interval is reported around the centre it qualifies
    return BootAggregate(
        value=value,
        ci_low=min(low, value),
        ci_high=max(high, value),
        n_boots=n,
        confidence=confidence,
        interval=kind,
        log_scale=log_scale,
    )


class Difference(BaseModel):
    """Welch's t-test of rig A against rig B on one metric (on logs when every boot is > 0).

    `ratio` is A's centre over B's (geometric means). `p_value` is None when no test is
    possible, and `reason` says why.
    """

    model_config = ConfigDict(frozen=True)

    n_a: int
    n_b: int
    ratio: float | None
    p_value: float | None = None
    se: float | None = None  # standard error of the difference of (log) means
    df: float | None = None  # Welch-Satterthwaite degrees of freedom
    log_scale: bool = True
    reason: str = ""

    def min_detectable_ratio(self, alpha: float = ALPHA, power: float = POWER) -> float | None:
        """The ratio (>= 1) a two-sided test at `alpha` finds with probability `power`, at
        these boot counts and the spread observed; None without a test or off the log scale."""
        if self.se is None or self.df is None or not self.log_scale:
            return None
        quantile = special.stdtrit  # Student's t quantile (scipy.stats.t.ppf, without overhead)
        log_ratio = (quantile(self.df, 1 - alpha / 2) + quantile(self.df, power)) * self.se
        # Holm's smallest level over ~1 degree of freedom puts the quantile in the thousands
        return math.exp(log_ratio) if log_ratio < math.log(sys.float_info.max) else math.inf


def difference(a: Sequence[float], b: Sequence[float]) -> Difference:
    """Welch's t-test of A's boots against B's (see the module docstring for why)."""
    xa = _finite_array(a, "difference (rig A)")
    xb = _finite_array(b, "difference (rig B)")
    log_scale = bool(np.all(xa > 0) and np.all(xb > 0))
    la, lb = (np.log(xa), np.log(xb)) if log_scale else (xa, xb)
    if log_scale:
        ratio: float | None = math.exp(float(la.mean() - lb.mean()))
    else:
        ratio = float(xa.mean() / xb.mean()) if xb.mean() != 0 else None
    base = Difference(n_a=xa.size, n_b=xb.size, ratio=ratio, log_scale=log_scale)
    if min(xa.size, xb.size) < 2:
        return base.model_copy(update={"reason": "1 boot"})
    var_a, var_b = float(la.var(ddof=1)) / xa.size, float(lb.var(ddof=1)) / xb.size
    se = math.sqrt(var_a + var_b)
    if se == 0:
        return base.model_copy(update={"reason": "the boots did not vary at all"})
    # Welch's statistic and Welch-Satterthwaite degrees of freedom, as scipy's ttest_ind(...,
    # equal_var=False) computes them; its nan/axis machinery costs milliseconds per call, which
    # the calibration (benchmarks/verdict_calibration.py) cannot afford over its ~100k tests.
    df = (var_a + var_b) ** 2 / (
        (var_a**2 / (xa.size - 1) if var_a else 0.0) + (var_b**2 / (xb.size - 1) if var_b else 0.0)
    )
    t = float(la.mean() - lb.mean()) / se
    p = float(2 * special.stdtr(df, -abs(t)))
    return base.model_copy(update={"p_value": p, "se": se, "df": df})


def decide(found: Difference, direction: Direction, significant: bool) -> Verdict:
    """The verdict for A against B, given whether the (possibly adjusted) test rejected."""
    if found.p_value is None:
        return Verdict.NO_VERDICT
    if not significant or found.ratio is None or found.ratio == 1:
        return Verdict.INDISTINGUISHABLE
    a_lower = found.ratio < 1
    return Verdict.FASTER if a_lower == (direction is Direction.LOWER_IS_BETTER) else Verdict.SLOWER


def verdict(
    a: Sequence[float], b: Sequence[float], direction: Direction, *, alpha: float = ALPHA
) -> Verdict:
    """Faster / slower / indistinguishable / no verdict possible for A against B, from their
    per-boot values: Welch's t-test on logs at level `alpha` (one comparison alone; a sweep's
    comparisons are corrected together, `holm`)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be strictly between 0 and 1, got {alpha!r}")
    found = difference(a, b)
    return decide(found, direction, found.p_value is not None and found.p_value < alpha)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (each compared with the family-wise alpha)."""
    p = np.asarray(p_values, dtype=float)
    if p.size == 0:
        return []
    order = np.argsort(p, kind="stable")
    steps = (p.size - np.arange(p.size)) * p[order]
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(np.maximum.accumulate(steps), 1.0)
    return [float(v) for v in adjusted]


def ranking_flips(
    per_boot: Mapping[str, Sequence[float | None]],
    direction: Direction,
) -> RankingFlips:
    """Find rig pairs whose order reversed between boots.

    `per_boot[rig][i]` is the rig's value in boot i; None marks a boot with no value for that
    rig (it failed), and that boot is left out for that rig. A pair flipped when each rig was
    strictly ahead of the other in some boot; a tie is not a reversal.
    """
    if not per_boot:
        raise ValueError("ranking_flips: no rigs given")
    checked: dict[str, list[float | None]] = {}
    for rig, values in per_boot.items():
        row: list[float | None] = []
        for i, v in enumerate(values):
            if v is not None and not math.isfinite(v):
                raise ValueError(f"ranking_flips: rig {rig!r} boot {i} is not finite: {v!r}")
            row.append(None if v is None else float(v))
        checked[rig] = row
    n_boots = max(len(row) for row in checked.values())
    sign = 1.0 if direction is Direction.LOWER_IS_BETTER else -1.0

    orderings: list[list[str]] = []
    for boot in range(n_boots):
        present: list[tuple[float, str]] = []
        for rig, row in checked.items():
            value = row[boot] if boot < len(row) else None
            if value is not None:
                present.append((sign * value, rig))
        orderings.append([rig for _, rig in sorted(present)])

    pairs: list[PairFlip] = []
    for rig_a, rig_b in combinations(sorted(checked), 2):
        a_ahead: list[int] = []
        b_ahead: list[int] = []
        for boot, (va, vb) in enumerate(zip(checked[rig_a], checked[rig_b], strict=False)):
            if va is None or vb is None or va == vb:
                continue
            (a_ahead if sign * va < sign * vb else b_ahead).append(boot)
        if a_ahead and b_ahead:
            pairs.append(
                PairFlip(rig_a=rig_a, rig_b=rig_b, boots_a_ahead=a_ahead, boots_b_ahead=b_ahead)
            )
    boots = sorted({b for p in pairs for b in (*p.boots_a_ahead, *p.boots_b_ahead)})
    return RankingFlips(flipped=bool(pairs), orderings=orderings, pairs=pairs, boots=boots)
