"""The instance's install status file, written by the user data and read by readiness checks.

The bootstrap writes `{"phase": ..., "step": ..., "error": ..., "updated": <epoch>, "since":
{phase: <epoch it was first entered>}}` at each phase, so a failed install is seen at once
instead of waiting out the readiness deadline, and the boot's phases can be timed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

STATUS_FILE = Path("/var/lib/rigbench/status.json")

Phase = Literal[
    "booting",
    "checking_gpu",
    "fetching_bundle",
    "fetching_token",
    "installing",
    "starting",
    "serving",
    "failed",
]
PHASES: tuple[Phase, ...] = Phase.__args__  # type: ignore[attr-defined]


class InstallStatus(BaseModel):
    phase: Phase
    step: str | None = None
    error: str | None = None
    updated: float
    since: dict[str, float] = {}  # when each phase was first entered (absent in older files)


def read_status(path: Path = STATUS_FILE) -> InstallStatus | None:
    """The status, None if none was written yet; an unreadable file reads as a failure."""
    try:
        raw = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return InstallStatus.model_validate(json.loads(raw))
    except (json.JSONDecodeError, ValidationError) as err:
        return InstallStatus(
            phase="failed", error=f"unreadable status file {path}: {err}", updated=0
        )
