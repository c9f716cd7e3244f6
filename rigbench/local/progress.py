"""Progress of a sweep per rig and boot, read from the Step Functions execution history.

Events inside a Map iteration chain back (previousEventId) to their MapIterationStarted, as
on AWS, so each event is attributed to one iteration; the iteration's rig and boot are read
from the input of the first state it enters. A state's name says which phase it belongs to.
"""

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rich.table import Table
from rich.text import Text


class Phase(StrEnum):
    QUEUED = "queued"
    LAUNCHING = "launching"
    WAITING_READY = "waiting ready"
    BENCHMARKING = "benchmarking"
    STORING = "storing"
    TERMINATING = "terminating"
    TERMINATED = "terminated"
    FAILED = "failed"


# Checked in order against the lower-cased state name; the first match wins.
_PHASE_WORDS: tuple[tuple[Phase, tuple[str, ...]], ...] = (
    (Phase.TERMINATING, ("terminat", "finish", "cleanup", "reconcile", "release")),
    (Phase.STORING, ("store", "save", "record")),
    (Phase.BENCHMARKING, ("dispatch", "bench", "harness", "poll")),
    (Phase.WAITING_READY, ("agent", "ready", "probe", "readiness")),
    (Phase.LAUNCHING, ("launch", "run instance", "runinstance")),
)


def phase_of_state(name: str) -> Phase | None:
    lowered = name.lower()
    for phase, words in _PHASE_WORDS:
        if any(word in lowered for word in words):
            return phase
    return None


@dataclass
class BootProgress:
    index: int
    rig: str = "?"
    boot: int | None = None
    phase: Phase = Phase.QUEUED
    state: str = ""
    instance_id: str = ""
    since: float = field(default_factory=time.monotonic)
    started: float = field(default_factory=time.monotonic)
    error: str = ""
    finished: bool = False

    def move(self, phase: Phase) -> None:
        self.phase = phase


def _json(text: str | None) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _instance_id(payload: Any) -> str:
    if isinstance(payload, Mapping):
        instance = payload.get("instance")
        if isinstance(instance, Mapping) and instance.get("instance_id"):
            return str(instance["instance_id"])
    return ""


class SweepProgress:
    """Folds history events (in any batches, repeated or out of order) into per-boot progress.

    Each feed refolds every event known so far in id order: the executor appends events from
    several threads, so a read can miss an event that a later read shows with a smaller id.
    """

    def __init__(self) -> None:
        self._events: dict[int, Mapping[str, Any]] = {}
        self._first_seen: dict[tuple[int, Phase], float] = {}
        self._reset()

    def _reset(self) -> None:
        self.boots: dict[int, BootProgress] = {}
        self.sweep_state = "starting"
        self.status = "RUNNING"
        self.error = ""
        self._iteration_of: dict[int, int | None] = {}

    def feed(self, events: Iterable[Mapping[str, Any]]) -> None:
        for event in events:
            self._events[int(event["id"])] = event
        self._reset()
        for event_id in sorted(self._events):
            self._apply(self._events[event_id])
        now = time.monotonic()
        for boot in self.boots.values():
            boot.since = self._first_seen.setdefault((boot.index, boot.phase), now)

    def _iteration(self, event: Mapping[str, Any]) -> int | None:
        if event["type"] == "MapIterationStarted":
            index = int(event["mapIterationStartedEventDetails"]["index"])
            self._iteration_of[int(event["id"])] = index
            return index
        iteration = self._iteration_of.get(int(event.get("previousEventId") or 0))
        self._iteration_of[int(event["id"])] = iteration
        return iteration

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind = str(event["type"])
        index = self._iteration(event)
        if kind.startswith(("Execution", "MapState")):
            index = None  # they may chain back through an iteration, but belong to the sweep
            self._iteration_of[int(event["id"])] = None
        if index is None:
            self._apply_sweep(kind, event)
            return
        boot = self.boots.setdefault(index, BootProgress(index))
        if kind.endswith("StateEntered"):
            details = event["stateEnteredEventDetails"]
            payload = _json(details.get("input"))
            if isinstance(payload, Mapping):
                if boot.rig == "?" and "rig" in payload:
                    boot.rig = str(payload["rig"])
                if boot.boot is None and isinstance(payload.get("boot"), int):
                    boot.boot = payload["boot"]
                boot.instance_id = _instance_id(payload) or boot.instance_id
                boot.error = _caught(payload) or boot.error
            boot.state = str(details["name"])
            phase = phase_of_state(boot.state)
            if phase is not None and not boot.finished:
                boot.move(phase)
        elif kind.endswith("StateExited"):
            payload = _json(event["stateExitedEventDetails"].get("output"))
            boot.instance_id = _instance_id(payload) or boot.instance_id
            if isinstance(payload, Mapping) and payload.get("outcome") == "failed":
                boot.error = str(payload.get("cause") or payload.get("error") or "failed")
        elif kind.endswith("Failed") and kind != "MapIterationFailed":
            cause = _details(event).get("cause") or _details(event).get("error") or ""
            boot.error = _short_cause(str(cause)) or boot.error
        elif kind in ("MapIterationSucceeded", "MapIterationFailed", "MapIterationAborted"):
            boot.finished = True
            succeeded = kind == "MapIterationSucceeded" and not boot.error
            boot.move(Phase.TERMINATED if succeeded else Phase.FAILED)

    def _apply_sweep(self, kind: str, event: Mapping[str, Any]) -> None:
        if kind.endswith("StateEntered"):
            self.sweep_state = str(event["stateEnteredEventDetails"]["name"])
        elif kind in (
            "ExecutionSucceeded",
            "ExecutionFailed",
            "ExecutionAborted",
            "ExecutionTimedOut",
        ):
            self.status = kind.removeprefix("Execution").upper()
            details = _details(event)
            if kind != "ExecutionSucceeded":
                self.error = _short_cause(str(details.get("cause") or details.get("error") or ""))

    def table(self, title: str = "") -> Table:
        table = Table(title=title or None, title_justify="left", expand=False)
        for column in ("rig", "boot", "instance", "phase", "for", "state / detail"):
            table.add_column(column)
        now = time.monotonic()
        for boot in sorted(self.boots.values(), key=lambda b: (b.rig, b.boot or 0, b.index)):
            style = {Phase.TERMINATED: "green", Phase.FAILED: "red"}.get(boot.phase, "")
            detail = boot.error if boot.error else boot.state
            table.add_row(
                boot.rig,
                "" if boot.boot is None else str(boot.boot),
                boot.instance_id,
                Text(str(boot.phase), style=style),
                "" if boot.finished else f"{now - boot.since:4.0f} s",
                Text(detail[:100], style="red" if boot.error else "dim"),
            )
        caption = f"sweep: {self.sweep_state} ({self.status.lower()})"
        if self.error:
            caption += f": {self.error}"
        table.caption = caption
        table.caption_justify = "left"
        return table


def _caught(payload: Mapping[str, Any]) -> str:
    """The cause of an error a Catch put into the state ({"Error": ..., "Cause": ...})."""
    for value in payload.values():
        if isinstance(value, Mapping) and "Error" in value and "Cause" in value:
            return _short_cause(str(value["Cause"])) or str(value["Error"])
    return ""


def _details(event: Mapping[str, Any]) -> Mapping[str, Any]:
    for key, value in event.items():
        if key.endswith("EventDetails") and isinstance(value, Mapping):
            return value
    return {}


def _short_cause(cause: str) -> str:
    """Lambda failures carry a JSON cause with errorMessage; show only the message."""
    parsed = _json(cause)
    if isinstance(parsed, Mapping) and parsed.get("errorMessage"):
        return str(parsed["errorMessage"])
    return cause.strip()
