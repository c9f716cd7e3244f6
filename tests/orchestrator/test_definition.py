"""statemachine/sweep.asl.json and boot.asl.json as graphs: whatever happens after launch ends
in Finish, in the boot's execution or, when that execution itself fails, in the sweep's."""

import json
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from functions.events import BootState

ROOT = Path(__file__).resolve().parents[2]
# The template substitutes numbers too (retry intervals): the file is JSON once they are in.
NUMBER_SUBSTITUTIONS = {
    "LambdaRetryIntervalSeconds": 2,
    "LambdaRetryBackoffRate": 2,
    "ExecutionTimeoutSeconds": 604800,
}


def definition_text(name: str = "sweep") -> str:
    text = (ROOT / "statemachine" / f"{name}.asl.json").read_text()
    for key, value in NUMBER_SUBSTITUTIONS.items():
        text = text.replace("${" + key + "}", str(value))
    return text


DEFINITION = json.loads(definition_text())
ITERATION = DEFINITION["States"]["RunBoots"]["ItemProcessor"]
BOOT = json.loads(definition_text("boot"))
RUN_BOOT = ITERATION["States"]["RunBoot"]
RECOMMENDED_LAMBDA_RETRY = {
    "ErrorEquals": [
        "Lambda.ServiceException",
        "Lambda.AWSLambdaException",
        "Lambda.SdkClientException",
        "Lambda.ClientExecutionTimeoutException",
        "Lambda.TooManyRequestsException",  # throttling: retried with backoff everywhere
    ],
    "IntervalSeconds": 2,
    "MaxAttempts": 8,
    "BackoffRate": 2,
    "MaxDelaySeconds": 60,
    "JitterStrategy": "FULL",
}
TERMINATE = "Finish"


def successors(state: dict[str, Any], *, with_errors: bool = True) -> list[str]:
    found = [state["Next"]] if "Next" in state else []
    found += [choice["Next"] for choice in state.get("Choices", [])]
    found += [state["Default"]] if "Default" in state else []
    if with_errors:
        found += [catch["Next"] for catch in state.get("Catch", [])]
    return found


def all_states(states: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = dict(states)
    for state in states.values():
        if "ItemProcessor" in state:
            found.update(all_states(state["ItemProcessor"]["States"]))
    return found


def reachable(states: dict[str, Any], start: str, stop: str) -> set[str]:
    seen, queue = set(), deque([start])
    while queue:
        name = queue.popleft()
        if name in seen or name == stop:
            continue
        seen.add(name)
        queue.extend(successors(states[name]))
    return seen


def test_every_path_from_launch_reaches_terminate() -> None:
    states = BOOT["States"]
    assert BOOT["StartAt"] == "Launch"
    before_terminate = reachable(states, "Launch", TERMINATE)
    assert "Launch" in before_terminate
    for name in before_terminate:
        state = states[name]
        # No way out of a boot except through Finish...
        assert not state.get("End"), f"{name} ends the boot without terminating"
        assert state["Type"] not in ("Succeed", "Fail"), name
        # ...and every Task's failures are caught into Finish.
        if state["Type"] == "Task":
            catchers = state.get("Catch", [])
            assert any(
                c["ErrorEquals"] == ["States.ALL"] and c["Next"] == TERMINATE for c in catchers
            ), f"{name} has no Catch reaching {TERMINATE}"
        # From every state, terminate stays reachable on the normal path (no trap loops).
        assert TERMINATE in {s for s in _normal_closure(states, name)}, (
            f"{TERMINATE} unreachable from {name}"
        )


def _normal_closure(states: dict[str, Any], start: str) -> set[str]:
    seen, queue = set(), deque([start])
    while queue:
        name = queue.popleft()
        if name in seen:
            continue
        seen.add(name)
        if name != TERMINATE:
            queue.extend(successors(states[name], with_errors=False))
    return seen


@pytest.mark.parametrize("machine", [BOOT, ITERATION], ids=["boot", "sweep"])
def test_terminate_retries_then_marks_the_boot_for_the_reaper(machine: dict[str, Any]) -> None:
    finish = machine["States"][TERMINATE]
    assert any(r["ErrorEquals"] == ["States.ALL"] for r in finish["Retry"])
    mark = machine["States"][finish["Catch"][0]["Next"]]
    # No Lambda (Lambda may be what fails): a direct write of the mark the reaper reads.
    assert mark["Resource"] == "arn:aws:states:::dynamodb:updateItem"
    assert mark["Parameters"]["Key"]["sk"]["S.$"].startswith("States.Format('FINISH_FAILED#")
    assert mark["Next"] == mark["Catch"][0]["Next"]  # marked or not, the boot's outcome follows
    fallback = machine["States"][mark["Next"]]
    assert fallback["Type"] == "Pass"
    assert fallback.get("End")
    # Its output is bounded: a fixed cause, never the (unbounded) caught one.
    assert not any(k.endswith(".$") for k in fallback["Parameters"] if k.startswith("cause"))


@pytest.mark.parametrize("name", ["sweep", "boot"])
def test_every_retry_interval_is_a_substitution(name: str) -> None:
    text = (ROOT / "statemachine" / f"{name}.asl.json").read_text()
    definition = json.loads(definition_text(name))
    tasks = [s for s in all_states(definition["States"]).values() if s["Type"] == "Task"]
    retries = sum(len(s["Retry"]) for s in tasks)
    assert text.count('"IntervalSeconds": ${LambdaRetryIntervalSeconds}') == retries
    assert text.count('"BackoffRate": ${LambdaRetryBackoffRate}') == retries


def test_a_duplicate_launch_in_flight_is_retried() -> None:
    launch = BOOT["States"]["Launch"]
    assert any("IdempotencyAlreadyInProgressError" in r["ErrorEquals"] for r in launch["Retry"])


def test_a_spot_reclaim_relaunches_up_to_the_input_s_limit() -> None:
    states = BOOT["States"]
    for name in ("CheckAgent", "CheckReady", "PollHarness"):
        first = states[name]["Catch"][0]
        assert first == {"ErrorEquals": ["InstanceInterrupted"], "ResultPath": "$.error",
                         "Next": "Relaunch?"}, name  # fmt: skip
    choice = states["Relaunch?"]
    assert choice["Choices"][0]["NumericLessThanPath"] == "$.sweep.max_interruptions_per_boot"
    assert choice["Default"] == TERMINATE
    relaunch = states[choice["Choices"][0]["Next"]]
    assert relaunch["Next"] == "Launch"
    assert relaunch["Parameters"]["interruptions.$"] == "States.MathAdd($.interruptions, 1)"
    # the new attempt starts from the boot's state as the sweep started it: every field Launch
    # needs (the plan too: a relaunch without it failed every Task after it)
    given = {key.removesuffix(".$") for key in relaunch["Parameters"]}
    started = {key.removesuffix(".$") for key in RUN_BOOT["Parameters"]["Input"]}
    assert given == started - {"AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID"}
    required = {n for n, f in BootState.model_fields.items() if f.is_required()}
    assert required <= given


@pytest.mark.parametrize("definition", [DEFINITION, BOOT], ids=["sweep", "boot"])
def test_every_task_has_a_timeout_and_the_recommended_lambda_retry(
    definition: dict[str, Any],
) -> None:
    for name, state in all_states(definition["States"]).items():
        if state["Type"] != "Task" or name in ("MarkFinishFailed", "RunBoot"):
            continue
        assert 0 < state["TimeoutSeconds"] <= 300, name
        assert state["Retry"][0] == RECOMMENDED_LAMBDA_RETRY, name
        assert state["Resource"] == "arn:aws:states:::lambda:invoke", name
        assert state["Parameters"]["FunctionName"].startswith("${"), name


def test_every_wait_is_the_one_its_loop_s_check_computed() -> None:
    """Each loop's check returns how long to wait (the input's waits through
    functions/poll_schedule.py) and its Wait reads exactly that, then checks again."""
    states = BOOT["States"]
    assert not [s for s in all_states(DEFINITION["States"]).values() if s["Type"] == "Wait"]
    waits = {name: s for name, s in states.items() if s["Type"] == "Wait"}
    assert set(waits) == {"WaitForAgent", "WaitForRig", "WaitForHarness"}
    for state in waits.values():
        assert "Seconds" not in state
        check = states[state["Next"]]
        assert check["ResultSelector"]["wait_s.$"] == "$.Payload.wait_s"
        assert state["SecondsPath"] == f"{check['ResultPath']}.wait_s"


def test_map_concurrency_comes_from_the_quota_room() -> None:
    run_boots = DEFINITION["States"]["RunBoots"]
    assert run_boots["MaxConcurrencyPath"] == "$.quota.max_concurrency"
    assert run_boots["ItemsPath"] == "$.items"


def test_nothing_is_spent_before_validation_quota_and_budget() -> None:
    order, name = [], DEFINITION["StartAt"]
    while DEFINITION["States"][name]["Type"] == "Task":
        order.append(name)
        name = DEFINITION["States"][name]["Next"]
    assert order == ["ValidateInput", "CheckQuota", "ReserveBudget"]
    assert name == "RunBoots"


def test_each_step_s_small_result_is_placed_by_result_path() -> None:
    from functions.events import RESULT_PATHS

    states = {**all_states(DEFINITION["States"]), **BOOT["States"]}
    for name, (path, model) in RESULT_PATHS.items():
        state = states[name]
        assert state["ResultPath"] == path, name
        assert "OutputPath" not in state, name
        assert state["ResultSelector"] == {f"{f}.$": f"$.Payload.{f}" for f in model.model_fields}
    # The rest either starts the state (Validate) or ends it (Finish, Summarize).
    unwrapped = {n for n, s in states.items() if s["Type"] == "Task" and "OutputPath" in s}
    assert unwrapped == {"ValidateInput", "RunBoot", "Finish", "Summarize"}


def test_rounds_loop_through_decide_round_and_end_in_the_report() -> None:
    states = DEFINITION["States"]
    run_boots = states["RunBoots"]
    assert run_boots["ResultPath"] == "$.ran"
    assert run_boots["Next"] == "DecideRound"
    decide = states["DecideRound"]
    # a decision that fails still ends with the report and the summary (which releases the
    # unlaunched boots and closes the sweep): every boot of the round already went through Finish
    assert decide["Catch"] == [
        {"ErrorEquals": ["States.ALL"], "ResultPath": "$.round_error", "Next": "WriteReport"}
    ]
    assert decide["Next"] == "NextRound"
    fold = states["NextRound"]
    assert fold["Type"] == "Pass"
    assert fold["Parameters"]["items.$"] == "$.decision.items"
    assert fold["Parameters"]["boots.$"] == "$.decision.boots"
    assert fold["Parameters"]["ran"] == []
    assert fold["Parameters"]["round_error"] is None  # Summarize reads it on both paths
    # the next round's Map gets every field it selects from the state
    selected = {v.removeprefix("$.").split(".")[0] for k, v in run_boots["ItemSelector"].items()
                if k.endswith(".$") and v.startswith("$.")}  # fmt: skip
    given = {k.removesuffix(".$") for k in fold["Parameters"]}
    assert selected <= given
    assert "quota" in given
    choice = states[fold["Next"]]
    assert choice["Choices"] == [{"Variable": "$.more", "BooleanEquals": True, "Next": "RunBoots"}]
    assert choice["Default"] == "WriteReport"
    # both ways into WriteReport carry what it and Summarize read
    payload = states["Summarize"]["Parameters"]["Payload"]
    for key in ("boots.$", "ran.$", "rounds.$", "headline.$", "round_error.$"):
        assert key in payload, key
    assert {"boots.$", "ran.$", "rounds.$", "headline.$"} <= set(
        states["WriteReport"]["Parameters"]["Payload"]
    )


def test_each_boot_runs_as_its_own_execution_and_its_failure_ends_in_finish() -> None:
    assert ITERATION["StartAt"] == "RunBoot"
    assert RUN_BOOT["Resource"] == "arn:aws:states:::states:startExecution.sync:2"
    assert RUN_BOOT["Parameters"]["StateMachineArn"] == "${BootStateMachineArn}"
    # named for the sweep, rig and boot (functions.boot_executions), so a retry finds it
    assert RUN_BOOT["Parameters"]["Name.$"] == "$.execution_name"
    selector = DEFINITION["States"]["RunBoots"]["ItemSelector"]
    assert selector["execution_name.$"] == "$$.Map.Item.Value.execution_name"
    given = RUN_BOOT["Parameters"]["Input"]
    assert given["AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID.$"] == "$$.Execution.Id"
    required = {n for n, f in BootState.model_fields.items() if f.is_required()}
    assert required <= {key.removesuffix(".$") for key in given}
    # the boot's outcome (Finish's output) is the iteration's, as it was inside the Map
    assert RUN_BOOT["OutputPath"] == "$.Output"
    assert RUN_BOOT["Catch"] == [
        {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": TERMINATE}
    ]
    # a failed, stopped or timed-out boot execution is finished by the sweep's own copy of
    # the boot's last steps
    for name in (TERMINATE, "MarkFinishFailed", "FinishFailed"):
        assert ITERATION["States"][name] == BOOT["States"][name], name
    assert set(ITERATION["States"]) == {"RunBoot", TERMINATE, "MarkFinishFailed", "FinishFailed"}
    assert BOOT["TimeoutSeconds"] == DEFINITION["TimeoutSeconds"]
