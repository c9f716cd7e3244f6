"""The polling loops' waits: the input's interval, or from `first_poll_s` growing with the
phase's age; the history bound counts at least every poll such a loop makes."""

from hypothesis import given
from hypothesis import strategies as st

from functions.poll_schedule import GROWTH, next_wait_s, polls_within


def test_without_a_first_poll_every_wait_is_the_interval() -> None:
    assert [next_wait_s(30, None, age) for age in (0, 10, 1000)] == [30, 30, 30]
    assert polls_within(300, 30, None) == 10


def test_a_first_poll_grows_with_the_phase_age_up_to_the_interval() -> None:
    assert next_wait_s(30, 1, 0) == 1
    assert next_wait_s(30, 1, 20) == 5  # a quarter of the age: at most 25% late
    assert next_wait_s(30, 1, 1000) == 30


def _simulated_polls(duration_s: float, poll_s: int, first: int | None) -> int:
    age, polls = 0.0, 0
    while True:
        age += max(1, next_wait_s(poll_s, first, age))
        if age > duration_s:
            return polls
        polls += 1


@given(
    duration=st.integers(min_value=0, max_value=8000),
    poll=st.integers(min_value=0, max_value=120),
    first=st.none() | st.integers(min_value=0, max_value=10),
)
def test_the_bound_counts_every_poll_a_loop_makes(
    duration: int, poll: int, first: int | None
) -> None:
    simulated = _simulated_polls(duration, poll, first)
    bound = polls_within(duration, poll, first)
    assert simulated <= bound <= simulated + 1


def test_a_ramped_loop_is_never_late_by_more_than_its_growth() -> None:
    """Whatever moment a phase ends, the check after it comes within 25% of its age (or the
    first wait, or the interval)."""
    age = 0.0
    while age < 3000:
        wait = next_wait_s(45, 1, age)
        assert wait <= min(45, max(1, GROWTH * age))
        age += wait


def test_a_local_sweep_without_waits_polls_from_one_second_where_its_history_allows() -> None:
    from functions.execution_input import HISTORY_EVENT_LIMIT, SweepInput
    from rigbench.stack.local import at_local_speed

    base = {"rigs": ["torch", "jax"], "model": "random:tiny", "budget_usd": 5}
    large = SweepInput.model_validate({**base, "boots_per_rig": 30})
    assert at_local_speed(large).waits.first_poll_s == 1
    assert at_local_speed(large).boot_history_events() <= HISTORY_EVENT_LIMIT
    named = SweepInput.model_validate({**base, "waits": {"ready_poll_s": 7}})
    assert at_local_speed(named) is named  # the input's own waits stand
    # a boot whose 22 h of polls, two relaunches allowed, fit its execution's history at the
    # cloud's polls, not with each loop starting fast: as given
    long = SweepInput.model_validate(
        {
            **base,
            "max_interruptions_per_boot": 2,
            "deadlines": {"ready_s": 3 * 3600, "bench_s": 5 * 3600, "instance_s": 22 * 3600},
        }
    )
    assert long.boot_history_events() <= HISTORY_EVENT_LIMIT
    assert at_local_speed(long) is long
    # an adaptive sweep keeps its cap
    adaptive = SweepInput.model_validate({**base, "boots_per_rig": "auto"})
    assert at_local_speed(adaptive).boots_cap() == adaptive.boots_cap()
