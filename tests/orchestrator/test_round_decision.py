"""The adaptive sweep's decision after each round (functions/rounds.py) on synthetic results
rows, and the input that asks for it."""

from typing import Any

import numpy as np
import pytest

from analysis.sequential import Spending, look_levels
from functions.errors import InvalidInput
from functions.events import (
    BootItem,
    BootOutcome,
    BootPlan,
    BundleRef,
    DecideRoundEvent,
    Reservation,
    SweepConfig,
)
from functions.execution_input import (
    DEFAULT_MAX_BOOTS_PER_RIG,
    HISTORY_EVENT_LIMIT,
    MAX_BOOTS_PER_SWEEP,
    parse_sweep_input,
)
from functions.rounds import ALL_DECIDED, AT_CAP, NO_RESULTS, OVER_BUDGET, decide_round, levels

RIGS = ["torch", "vllm"]
CONTEXT = {"rigs": set(RIGS)}
PLAN = BootPlan(
    rig="torch", instance_type="g5g.2xlarge", arch="aarch64", image="ami-1",
    image_source="base", dtype="float16", dtype_reason="", settings={},
)  # fmt: skip
FAST_POLLS = {"agent_poll_s": 60, "ready_poll_s": 60, "command_poll_s": 120}


def auto(**overrides: Any) -> dict[str, Any]:
    return {
        "rigs": RIGS, "model": "random:tiny", "budget_usd": 50, "boots_per_rig": "auto",
        "waits": FAST_POLLS, "max_interruptions_per_boot": 0, **overrides,
    }  # fmt: skip


def row(rig: str, boot: int, concurrency: int, scale: float) -> dict[str, Any]:
    """One results row: a cell whose latencies are `scale` and throughput 100 / `scale`."""
    return {
        "rig": rig, "boot": boot, "cell": f"c{concurrency:05d}",
        "metrics": {
            "concurrency": concurrency, "requests_ok": 4, "output_tok_s": 100 / scale,
            "ttft_ms": {"p50": 50 * scale}, "tpot_ms": {"p50": 10 * scale},
        },
    }  # fmt: skip


def rows_for(boots: int, ratio: float, seed: int = 0, spread: float = 0.1) -> list[dict[str, Any]]:
    """`boots` per rig, lognormal boot-to-boot `spread` (sigma of the log), vllm `ratio` x
    slower."""
    rng = np.random.default_rng(seed)
    out = []
    for boot in range(1, boots + 1):
        for rig, factor in (("torch", 1.0), ("vllm", ratio)):
            scale = factor * float(rng.lognormal(0.0, spread))
            out += [row(rig, boot, c, scale) for c in (1, 4)]
    return out


def event(sweep: dict[str, Any], done: int, rounds: list[Any] | None = None) -> DecideRoundEvent:
    parsed = parse_sweep_input(sweep, CONTEXT)
    config = SweepConfig.accepted(
        parsed, sweep_id="s", subnets=["subnet-0123456789abcdef0"],
        bundle=BundleRef(sha256="x", key="k", rigs=RIGS), execution_arn="",
        created_at="2026-12-01",
    )  # fmt: skip
    start = rounds[-1].boots_per_rig + 1 if rounds else 1
    return DecideRoundEvent.model_validate(
        {
            "sweep": config,
            "reservation": Reservation(
                price_usd_per_hour=0.3,
                price_source="x",
                per_boot_usd=0.6,
                total_usd=12,
                month="2026-12",
            ),
            "items": [
                BootItem(rig=r, boot=b, plan=PLAN, execution_name=f"s-{r}-{b}")
                for b in range(start, done + 1)
                for r in RIGS
            ],
            "ran": [
                BootOutcome(rig=r, boot=b, outcome="succeeded", rows=2, cost_usd=0.01)
                for b in range(start, done + 1)
                for r in RIGS
            ],
            "rounds": rounds or [],
        }
    )


def test_looks_are_3_5_and_the_cap_at_hwang_shih_decani_levels() -> None:
    for cap, looks in ((3, [3]), (4, [3, 4]), (5, [3, 5]), (10, [3, 5, 10])):
        sweep = parse_sweep_input(auto(max_boots_per_rig=cap), CONTEXT)
        assert sweep.looks() == looks
        assert sweep.boot_count() == 2 * cap  # the worst case is what is reserved
        assert levels(sweep) == pytest.approx(look_levels(Spending.HWANG_SHIH_DECANI, looks))
        assert sum(levels(sweep)) == pytest.approx(0.05)
    fixed = parse_sweep_input({**auto(), "boots_per_rig": 4}, CONTEXT)
    assert (fixed.looks(), fixed.boot_count(), fixed.adaptive) == ([4], 8, False)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"max_boots_per_rig": 2}, "max_boots_per_rig: Input should be greater than or equal to 3"),
        ({"max_boots_per_rig": 51}, "max_boots_per_rig: Input should be less than or equal to 50"),
        ({"boots_per_rig": 3, "max_boots_per_rig": 5}, 'max_boots_per_rig: only with "boots_'),
        ({"boots_per_rig": "AUTO"}, "boots_per_rig: Input should be a valid number of boots or"),
        ({"rigs": ["torch"]}, 'boots_per_rig: "auto" boots until the comparisons'),
        (
            {"rigs": ["torch", "vllm", "a", "b", "c"], "max_boots_per_rig": 13},
            "max_boots_per_rig: 5 rigs x 13 boots",
        ),
    ],
)
def test_bad_adaptive_input_names_the_field(given: dict[str, Any], message: str) -> None:
    rigs = set(given.get("rigs", RIGS))
    with pytest.raises(InvalidInput, match=message):
        parse_sweep_input(auto(**given), {"rigs": rigs})


def test_a_cap_is_bounded_by_the_boots_a_sweep_may_run_not_by_one_history() -> None:
    # each boot polls in its own execution: 30 per rig at the default polls, one relaunch
    at_defaults = {**auto(max_boots_per_rig=30), "waits": {}, "max_interruptions_per_boot": 1}
    sweep = parse_sweep_input(at_defaults, CONTEXT)
    assert sweep.boots_cap() == 30
    assert sweep.history_events() <= HISTORY_EVENT_LIMIT
    assert sweep.boot_history_events() <= HISTORY_EVENT_LIMIT


def test_no_cap_named_gets_the_default_cap_or_what_the_sweep_may_run() -> None:
    at_defaults = {**auto(), "waits": {}, "max_interruptions_per_boot": 1}
    sweep = parse_sweep_input(at_defaults, CONTEXT)
    assert sweep.boots_cap() == DEFAULT_MAX_BOOTS_PER_RIG == 10
    # the state records the cap resolved at validation, whatever the defaults later
    assert event(at_defaults, 3).sweep.boots_cap() == 10
    # 16 rigs x 10 would pass the boots a sweep may run: the most that fit, 4 per rig
    many = {**at_defaults, "rigs": [f"r{i}" for i in range(16)]}
    sweep = parse_sweep_input(many, {"rigs": set(many["rigs"])})
    assert sweep.boots_cap() == MAX_BOOTS_PER_SWEEP // 16 == 4


def test_a_large_difference_is_decided_at_the_first_look() -> None:
    # The first look tests at 0.010 of the 5% (3 of 10 boots): a 1.1x difference at 10% spread
    # waits for more boots; a 3x difference stops the sweep there.
    assert not decide_round(event(auto(), 3), rows_for(3, ratio=1.1)).rounds[0].stop
    decision = decide_round(event(auto(), 3), rows_for(3, ratio=3.0))
    [first] = decision.rounds
    assert (first.round, first.boots_per_rig, first.stop) == (1, 3, ALL_DECIDED)
    assert first.decided == first.comparisons == 6  # 2 cells x 3 headline metrics x 1 pair
    assert {c.verdict for c in decision.headline} == {"faster"}  # torch against vllm
    assert {c.level for c in decision.headline} == {levels(parse_sweep_input(auto(), CONTEXT))[0]}
    assert decision.items == []
    assert not decision.more
    assert first.boots == 6
    assert first.cost_usd == pytest.approx(0.06)


def test_an_undecided_look_asks_for_the_next_round_s_boots() -> None:
    decision = decide_round(event(auto(), 3), rows_for(3, ratio=1.0))
    assert decision.more
    assert decision.rounds[0].stop == ""
    assert decision.rounds[0].decided == 0
    assert [(i.rig, i.boot) for i in decision.items] == [(r, b) for b in (4, 5) for r in RIGS]
    assert all(i.plan == PLAN for i in decision.items)
    assert len(decision.boots) == 6  # the round's outcomes folded in


def test_a_decision_stays_decided_and_the_cap_stops_the_rest() -> None:
    first = decide_round(event(auto(max_boots_per_rig=5), 3), rows_for(3, ratio=1.0))
    # a look that decided only the TTFT comparisons (synthetic: the earlier look's record)
    before = [
        c.model_copy(update={"decided_in_round": 1, "level": 0.01, "verdict": "faster"})
        if c.metric == "ttft_ms.p50"
        else c
        for c in first.headline
    ]
    later = event(auto(max_boots_per_rig=5), 5, first.rounds)
    later = later.model_copy(update={"boots": first.boots, "headline": before})
    decision = decide_round(later, rows_for(5, ratio=1.0))
    last = decision.rounds[-1]
    assert (last.round, last.boots_per_rig, last.stop) == (2, 5, AT_CAP)
    assert last.decided == 2
    kept = [c for c in decision.headline if c.decided_in_round == 1]
    assert {(c.metric, c.verdict) for c in kept} == {("ttft_ms.p50", "faster")}
    assert len(decision.boots) == 10
    assert not decision.more


def test_a_round_without_results_or_budget_stops_the_sweep() -> None:
    empty = event(auto(), 3)
    empty = empty.model_copy(update={"ran": [b.model_copy(update={"rows": 0}) for b in empty.ran]})
    assert decide_round(empty, []).rounds[0].stop == NO_RESULTS
    poor = event(auto(budget_usd=0.5), 3)
    assert decide_round(poor, rows_for(3, ratio=1.0)).rounds[0].stop == OVER_BUDGET


def test_a_fixed_sweep_passes_through_without_a_look() -> None:
    fixed = event({**auto(), "boots_per_rig": 2}, 2)
    decision = decide_round(fixed, None)
    assert decision.rounds == []
    assert decision.items == []
    assert not decision.more
    assert len(decision.boots) == 4


def test_an_a_a_sweep_decides_nothing_at_any_look_in_most_trials() -> None:
    sweep = auto(max_boots_per_rig=10)
    decided = 0
    for seed in range(40):
        rows = rows_for(10, ratio=1.0, seed=seed)
        rounds: list[Any] = []
        for done in (3, 5, 10):
            found = decide_round(event(sweep, done, rounds), [r for r in rows if r["boot"] <= done])
            rounds = found.rounds
            decided += found.rounds[-1].decided
    # 6 correlated comparisons at 5% family-wise over all looks: rarely any
    assert decided <= 4
