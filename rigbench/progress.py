"""A sweep's progress per rig and boot, read from its Step Functions execution history.

Each state inside the Map receives the boot's state (rig, boot, instance, ...) as input, so
an event is attributed to its rig and boot by that input, on AWS and in the emulation alike.
"""

import json
from dataclasses import dataclass
from typing import Any

from rich.table import Table

# The boot states of statemachine/sweep.asl.json, by the phase they belong to.
PHASES = {
    "Launch": "launching",
    "WaitForAgent": "waiting ready",
    "CheckAgent": "waiting ready",
    "AgentOnline?": "waiting ready",
    "WaitForRig": "waiting ready",
    "CheckReady": "waiting ready",
    "RigReady?": "waiting ready",
    "RunHarness": "benchmarking",
    "WaitForHarness": "benchmarking",
    "PollHarness": "benchmarking",
    "HarnessDone?": "benchmarking",
    "StoreResults": "storing",
    "Finish": "terminating",
    "FinishFailed": "terminate failed",
}


@dataclass
class BootRow:
    rig: str
    boot: int
    phase: str = "queued"
    state: str = ""
    instance_id: str = ""
    outcome: str = ""
    error: str = ""
    cost_usd: float | None = None


def _json(text: str | None) -> Any:
    try:
        return json.loads(text or "")
    except ValueError:
        return None


def boot_progress(events: list[dict[str, Any]]) -> dict[tuple[str, int], BootRow]:
    rows: dict[tuple[str, int], BootRow] = {}
    for event in events:
        entered = event.get("stateEnteredEventDetails")
        exited = event.get("stateExitedEventDetails")
        details = entered or exited
        if not details or details.get("name") not in PHASES:
            continue
        doc = _json(details.get("input") if entered else details.get("output"))
        if not isinstance(doc, dict) or "rig" not in doc or "boot" not in doc:
            continue
        row = rows.setdefault((doc["rig"], int(doc["boot"])), BootRow(doc["rig"], int(doc["boot"])))
        if entered:
            row.phase, row.state = PHASES[details["name"]], details["name"]
            instance = doc.get("instance")
            if isinstance(instance, dict):
                row.instance_id = instance.get("instance_id", row.instance_id)
        elif details["name"] in ("Finish", "FinishFailed") and "outcome" in doc:
            row.phase, row.outcome = "terminated", doc["outcome"]
            row.instance_id = doc.get("instance_id") or row.instance_id
            row.error = f"{doc.get('error')}: {doc.get('cause')}" if doc.get("error") else ""
            row.cost_usd = doc.get("cost_usd")
    return rows


def progress_table(rows: dict[tuple[str, int], BootRow], described: dict[str, Any]) -> Table:
    table = Table(title=f"{described.get('name', '')}  {described.get('status', '')}")
    for column in ("rig", "boot", "phase", "state", "instance", "outcome", "cost $", "error"):
        table.add_column(column)
    for (rig, boot), row in sorted(rows.items()):
        colour = {"succeeded": "green", "failed": "red"}.get(row.outcome, "")
        table.add_row(
            rig, str(boot), row.phase, row.state, row.instance_id,
            f"[{colour}]{row.outcome}[/]" if colour else row.outcome,
            f"{row.cost_usd:.4f}" if row.cost_usd is not None else "", row.error[:120],
        )  # fmt: skip
    return table
