import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from scipy.stats import binom

from harness.stats import (
    BootAggregate,
    Direction,
    Verdict,
    aggregate_boots,
    percentiles,
    ranking_flips,
    verdict,
)

# Few resamples keep the property tests quick; the properties hold for any count.
FAST = 999

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)
boots = st.lists(positive, min_size=2, max_size=12)
directions = st.sampled_from(list(Direction))
confidences = st.floats(min_value=0.5, max_value=0.99)
seeds = st.integers(min_value=0, max_value=2**32 - 1)


# percentiles


def test_percentiles_worked_example() -> None:
    # 1..100: numpy's linear interpolation puts p50 at 50.5, p90 at 90.1, p99 at 99.01.
    result = percentiles([float(v) for v in range(1, 101)])
    assert result.mean == pytest.approx(50.5)
    assert result.p50 == pytest.approx(50.5)
    assert result.p90 == pytest.approx(90.1)
    assert result.p99 == pytest.approx(99.01)


def test_percentiles_single_value() -> None:
    result = percentiles([7.25])
    assert (result.mean, result.p50, result.p90, result.p99) == (7.25, 7.25, 7.25, 7.25)


@settings(deadline=None)
@given(st.lists(finite, min_size=1, max_size=200))
def test_percentiles_are_ordered_and_within_range(values: list[float]) -> None:
    result = percentiles(values)
    lo, hi = min(values), max(values)
    assert lo <= result.p50 <= result.p90 <= result.p99 <= hi
    # mean within range, allowing for float rounding of the sum
    assert lo - 1e-9 * max(1.0, abs(lo)) <= result.mean <= hi + 1e-9 * max(1.0, abs(hi))


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([], "empty"),
        ([1.0, math.nan], "index 1 is not a finite number"),
        ([math.inf], "index 0 is not a finite number"),
        ([[1.0, 2.0]], "flat sequence"),
    ],
)
def test_percentiles_rejects_bad_input(values: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        percentiles(values)


# aggregate_boots


def test_aggregate_two_boots_spans_both() -> None:
    # Resampling two boots gives medians a, (a+b)/2, b with weights 1/4, 1/2, 1/4,
    # so the 95% percentile interval is exactly [a, b].
    result = aggregate_boots([40.0, 52.0])
    assert result == BootAggregate(
        value=46.0, ci_low=40.0, ci_high=52.0, n_boots=2, confidence=0.95
    )
    assert result.has_interval


def test_aggregate_matches_exact_bootstrap_quantiles() -> None:
    # For an odd number n = 2k+1 of distinct boots, the resampled median is the j-th order
    # statistic or lower with probability P(Binomial(n, j/n) >= k+1). At 80% confidence the
    # 10% and 90% quantiles of that distribution for 1..15 are the 6th and 10th values,
    # each more than 4 Monte Carlo standard errors from a step.
    values = [float(v) for v in range(1, 16)]
    cdf = [1.0 - binom.cdf(7, 15, j / 15) for j in range(1, 16)]
    expected_low = next(j for j, p in enumerate(cdf, start=1) if p >= 0.10)
    expected_high = next(j for j, p in enumerate(cdf, start=1) if p >= 0.90)
    assert (expected_low, expected_high) == (6, 10)
    result = aggregate_boots(values, confidence=0.8)
    assert result.value == 8.0
    assert (result.ci_low, result.ci_high) == (float(expected_low), float(expected_high))


def test_aggregate_single_boot_has_no_interval() -> None:
    result = aggregate_boots([14.5])
    assert (result.value, result.ci_low, result.ci_high, result.n_boots) == (14.5, 14.5, 14.5, 1)
    assert not result.has_interval


def test_aggregate_identical_boots_collapse() -> None:
    result = aggregate_boots([3.0, 3.0, 3.0])
    assert (result.value, result.ci_low, result.ci_high) == (3.0, 3.0, 3.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"confidence": 1.0}, "strictly between 0 and 1"),
        ({"confidence": 0.0}, "strictly between 0 and 1"),
        ({"n_resamples": 0}, "n_resamples"),
    ],
)
def test_aggregate_rejects_bad_settings(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        aggregate_boots([1.0, 2.0], **kwargs)


@pytest.mark.parametrize("values", [[], [1.0, math.nan], [2.0, -math.inf]])
def test_aggregate_rejects_empty_or_non_finite(values: list[float]) -> None:
    with pytest.raises(ValueError, match="aggregate_boots"):
        aggregate_boots(values)


def test_boot_aggregate_model_rejects_interval_missing_value() -> None:
    with pytest.raises(ValidationError, match="does not contain"):
        BootAggregate(value=5.0, ci_low=6.0, ci_high=7.0, n_boots=3, confidence=0.95)


@settings(max_examples=60, deadline=None)
@given(boots, confidences, seeds)
def test_interval_contains_estimate_and_stays_in_range(
    values: list[float], confidence: float, seed: int
) -> None:
    result = aggregate_boots(values, confidence=confidence, seed=seed, n_resamples=FAST)
    assert min(values) <= result.ci_low <= result.value <= result.ci_high <= max(values)
    assert result.value == float(np.median(values))
    assert result.n_boots == len(values)


@settings(max_examples=60, deadline=None)
@given(boots, confidences, confidences, seeds)
def test_lower_confidence_interval_nests_inside_higher(
    values: list[float], c1: float, c2: float, seed: int
) -> None:
    low_c, high_c = sorted((c1, c2))
    narrow = aggregate_boots(values, confidence=low_c, seed=seed, n_resamples=FAST)
    wide = aggregate_boots(values, confidence=high_c, seed=seed, n_resamples=FAST)
    assert wide.ci_low <= narrow.ci_low <= narrow.ci_high <= wide.ci_high


@settings(max_examples=40, deadline=None)
@given(boots, seeds)
def test_seeded_determinism(values: list[float], seed: int) -> None:
    first = aggregate_boots(values, seed=seed, n_resamples=FAST)
    second = aggregate_boots(values, seed=seed, n_resamples=FAST)
    assert first == second


@settings(max_examples=40, deadline=None)
@given(boots, st.floats(min_value=-1e5, max_value=1e5), seeds)
def test_interval_shifts_with_the_data(values: list[float], shift: float, seed: int) -> None:
    base = aggregate_boots(values, seed=seed, n_resamples=FAST)
    moved = aggregate_boots([v + shift for v in values], seed=seed, n_resamples=FAST)
    tol = 1e-6 * (1.0 + max(abs(v) for v in values) + abs(shift))
    assert moved.value == pytest.approx(base.value + shift, abs=tol)
    assert moved.ci_low == pytest.approx(base.ci_low + shift, abs=tol)
    assert moved.ci_high == pytest.approx(base.ci_high + shift, abs=tol)


# verdict


def test_verdict_worked_examples() -> None:
    # TTFT p50 in ms over three boots: A's interval [49.8, 50.4] lies below B's [60.2, 61.0].
    ttft_a, ttft_b = [50.1, 50.4, 49.8], [61.0, 60.2, 60.7]
    assert verdict(ttft_a, ttft_b, Direction.LOWER_IS_BETTER) is Verdict.FASTER
    assert verdict(ttft_b, ttft_a, Direction.LOWER_IS_BETTER) is Verdict.SLOWER
    # Output tok/s: higher is better, so A's larger numbers make it faster.
    tok_a, tok_b = [120.0, 124.0, 119.0], [100.0, 98.0, 103.0]
    assert verdict(tok_a, tok_b, Direction.HIGHER_IS_BETTER) is Verdict.FASTER
    # Medians 55 vs 62 but the intervals [50, 60] and [58, 66] overlap.
    assert (
        verdict([50.0, 55.0, 60.0], [58.0, 62.0, 66.0], Direction.LOWER_IS_BETTER)
        is Verdict.INDISTINGUISHABLE
    )
    # Intervals that touch at one point do not separate.
    assert verdict([1.0, 2.0], [2.0, 3.0], Direction.LOWER_IS_BETTER) is Verdict.INDISTINGUISHABLE


def test_verdict_single_boot_is_never_decisive() -> None:
    assert verdict([10.0], [1000.0], Direction.LOWER_IS_BETTER) is Verdict.INDISTINGUISHABLE
    assert verdict([10.0, 10.1], [1000.0], Direction.LOWER_IS_BETTER) is (Verdict.INDISTINGUISHABLE)


@settings(max_examples=60, deadline=None)
@given(boots, boots, directions, seeds)
def test_verdict_is_antisymmetric(
    a: list[float], b: list[float], direction: Direction, seed: int
) -> None:
    forward = verdict(a, b, direction, seed=seed, n_resamples=FAST)
    backward = verdict(b, a, direction, seed=seed, n_resamples=FAST)
    assert (forward is Verdict.FASTER) == (backward is Verdict.SLOWER)
    assert (forward is Verdict.SLOWER) == (backward is Verdict.FASTER)
    assert (forward is Verdict.INDISTINGUISHABLE) == (backward is Verdict.INDISTINGUISHABLE)


@settings(max_examples=60, deadline=None)
@given(boots, boots, seeds)
def test_verdict_flips_with_direction(a: list[float], b: list[float], seed: int) -> None:
    lower = verdict(a, b, Direction.LOWER_IS_BETTER, seed=seed, n_resamples=FAST)
    higher = verdict(a, b, Direction.HIGHER_IS_BETTER, seed=seed, n_resamples=FAST)
    swapped = {Verdict.FASTER: Verdict.SLOWER, Verdict.SLOWER: Verdict.FASTER}
    assert higher is swapped.get(lower, Verdict.INDISTINGUISHABLE)


@settings(max_examples=40, deadline=None)
@given(boots, directions, seeds)
def test_identical_samples_are_indistinguishable(
    a: list[float], direction: Direction, seed: int
) -> None:
    assert verdict(a, list(a), direction, seed=seed, n_resamples=FAST) is (
        Verdict.INDISTINGUISHABLE
    )


@settings(max_examples=60, deadline=None)
@given(boots, st.floats(min_value=1.01, max_value=100.0), seeds)
def test_shift_beyond_spread_is_decisive(a: list[float], factor: float, seed: int) -> None:
    # Every interval lies within its sample's range, so B = A + shift with the shift larger
    # than A's range (or 1 when all boots agree) cannot overlap A.
    shift = factor * max(max(a) - min(a), 1.0)
    b = [v + shift for v in a]
    kw = {"seed": seed, "n_resamples": FAST}
    assert verdict(a, b, Direction.LOWER_IS_BETTER, **kw) is Verdict.FASTER
    assert verdict(a, b, Direction.HIGHER_IS_BETTER, **kw) is Verdict.SLOWER


def test_verdict_rejects_empty_sample() -> None:
    with pytest.raises(ValueError, match="empty"):
        verdict([], [1.0, 2.0], Direction.LOWER_IS_BETTER)


# ranking_flips


def test_flip_worked_example() -> None:
    # Decode tok/s: vllm leads every boot; jax and torch trade places.
    result = ranking_flips(
        {"vllm": [43.0, 44.0, 42.0], "torch": [14.5, 15.1, 14.9], "jax": [15.0, 14.2, 15.3]},
        Direction.HIGHER_IS_BETTER,
    )
    assert result.flipped
    assert result.orderings == [
        ["vllm", "jax", "torch"],
        ["vllm", "torch", "jax"],
        ["vllm", "jax", "torch"],
    ]
    assert len(result.pairs) == 1
    pair = result.pairs[0]
    assert (pair.rig_a, pair.rig_b) == ("jax", "torch")
    assert (pair.boots_a_ahead, pair.boots_b_ahead) == ([0, 2], [1])
    assert result.boots == [0, 1, 2]


def test_no_flip_when_order_is_stable() -> None:
    result = ranking_flips(
        {"a": [10.0, 11.0, 10.5], "b": [20.0, 19.0, 25.0]}, Direction.LOWER_IS_BETTER
    )
    assert not result.flipped
    assert result.pairs == []
    assert result.boots == []
    assert result.orderings == [["a", "b"]] * 3


def test_tie_is_not_a_flip() -> None:
    result = ranking_flips({"a": [10.0, 10.0], "b": [11.0, 10.0]}, Direction.LOWER_IS_BETTER)
    assert not result.flipped


def test_missing_boot_is_skipped() -> None:
    # Boot 1 of b failed; the remaining boots agree, boot 2 reverses the order.
    result = ranking_flips({"a": [1.0, 5.0, 3.0], "b": [2.0, None, 2.5]}, Direction.LOWER_IS_BETTER)
    assert result.orderings[1] == ["a"]
    assert result.flipped
    assert (result.pairs[0].boots_a_ahead, result.pairs[0].boots_b_ahead) == ([0], [2])
    assert result.boots == [0, 2]


def test_flip_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="no rigs"):
        ranking_flips({}, Direction.LOWER_IS_BETTER)
    with pytest.raises(ValueError, match="rig 'b' boot 1 is not finite"):
        ranking_flips({"a": [1.0, 2.0], "b": [1.0, math.nan]}, Direction.LOWER_IS_BETTER)


@st.composite
def distinct_boot_tables(draw: st.DrawFn) -> dict[str, list[float]]:
    n_rigs = draw(st.integers(min_value=2, max_value=4))
    n_boots = draw(st.integers(min_value=1, max_value=5))
    columns = [
        draw(st.lists(finite, min_size=n_rigs, max_size=n_rigs, unique=True))
        for _ in range(n_boots)
    ]
    return {f"rig{r}": [columns[b][r] for b in range(n_boots)] for r in range(n_rigs)}


@settings(deadline=None)
@given(distinct_boot_tables(), directions)
def test_flip_detected_exactly_when_orderings_differ(
    table: dict[str, list[float]], direction: Direction
) -> None:
    result = ranking_flips(table, direction)
    distinct_orderings = {tuple(o) for o in result.orderings}
    assert result.flipped == (len(distinct_orderings) > 1)
    assert bool(result.boots) == result.flipped
    # Every boot whose ordering differs from another's took part in a reversal.
    for i, oi in enumerate(result.orderings):
        if any(oi != oj for oj in result.orderings):
            assert i in result.boots


@settings(deadline=None)
@given(distinct_boot_tables())
def test_flips_do_not_depend_on_direction(table: dict[str, list[float]]) -> None:
    lower = ranking_flips(table, Direction.LOWER_IS_BETTER)
    higher = ranking_flips(table, Direction.HIGHER_IS_BETTER)
    assert lower.flipped == higher.flipped
    assert lower.boots == higher.boots
    assert [list(reversed(o)) for o in lower.orderings] == higher.orderings
