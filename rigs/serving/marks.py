"""When this rig process reached each step of its start: wall-clock (epoch) seconds by name.

The rig's own record of its boot, read at GET /boot: the orchestrator turns it into the boot's
phases (seconds since launch), so ready is when the rig itself first completed a real
generation, not when a poll happened to notice. One rig process serves one engine, so the
record is process-wide; the app starts it afresh when it begins loading.

Names: `loading` (the app began loading), `model_on_disk` (the checkpoint resolved to local
files), `weights_loaded` (on the device), `compiled` (every program built and warm) and
`ready` (the warm-up generation completed).
"""

from __future__ import annotations

import threading
import time

_lock = threading.Lock()
_marks: dict[str, float] = {}


def start() -> None:
    """A fresh record, beginning with `loading` now."""
    with _lock:
        _marks.clear()
        _marks["loading"] = time.time()


def mark(name: str) -> None:
    """`name` reached now (a later mark of the same name replaces it)."""
    with _lock:
        _marks[name] = time.time()


def snapshot() -> dict[str, float]:
    with _lock:
        return dict(_marks)
