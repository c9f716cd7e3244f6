"""How long a polling loop waits between checks: the input's interval, or, where the input sets
`first_poll_s` (local sweeps do by default), a wait that starts there and grows with the
phase's age, a quarter of it, up to the interval. A rig ready after 20 s is then seen within
about 5 s of it rather than within a whole interval, and a long phase still polls at the
interval, so the worst-case history (functions/execution_input.py) grows by a few polls only."""

import math

GROWTH = 0.25  # the wait as a share of the phase's age: at most 25% late


def next_wait_s(poll_s: int, first_poll_s: int | None, age_s: float) -> int:
    """Seconds to wait before the next check, `age_s` into the phase."""
    if first_poll_s is None:
        return poll_s
    return min(poll_s, max(first_poll_s, math.floor(age_s * GROWTH)))


def polls_within(duration_s: float, poll_s: int, first_poll_s: int | None, phases: int = 1) -> int:
    """At most how many checks a loop makes in `duration_s` (a 0 s wait counts as 1 s), over
    `phases` phases that share the time (a boot's relaunches): a ramped loop starts fast in
    each, most checks when they share it evenly."""
    if first_poll_s is None or first_poll_s >= poll_s:
        return int(duration_s // max(1, poll_s))
    return phases * _ramped_polls(duration_s / phases, poll_s, first_poll_s)


def _ramped_polls(duration_s: float, poll_s: int, first_poll_s: int) -> int:
    age, polls = 0.0, 0
    while age < duration_s:
        wait = max(1, next_wait_s(poll_s, first_poll_s, age))
        if wait >= poll_s:  # the rest at the interval
            return polls + int((duration_s - age) // wait)
        age += wait
        polls += 1
    return polls
