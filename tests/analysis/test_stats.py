import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from scipy.stats import binom, ttest_ind
from scipy.stats import t as t_dist

from analysis.stats import (
    BootAggregate,
    Direction,
    Verdict,
    aggregate_boots,
    difference,
    holm,
    percentiles,
    ranking_flips,
    verdict,
)
from benchmarks.verdict_calibration import BOOTS, RATIO, boot_draws, comparison_rate, sweep_rates

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)
boots = st.lists(positive, min_size=2, max_size=12)
directions = st.sampled_from(list(Direction))
confidences = st.floats(min_value=0.5, max_value=0.99)


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


def test_aggregate_two_boots_is_their_range_around_the_geometric_mean() -> None:
    result = aggregate_boots([40.0, 52.0])
    assert result.value == pytest.approx(math.sqrt(40.0 * 52.0))
    assert (result.ci_low, result.ci_high, result.n_boots) == (40.0, 52.0, 2)
    assert result.interval == "range"
    assert result.interval_words == "range of 2 boots"
    assert result.has_interval


def test_aggregate_three_or_more_boots_is_a_t_interval_on_logs() -> None:
    values = [50.1, 50.4, 49.8, 51.0, 49.5, 50.2]
    logs = np.log(values)
    half = t_dist.ppf(0.975, 5) * logs.std(ddof=1) / math.sqrt(6)
    result = aggregate_boots(values)
    assert result.value == pytest.approx(math.exp(logs.mean()))
    assert result.ci_low == pytest.approx(math.exp(logs.mean() - half))
    assert result.ci_high == pytest.approx(math.exp(logs.mean() + half))
    assert result.interval_words == "95% interval, 6 boots"
    assert aggregate_boots(values, confidence=0.8).interval_words == "80% interval, 6 boots"


def test_aggregate_single_boot_has_no_interval() -> None:
    result = aggregate_boots([14.5])
    assert (result.value, result.ci_low, result.ci_high, result.n_boots) == (14.5, 14.5, 14.5, 1)
    assert not result.has_interval
    assert result.interval_words == "1 boot, no interval"


def test_aggregate_identical_boots_collapse() -> None:
    result = aggregate_boots([3.0, 3.0, 3.0])
    assert (result.value, result.ci_low, result.ci_high) == pytest.approx((3.0, 3.0, 3.0))
    assert result.interval_words == "3 equal boots"


def test_aggregate_of_values_at_or_below_zero_is_their_mean() -> None:
    result = aggregate_boots([0.0, 1.0, 2.0])
    assert not result.log_scale
    assert result.value == 1.0
    assert result.ci_low == 0.0  # a t-interval, clipped where no value can be
    assert result.ci_high > 2.0  # not to the data
    below = aggregate_boots([-1.0, 1.0, 2.0])
    assert below.ci_low < -1.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"confidence": 0.0}, "confidence must be strictly between 0 and 1"),
        ({"confidence": 1.0}, "confidence must be strictly between 0 and 1"),
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
    with pytest.raises(ValidationError, match="does not contain the value"):
        BootAggregate(value=5.0, ci_low=6.0, ci_high=7.0, n_boots=3, confidence=0.95)


@settings(max_examples=60, deadline=None)
@given(boots, confidences)
def test_interval_contains_estimate(values: list[float], confidence: float) -> None:
    result = aggregate_boots(values, confidence=confidence)
    assert result.ci_low <= result.value <= result.ci_high
    assert min(values) * (1 - 1e-9) <= result.value <= max(values) * (1 + 1e-9)


@settings(max_examples=60, deadline=None)
@given(boots, confidences, confidences)
def test_lower_confidence_interval_nests_inside_higher(
    values: list[float], c1: float, c2: float
) -> None:
    low_c, high_c = sorted((c1, c2))
    narrow = aggregate_boots(values, confidence=low_c)
    wide = aggregate_boots(values, confidence=high_c)
    tol = 1e-9 * max(values)
    assert wide.ci_low <= narrow.ci_low + tol
    assert narrow.ci_high <= wide.ci_high + tol


@settings(max_examples=40, deadline=None)
@given(boots, st.floats(min_value=1e-3, max_value=1e3))
def test_interval_scales_with_the_data(values: list[float], factor: float) -> None:
    base = aggregate_boots(values)
    scaled = aggregate_boots([v * factor for v in values])
    assert scaled.value == pytest.approx(base.value * factor, rel=1e-6)
    assert scaled.ci_low == pytest.approx(base.ci_low * factor, rel=1e-6)
    assert scaled.ci_high == pytest.approx(base.ci_high * factor, rel=1e-6)


# difference, verdict, holm


def test_difference_is_welchs_test_on_logs() -> None:
    a, b = [50.1, 50.4, 49.8, 52.0], [61.0, 60.2, 60.7]
    found = difference(a, b)
    reference = ttest_ind(np.log(a), np.log(b), equal_var=False)
    assert found.p_value == pytest.approx(reference.pvalue, rel=1e-9)
    assert found.df == pytest.approx(reference.df, rel=1e-9)
    assert found.ratio == pytest.approx(math.exp(np.log(a).mean() - np.log(b).mean()))


def test_minimum_detectable_ratio_grows_with_spread_and_shrinks_with_boots() -> None:
    tight = difference([1.0, 1.02, 0.98], [2.0, 2.04, 1.96]).min_detectable_ratio()
    loose = difference([1.0, 1.2, 0.8], [2.0, 2.4, 1.6]).min_detectable_ratio()
    more = difference([1.0, 1.2, 0.8] * 3, [2.0, 2.4, 1.6] * 3).min_detectable_ratio()
    assert tight is not None
    assert loose is not None
    assert more is not None
    assert 1.0 < tight < loose
    assert more < loose
    assert difference([1.0], [2.0, 2.1]).min_detectable_ratio() is None


def test_verdict_worked_examples() -> None:
    # TTFT p50 in ms over three boots, 20% apart with under 1% spread.
    ttft_a, ttft_b = [50.1, 50.4, 49.8], [61.0, 60.2, 60.7]
    assert verdict(ttft_a, ttft_b, Direction.LOWER_IS_BETTER) is Verdict.FASTER
    assert verdict(ttft_b, ttft_a, Direction.LOWER_IS_BETTER) is Verdict.SLOWER
    # Output tok/s: higher is better, so A's larger numbers make it faster.
    tok_a, tok_b = [120.0, 124.0, 119.0], [100.0, 98.0, 103.0]
    assert verdict(tok_a, tok_b, Direction.HIGHER_IS_BETTER) is Verdict.FASTER
    # 55 vs 62 with a 10-20% spread: not told apart at 3 boots.
    assert (
        verdict([50.0, 55.0, 60.0], [58.0, 62.0, 66.0], Direction.LOWER_IS_BETTER)
        is Verdict.INDISTINGUISHABLE
    )
    # Two boots a side whose ranges are disjoint but close: the old bootstrap called this,
    # one A/A pair in three looks like it.
    assert verdict([1.0, 1.1], [1.12, 1.2], Direction.LOWER_IS_BETTER) is Verdict.INDISTINGUISHABLE


def test_one_boot_gives_no_verdict_never_indistinguishable() -> None:
    assert verdict([10.0], [1000.0], Direction.LOWER_IS_BETTER) is Verdict.NO_VERDICT
    assert verdict([10.0, 10.1], [1000.0], Direction.LOWER_IS_BETTER) is Verdict.NO_VERDICT
    assert difference([10.0], [1000.0]).reason == "1 boot"
    assert verdict([3.0, 3.0], [3.0, 3.0], Direction.LOWER_IS_BETTER) is Verdict.NO_VERDICT
    assert difference([3.0, 3.0], [4.0, 4.0]).reason == "the boots did not vary at all"


@settings(max_examples=60, deadline=None)
@given(boots, boots, directions)
def test_verdict_is_antisymmetric(a: list[float], b: list[float], direction: Direction) -> None:
    forward = verdict(a, b, direction)
    backward = verdict(b, a, direction)
    assert (forward is Verdict.FASTER) == (backward is Verdict.SLOWER)
    assert (forward is Verdict.SLOWER) == (backward is Verdict.FASTER)
    assert (forward is Verdict.INDISTINGUISHABLE) == (backward is Verdict.INDISTINGUISHABLE)


@settings(max_examples=60, deadline=None)
@given(boots, boots)
def test_verdict_flips_with_direction(a: list[float], b: list[float]) -> None:
    lower = verdict(a, b, Direction.LOWER_IS_BETTER)
    higher = verdict(a, b, Direction.HIGHER_IS_BETTER)
    swapped = {Verdict.FASTER: Verdict.SLOWER, Verdict.SLOWER: Verdict.FASTER}
    assert higher is swapped.get(lower, lower)


@settings(max_examples=40, deadline=None)
@given(boots, directions)
def test_identical_samples_get_no_difference(a: list[float], direction: Direction) -> None:
    assert verdict(a, list(a), direction) in (Verdict.INDISTINGUISHABLE, Verdict.NO_VERDICT)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0.9, max_value=1.1), min_size=3, max_size=10, unique=True))
def test_a_ratio_far_beyond_the_spread_is_decisive(a: list[float]) -> None:
    # Boots within +-10% of 1 against boots 10x slower: no spread of the kind can hide that.
    # (Boots that did not vary at all give no verdict: test_one_boot_gives_no_verdict_...)
    b = [10 * v for v in a[::-1]] + [10.0]
    assert verdict(a, b, Direction.LOWER_IS_BETTER) is Verdict.FASTER
    assert verdict(a, b, Direction.HIGHER_IS_BETTER) is Verdict.SLOWER


def test_verdict_rejects_empty_sample_and_bad_alpha() -> None:
    with pytest.raises(ValueError, match="empty"):
        verdict([], [1.0, 2.0], Direction.LOWER_IS_BETTER)
    with pytest.raises(ValueError, match="alpha must be strictly between 0 and 1"):
        verdict([1.0, 2.0], [1.0, 2.0], Direction.LOWER_IS_BETTER, alpha=1.5)


def test_holm_worked_example() -> None:
    # Sorted 0.01, 0.03, 0.04, 0.5 times 4, 3, 2, 1 = 0.04, 0.09, 0.08, 0.5; monotone: 0.09.
    assert holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert holm([0.9, 0.8]) == [1.0, 1.0]
    assert holm([]) == []


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


# calibration: the simulation of benchmarks/verdict_calibration.py, small and seeded

TRIALS = 300
# With a true rate of at most 5%, more than this many false verdicts in TRIALS happen with
# probability under 0.1%; the seed fixes the draw, so the test is deterministic besides.
MOST_FALSE = binom.ppf(0.999, TRIALS, 0.05) / TRIALS


@pytest.mark.parametrize("heavy", [False, True], ids=["lognormal", "heavy-tails"])
def test_a_a_comparisons_rarely_get_a_verdict_at_every_number_of_boots(heavy: bool) -> None:
    rng = np.random.default_rng(19)
    for n in BOOTS:
        rate = comparison_rate(n, TRIALS, rng, boot_draws(heavy))
        assert rate <= MOST_FALSE, (n, rate)


def test_a_real_1_5x_difference_is_found_at_5_boots() -> None:
    rate = comparison_rate(5, TRIALS, np.random.default_rng(19), boot_draws(False), RATIO)
    # The simulation's power here is nearly 100%; 80% is what the method promises.
    assert rate >= 0.8 + 3 * math.sqrt(0.8 * 0.2 / TRIALS), rate


def test_a_a_sweeps_rarely_report_a_difference() -> None:
    sweeps = 60
    rate = sweep_rates(3, sweeps, np.random.default_rng(19), boot_draws(True))
    assert rate <= binom.ppf(0.999, sweeps, 0.05) / sweeps, rate


def test_an_undetectable_ratio_is_infinite_not_an_overflow() -> None:
    # Two boots a side, one rig's 10x apart, at a Holm level for ~100 verdicts: a t quantile on
    # about one degree of freedom in the thousands times a wide standard error.
    found = difference([1.0, 10.0], [1.0, 1.001])
    assert found.min_detectable_ratio(alpha=0.05 / 100) == math.inf
