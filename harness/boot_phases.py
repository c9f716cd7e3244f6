"""A boot's phases: when it reached each step from launch to termination, in seconds since the
instance's launch, and what that start cost.

Each phase comes from the one that saw it happen:
- `launch_requested`: the Launch step, as it called RunInstances (launch itself is EC2's
  LaunchTime, the zero);
- `running`: the instance's first status-file entry (its user data runs once it runs);
- `agent_online`: the poll that first saw the SSM agent online (late by up to one wait);
- `install_done`: the status file's `starting` (installed, the rig's service starting);
- `model_on_disk`, `weights_loaded`, `compiled`, `ready`: the rig's own record
  (rigs.serving.marks); ready is its first real completion, not the poll that noticed it;
- `bench_started`, `bench_ended`: the harness report's own times;
- `terminated`: the instance's billed run time (known after the boot's end).
A phase nobody recorded (a rig without /boot, an older row) is absent, never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

PHASES: tuple[str, ...] = (
    "launch_requested",
    "running",
    "agent_online",
    "install_done",
    "model_on_disk",
    "weights_loaded",
    "compiled",
    "ready",
    "bench_started",
    "bench_ended",
    "terminated",
)
RIG_MARKS: tuple[str, ...] = ("model_on_disk", "weights_loaded", "compiled", "ready")
INSTALL_DONE = "starting"  # the status-file phase entered once the install is done


class WarmStart(BaseModel):
    """One restart of the rig on the same instance after the cells (`restarts_per_boot`)."""

    model_config = ConfigDict(frozen=True)

    requested_at: float  # epoch seconds: the restart was asked for
    marks: dict[str, float] = {}  # the restarted rig's own record (epoch seconds)
    ready_s: float | None = None  # restart requested to the rig's first real completion
    error: str = ""  # why it gave no ready time


def epoch(iso: str | None) -> float | None:
    """An ISO 8601 time (a report's `started_at`) in epoch seconds; None when absent."""
    if not iso:
        return None
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def phases_since_launch(
    launched_at: float,
    *,
    launch_requested: float | None = None,
    install_phases: Mapping[str, float] | None = None,
    agent_online: float | None = None,
    rig_marks: Mapping[str, float] | None = None,
    bench_started: float | None = None,
    bench_ended: float | None = None,
) -> dict[str, float]:
    """Every phase some record holds, as seconds since launch (rounded to ms), in PHASES
    order. Epoch seconds in; absent ones left out."""
    install = dict(install_phases or {})
    rig = dict(rig_marks or {})
    at: dict[str, float | None] = {
        "launch_requested": launch_requested,
        "running": min(install.values()) if install else None,
        "agent_online": agent_online,
        "install_done": install.get(INSTALL_DONE),
        **{name: rig.get(name) for name in RIG_MARKS},
        "bench_started": bench_started,
        "bench_ended": bench_ended,
    }
    return {
        name: round(when - launched_at, 3) for name in PHASES if (when := at.get(name)) is not None
    }


def startup_usd(ready_s: float | None, price_usd_per_hour: float | None) -> float | None:
    """What the instance cost before it served: its seconds from launch to ready at the price
    paid for it."""
    if ready_s is None or price_usd_per_hour is None:
        return None
    return price_usd_per_hour * max(ready_s, 0.0) / 3600


def warm_ready_s(marks: Mapping[str, float], requested_at: float) -> float | None:
    """A restart's ready time: from asking for it to the restarted rig's first completion."""
    ready = marks.get("ready")
    return None if ready is None or ready < requested_at else round(ready - requested_at, 3)


class BootTiming(BaseModel):
    """A boot's phases and what its start cost, as its results rows keep them (`phases` on
    the row, the rest under `timing`); every field optional, so older rows read as empty."""

    model_config = ConfigDict(frozen=True)

    phases: dict[str, float] = {}  # name -> seconds since launch (PHASES order)
    ready_s: float | None = None  # launch to the rig's first real completion
    startup_usd: float | None = None  # the instance's seconds before ready x the price paid
    price_usd_per_hour: float | None = None  # what the instance was charged (price paid)
    price_source: str = ""
    warm_starts: list[WarmStart] = []  # restarts on the same instance (restarts_per_boot)
    warm_ready_s: float | None = None  # the mean of the warm starts' ready times
    warm_cells: list[dict[str, Any]] = []  # the first cell measured again after each restart

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> BootTiming:
        return cls.model_validate({**(row.get("timing") or {}), "phases": row.get("phases") or {}})

    def row_fields(self) -> dict[str, Any]:
        return {
            "phases": self.phases,
            "timing": self.model_dump(mode="json", exclude={"phases"}),
        }


def mean_warm_ready_s(starts: list[WarmStart]) -> float | None:
    found = [w.ready_s for w in starts if w.ready_s is not None]
    return round(sum(found) / len(found), 3) if found else None
