"""A sweep's progress, folded from its Step Functions execution history: the one reading of
an execution, for the deployed stack and the emulation alike.

Events inside a Map iteration chain back (previousEventId) to their MapIterationStarted, as
on AWS, so each event is attributed to one iteration (one rig x boot); the iteration's rig
and boot are read from the input of the states it enters. An adaptive sweep runs the Map once
per round, and each run numbers its iterations from 0: an iteration is the run's and its own
index. DecideRound's results give the rounds. A state's phase is looked up in
`STATE_PHASES`, which names every state of statemachine/sweep.asl.json's Map and of
boot.asl.json (a test checks it).

Each boot runs as its own execution (statemachine/boot.asl.json), which the iteration's RunBoot
starts and waits for: the sweep's history holds its start and its outcome, the boot's own
history its steps. Given the histories of the boot executions still running
(`boot_executions_in_flight`), their steps are folded into their iterations.
"""

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from functions.errors import error_message
from functions.events import HeadlineComparison, Round
from rigbench.stack.models import BootProgress, Phase, SweepProgress

# Each state inside the Map (one rig x boot), by the phase it belongs to.
STATE_PHASES: dict[str, Phase] = {
    "RunBoot": Phase.LAUNCHING,  # the sweep's Task that starts the boot's execution
    "Launch": Phase.LAUNCHING,
    "WaitForAgent": Phase.WAITING_READY,
    "CheckAgent": Phase.WAITING_READY,
    "AgentOnline?": Phase.WAITING_READY,
    "WaitForRig": Phase.WAITING_READY,
    "CheckReady": Phase.WAITING_READY,
    "RigReady?": Phase.WAITING_READY,
    "RunHarness": Phase.BENCHMARKING,
    "WaitForHarness": Phase.BENCHMARKING,
    "PollHarness": Phase.BENCHMARKING,
    "HarnessDone?": Phase.BENCHMARKING,
    "StoreResults": Phase.STORING,
    "Relaunch?": Phase.LAUNCHING,
    "PrepareRelaunch": Phase.LAUNCHING,
    "Finish": Phase.TERMINATING,
    "MarkFinishFailed": Phase.TERMINATING,
    "FinishFailed": Phase.TERMINATING,
}
# The sweep-level states (outside the Map): shown as the sweep's state, no boot phase.
SWEEP_STATES: frozenset[str] = frozenset(
    {
        "ValidateInput",
        "CheckQuota",
        "ReserveBudget",
        "RunBoots",
        "DecideRound",
        "NextRound",
        "AnotherRound?",
        "WriteReport",
        "Summarize",
        "AnyBootFailed?",
        "SweepFailed",
        "SweepSucceeded",
    }
)
_ENDED = {"ExecutionSucceeded", "ExecutionFailed", "ExecutionAborted", "ExecutionTimedOut"}
_ITERATION_ENDED = {"MapIterationSucceeded", "MapIterationFailed", "MapIterationAborted"}


def _json(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _details(event: Mapping[str, Any]) -> Mapping[str, Any]:
    for key, value in event.items():
        if key.endswith("EventDetails") and isinstance(value, Mapping):
            return value
    return {}


def _instance_id(payload: Any) -> str:
    if isinstance(payload, Mapping):
        instance = payload.get("instance")
        if isinstance(instance, Mapping) and instance.get("instance_id"):
            return str(instance["instance_id"])
    return ""


def _caught(payload: Mapping[str, Any]) -> tuple[str, str] | None:
    """An error a Catch put into the state ({"Error": ..., "Cause": ...}): name, message."""
    for value in payload.values():
        if isinstance(value, Mapping) and "Error" in value and "Cause" in value:
            return str(value["Error"]), error_message(str(value["Cause"]))
    return None


def _outcome(payload: Any) -> Mapping[str, Any] | None:
    """Finish's report ({"outcome": ...}), at the top of its output or where a ResultPath
    placed it."""
    if not isinstance(payload, Mapping):
        return None
    if "outcome" in payload:
        return payload
    for value in payload.values():
        if isinstance(value, Mapping) and "outcome" in value:
            return value
    return None


class _Boot:
    """A mutable boot while folding; frozen into a `BootProgress` at the end."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.rig = "?"
        self.boot: int | None = None
        self.phase = Phase.QUEUED
        self.state = self.instance_id = self.error = self.cause = self.outcome = ""
        self.finished = False
        self.cost_usd: float | None = None
        self.phase_since: datetime | None = None

    def failed(self, error: str, cause: str) -> None:
        self.error = error or self.error or "failed"
        self.cause = cause or self.cause

    def move(self, phase: Phase, when: datetime | None) -> None:
        if phase != self.phase:
            self.phase, self.phase_since = phase, when

    def frozen(self) -> BootProgress:
        return BootProgress(
            index=self.index, rig=self.rig, boot=self.boot, phase=self.phase, state=self.state,
            instance_id=self.instance_id, error=self.error, cause=self.cause,
            finished=self.finished,
            outcome=self.outcome, cost_usd=self.cost_usd, phase_since=self.phase_since,
        )  # fmt: skip


def _boot_execution(kind: str, details: Mapping[str, Any]) -> str:
    """The boot execution a RunBoot event names: started (TaskSubmitted), ended (TaskSucceeded,
    or TaskFailed whose cause is the execution's description); "" for any other event."""
    if kind in ("TaskSubmitted", "TaskSucceeded"):
        payload = _json(details.get("output"))
    elif kind == "TaskFailed":
        payload = _json(details.get("cause"))
    else:
        return ""
    if details.get("resourceType") != "states" or not isinstance(payload, Mapping):
        return ""
    return str(payload.get("ExecutionArn") or "")


def boot_executions(events: Iterable[Mapping[str, Any]]) -> dict[str, bool]:
    """The boot executions the sweep started, in the order started: whether it saw each end."""
    found: dict[str, bool] = {}
    for event in sorted(events, key=lambda e: int(e["id"])):
        kind = str(event["type"])
        arn = _boot_execution(kind, _details(event))
        if arn:
            found[arn] = kind != "TaskSubmitted"
    return found


def boot_executions_in_flight(events: Iterable[Mapping[str, Any]]) -> list[str]:
    """The boot executions the sweep started and has not seen end, in the order started."""
    return [arn for arn, ended in boot_executions(events).items() if not ended]


def fold(
    events: Iterable[Mapping[str, Any]],
    *,
    execution_arn: str,
    described: Mapping[str, Any] | None = None,
    boot_events: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
) -> SweepProgress:
    """Fold history events (in any order) and, when given, describe_execution's answer and
    the histories of boot executions (by ARN) into the sweep's progress. Events are refolded
    in id order: an executor appends events from several threads, so a read can show an event
    with a smaller id after a larger one."""
    by_id = {int(e["id"]): e for e in events}
    iteration_of: dict[int, int | None] = {}
    boots: dict[int, _Boot] = {}
    sweep_state, status, error, cause = "starting", "RUNNING", "", ""
    rounds: list[Round] = []
    headline: list[HeadlineComparison] = []
    offset = 0  # iterations of the Map's earlier runs (rounds)
    for event_id in sorted(by_id):
        event = by_id[event_id]
        kind = str(event["type"])
        when = event.get("timestamp")
        if kind == "MapStateStarted":
            offset = len(boots)
        if kind == "MapIterationStarted":
            index: int | None = offset + int(event["mapIterationStartedEventDetails"]["index"])
        elif kind.startswith(("Execution", "MapState")):
            index = None  # they may chain back through an iteration but belong to the sweep
        else:
            index = iteration_of.get(int(event.get("previousEventId") or 0))
        iteration_of[event_id] = index
        details = _details(event)
        if index is None:
            if kind.endswith("StateEntered"):
                sweep_state = str(details["name"])
            elif kind == "TaskStateExited" and details.get("name") == "DecideRound":
                rounds, headline = _decision(_json(details.get("output"))) or (rounds, headline)
            elif kind in _ENDED:
                status = kind.removeprefix("Execution").upper()
                if kind != "ExecutionSucceeded":
                    error = str(details.get("error") or status)
                    cause = error_message(str(details.get("cause") or ""))
            continue
        boot = boots.setdefault(index, _Boot(index))
        _step(boot, kind, details, when)
        started = _boot_execution(kind, details) if kind == "TaskSubmitted" else ""
        for child in sorted((boot_events or {}).get(started, []), key=lambda e: int(e["id"])):
            child_kind = str(child["type"])
            if not child_kind.startswith("Execution"):  # the boot's steps, not its own end
                _step(boot, child_kind, _details(child), child.get("timestamp"))
    output = None
    if described is not None:
        status = str(described.get("status") or status)
        # The execution's own error wins (a stop's StoppedByUser and who stopped it, where
        # moto's history has its parser's error instead); else the history's, else the status.
        if status not in ("RUNNING", "SUCCEEDED") and (described.get("error") or not error):
            error = str(described.get("error") or status)
            cause = error_message(str(described.get("cause") or ""))
        parsed = _json(described.get("output"))
        output = parsed if isinstance(parsed, dict) else None
    return SweepProgress(
        sweep_id=execution_arn.rsplit(":", 1)[-1], execution_arn=execution_arn,
        status=status, state=sweep_state, error=error, cause=cause, output=output,
        boots=[boots[i].frozen() for i in sorted(boots)], rounds=rounds, headline=headline,
    )  # fmt: skip


def _step(boot: _Boot, kind: str, details: Mapping[str, Any], when: datetime | None) -> None:
    """One event of the boot's iteration, or of its own execution."""
    if kind.endswith("StateEntered"):
        payload = _json(details.get("input"))
        if isinstance(payload, Mapping):
            if boot.rig == "?" and "rig" in payload:
                boot.rig = str(payload["rig"])
            if boot.boot is None and isinstance(payload.get("boot"), int):
                boot.boot = payload["boot"]
            boot.instance_id = _instance_id(payload) or boot.instance_id
            caught = _caught(payload)
            if caught is not None:
                boot.failed(*caught)
        boot.state = str(details["name"])
        phase = STATE_PHASES.get(boot.state)
        if phase is not None and not boot.finished:
            boot.move(phase, when)
    elif kind.endswith("StateExited"):
        payload = _json(details.get("output"))
        boot.instance_id = _instance_id(payload) or boot.instance_id
        report = _outcome(payload)
        if report is not None:
            boot.outcome = str(report["outcome"])
            boot.instance_id = str(report.get("instance_id") or boot.instance_id)
            if report.get("cost_usd") is not None:
                boot.cost_usd = float(report["cost_usd"])
            if boot.outcome == "failed":
                boot.failed(str(report.get("error") or ""), str(report.get("cause") or ""))
    elif kind.endswith("Failed") and kind != "MapIterationFailed":
        boot.failed(str(details.get("error") or ""), error_message(str(details.get("cause") or "")))
    elif kind in _ITERATION_ENDED:
        boot.finished = True
        if boot.outcome == "succeeded":  # errors before were retried away
            boot.error = boot.cause = ""
        succeeded = kind == "MapIterationSucceeded" and not boot.error
        boot.move(Phase.TERMINATED if succeeded else Phase.FAILED, when)


def _decision(payload: Any) -> tuple[list[Round], list[HeadlineComparison]] | None:
    """DecideRound's rounds and headline comparisons, where its ResultPath placed them."""
    decision = payload.get("decision") if isinstance(payload, Mapping) else None
    if not isinstance(decision, Mapping):
        return None  # a failed decision: its Catch placed an error instead
    return (
        [Round.model_validate(r) for r in decision.get("rounds") or []],
        [HeadlineComparison.model_validate(c) for c in decision.get("headline") or []],
    )
