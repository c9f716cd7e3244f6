"""The figures docs/guarantees.md quotes for the largest sweep are the code's: its default waits
and deadlines, the events a boot may write and the boots that fit one execution's history."""

import re
from pathlib import Path
from typing import Any

from functions.execution_input import (
    EVENTS_PER_BOOT_FIXED,
    EVENTS_PER_POLL,
    HISTORY_EVENT_LIMIT,
    HISTORY_EVENTS_RESERVED,
    MAX_BOOTS_PER_SWEEP,
    SweepInput,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "guarantees.md"
SLOW_POLLS = {"command_poll_s": 120, "ready_poll_s": 60, "agent_poll_s": 60}


def _largest_sweep() -> str:
    text = DOC.read_text()
    section = text.split("## The largest sweep", 1)[1].split("\n## ", 1)[0]
    return " ".join(section.split())


def _per_boot(**extra: Any) -> tuple[int, int]:
    """(events one boot may write, boots that fit one execution) for a one-rig input."""
    sweep = SweepInput.model_validate({"rigs": ["torch"], "model": "m", "budget_usd": 5, **extra})
    events = sweep.history_events_per_boot()
    fit = (HISTORY_EVENT_LIMIT - HISTORY_EVENTS_RESERVED) // events
    return events, min(fit, MAX_BOOTS_PER_SWEEP)


def test_the_largest_sweep_quotes_the_codes_numbers() -> None:
    doc = _largest_sweep()
    defaults = SweepInput.model_validate({"rigs": ["torch"], "model": "m", "budget_usd": 5})
    waits, deadlines = defaults.waits, defaults.deadlines
    assert defaults.max_interruptions_per_boot == 1  # "one relaunch allowed (the default)"
    assert (
        f"({waits.agent_poll_s}/{waits.ready_poll_s}/{waits.command_poll_s} s agent/ready/harness "
        f"polls, {deadlines.ready_s:,} s ready, {deadlines.bench_s:,} s bench, "
        f"{deadlines.instance_s:,} s instance)"
    ) in doc
    assert f"about {EVENTS_PER_BOOT_FIXED} events for its fixed steps" in doc
    assert f"and {EVENTS_PER_POLL} per poll" in doc
    events, boots = _per_boot()
    assert f"a boot may write {events:,} events with one relaunch allowed" in doc
    assert f"(the default): **{boots} boots**" in doc
    events, boots = _per_boot(max_interruptions_per_boot=0)
    assert f"{events:,} and **{boots} boots** with `max_interruptions_per_boot: 0`" in doc
    events, boots = _per_boot(waits=SLOW_POLLS)
    assert f"a boot writes {events:,} events (**{boots} boots**)" in doc
    events, boots = _per_boot(waits=SLOW_POLLS, max_interruptions_per_boot=0)
    assert f"or {events:,} without relaunch, so all **{boots} boots** fit" in doc
    assert boots == MAX_BOOTS_PER_SWEEP
    assert re.search(rf"^{MAX_BOOTS_PER_SWEEP} boots \(rigs x boots per rig\)", doc)
