"""The Map's output stays bounded: each boot's outcome carries a truncated error cause, so the
largest sweep's outcomes, and its state after DecideRound, fit in Step Functions' 256 KiB
payload whatever the errors said."""

import json

from functions.boot_executions import MAX_NAME
from functions.boot_plan import plan_boot
from functions.events import BootItem, BootOutcome, CaughtError
from functions.execution_input import MAX_BOOTS_PER_RIG, MAX_BOOTS_PER_SWEEP, SweepInput
from functions.finish import MAX_CAUSE, explain, truncate
from tests.orchestrator.conftest import accepted

PAYLOAD_LIMIT = 256 * 1024


def test_a_long_cause_is_truncated() -> None:
    cause = json.dumps({"errorMessage": "x" * 100_000, "errorType": "CommandFailed"})
    text = truncate(explain(CaughtError(Error="CommandFailed", Cause=cause)))
    assert len(text) == MAX_CAUSE
    assert text.endswith("…")
    assert truncate("short") == "short"


def test_the_largest_sweep_s_outcomes_fit_in_one_payload() -> None:
    outcome = BootOutcome(
        rig="r" * 32,
        boot=10,
        outcome="failed",
        instance_id="i-0123456789abcdef0",
        error=truncate("E" * 1000, 100),
        cause=truncate("c" * 100_000),
        rows=0,
        cost_usd=1.234567,
        instance_seconds=86_400.0,
    )
    outcomes = [outcome.model_dump(mode="json")] * MAX_BOOTS_PER_SWEEP
    assert len(json.dumps(outcomes).encode()) < PAYLOAD_LIMIT / 4
    # The sweep's state after DecideRound: the round's items, its outcomes (ran) and every
    # outcome folded into the decision; each item carries its rig's plan and the boot's name.
    sweep = SweepInput.model_validate(
        {"rigs": ["vllm", "torch"], "model": "m" * 256, "budget_usd": 5, "boots_per_rig": 32}
    )
    item = BootItem(
        rig="r" * 48, boot=MAX_BOOTS_PER_RIG, plan=plan_boot(sweep, "vllm"),
        execution_name="x" * MAX_NAME,
    ).model_dump(mode="json")  # fmt: skip
    state = {
        "sweep": accepted(sweep).model_dump(mode="json"),
        "items": [item] * MAX_BOOTS_PER_SWEEP,
        "ran": outcomes,
        "decision": {"boots": outcomes, "items": [], "rounds": [], "headline": []},
    }
    assert len(json.dumps(state).encode()) < PAYLOAD_LIMIT * 3 / 4
