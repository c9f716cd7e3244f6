"""The figures docs/guarantees.md quotes for the largest sweep are the code's: its default waits
and deadlines, the events a boot may write into its own execution, the events the sweep's own
execution holds per boot, and the boots a sweep may run."""

from pathlib import Path
from typing import Any

from functions.execution_input import (
    EVENTS_PER_BOOT_FIXED,
    EVENTS_PER_BOOT_IN_SWEEP,
    EVENTS_PER_POLL,
    HISTORY_EVENTS_RESERVED,
    MAX_BOOTS_PER_RIG,
    MAX_BOOTS_PER_SWEEP,
    SweepInput,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "guarantees.md"
SLOW_POLLS = {"command_poll_s": 120, "ready_poll_s": 60, "agent_poll_s": 60}


def _largest_sweep() -> str:
    text = DOC.read_text()
    section = text.split("## The largest sweep", 1)[1].split("\n## ", 1)[0]
    return " ".join(section.split())


def _per_boot(**extra: Any) -> int:
    """The events one boot may write into its own execution (its polls and steps)."""
    sweep = SweepInput.model_validate({"rigs": ["torch"], "model": "m", "budget_usd": 5, **extra})
    return sweep.history_events_per_boot()


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
    assert f"{HISTORY_EVENTS_RESERVED} held back for its start, end and retries" in doc
    assert f"a boot may write {_per_boot():,} events with one relaunch allowed" in doc
    assert (
        f"and {_per_boot(max_interruptions_per_boot=0):,} with `max_interruptions_per_boot: 0`"
        in doc
    )
    slow, slow_alone = (
        _per_boot(waits=SLOW_POLLS),
        _per_boot(waits=SLOW_POLLS, max_interruptions_per_boot=0),
    )
    assert f"a boot writes {slow:,} events, or {slow_alone:,} without relaunch" in doc
    largest = SweepInput.model_validate(
        {"rigs": ["torch", "vllm"], "model": "m", "budget_usd": 5,
         "boots_per_rig": MAX_BOOTS_PER_SWEEP // 2}
    )  # fmt: skip
    assert largest.boot_count() == MAX_BOOTS_PER_SWEEP
    assert f"at most {EVENTS_PER_BOOT_IN_SWEEP} events per boot" in doc
    assert f"{MAX_BOOTS_PER_SWEEP} boots write at most {largest.history_events():,} there" in doc
    assert doc.startswith(
        f"{MAX_BOOTS_PER_SWEEP} boots (rigs x boots per rig, up to {MAX_BOOTS_PER_RIG} per rig)"
    )
    assert f"The {MAX_BOOTS_PER_SWEEP}-boot ceiling" in doc
