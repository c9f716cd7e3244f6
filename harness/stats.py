"""Statistics across requests and across boots.

Within a cell: `percentiles` summarises a sample (mean, p50, p90, p99).
Across boots: each boot contributes one value per metric (its median, say); `aggregate_boots`
reports the median of those values with a seeded bootstrap confidence interval, `verdict`
calls two rigs apart only when their intervals separate, and `ranking_flips` finds rigs whose
order reversed from one boot to another.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from enum import StrEnum
from itertools import combinations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator
from scipy import stats as scipy_stats

DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 9999
DEFAULT_SEED = 0


class Direction(StrEnum):
    """Which way is better for a metric."""

    LOWER_IS_BETTER = "lower_is_better"  # latencies: TTFT, ITL, TPOT, E2E
    HIGHER_IS_BETTER = "higher_is_better"  # throughput: output tokens/s


class Verdict(StrEnum):
    """How rig A stands against rig B on one metric."""

    FASTER = "faster"
    SLOWER = "slower"
    INDISTINGUISHABLE = "indistinguishable"


class Percentiles(BaseModel):
    model_config = ConfigDict(frozen=True)

    mean: float
    p50: float
    p90: float
    p99: float


class BootAggregate(BaseModel):
    """The median of per-boot values, with a bootstrap confidence interval around it.

    With a single boot there is no interval: `ci_low == ci_high == value` and
    `has_interval` is False, and `verdict` never calls such a result decisive.
    """

    model_config = ConfigDict(frozen=True)

    value: float
    ci_low: float
    ci_high: float
    n_boots: int = Field(ge=1)
    confidence: float = Field(gt=0.0, lt=1.0)

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
    per_boot: Sequence[float],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
    n_resamples: int = DEFAULT_RESAMPLES,
) -> BootAggregate:
    """Median of per-boot values with a seeded percentile-bootstrap confidence interval.

    The percentile method (not BCa): BCa needs a jackknife that degenerates for the median
    of a handful of boots, and the percentile interval of a median always stays within the
    observed range. With few boots the interval is close to that range, which is the honest
    answer: two or three boots cannot pin a median down.
    """
    _check_confidence(confidence)
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples!r}")
    array = _finite_array(per_boot, "aggregate_boots")
    value = float(np.median(array))
    if array.size == 1:
        return BootAggregate(
            value=value, ci_low=value, ci_high=value, n_boots=1, confidence=confidence
        )
    if np.all(array == array[0]):
        low = high = value
    else:
        result = scipy_stats.bootstrap(
            (array,),
            np.median,
            n_resamples=n_resamples,
            confidence_level=confidence,
            method="percentile",
            vectorized=True,
            rng=np.random.default_rng(seed),
        )
        # The ends are read from the bootstrap distribution without interpolation: the
        # resampled median takes few distinct values, and interpolating between equal ones
        # can land an ulp outside the data or break the nesting of intervals by confidence.
        alpha = 1.0 - confidence
        low, high = (
            float(q)
            for q in np.quantile(
                result.bootstrap_distribution,
                [alpha / 2.0, 1.0 - alpha / 2.0],
                method="inverted_cdf",
            )
        )
    # For an even number of boots the resampled median's distribution is not exactly
    # centred on the sample median, and Monte Carlo noise can leave an end a hair inside it;
    # the interval is reported around the estimate it qualifies.
    return BootAggregate(
        value=value,
        ci_low=min(low, value),
        ci_high=max(high, value),
        n_boots=int(array.size),
        confidence=confidence,
    )


def verdict_from_aggregates(a: BootAggregate, b: BootAggregate, direction: Direction) -> Verdict:
    """A is faster than B only when both have intervals and the intervals are disjoint."""
    if a.confidence != b.confidence:
        raise ValueError(
            f"cannot compare intervals at different confidences ({a.confidence} vs {b.confidence})"
        )
    if not (a.has_interval and b.has_interval):
        return Verdict.INDISTINGUISHABLE
    if a.ci_high < b.ci_low:
        a_lower = True
    elif b.ci_high < a.ci_low:
        a_lower = False
    else:
        return Verdict.INDISTINGUISHABLE
    a_better = a_lower == (direction is Direction.LOWER_IS_BETTER)
    return Verdict.FASTER if a_better else Verdict.SLOWER


def verdict(
    a: Sequence[float],
    b: Sequence[float],
    direction: Direction,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
    n_resamples: int = DEFAULT_RESAMPLES,
) -> Verdict:
    """Faster / slower / indistinguishable for A against B from their per-boot values."""
    return verdict_from_aggregates(
        aggregate_boots(a, confidence=confidence, seed=seed, n_resamples=n_resamples),
        aggregate_boots(b, confidence=confidence, seed=seed, n_resamples=n_resamples),
        direction,
    )


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
