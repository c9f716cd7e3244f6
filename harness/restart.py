"""Restart the rig on its instance and time its warm start (`rigbench restart-rig`).

The instance's own restart command does the restart (`systemctl restart rigbench-rig.service`
on an instance; a local fleet names its own in RIGBENCH_RESTART_COMMAND). The ready time is
the restarted rig's own record (GET /boot: its first real completion), from the moment the
restart was asked for, so polling adds nothing to it. A rig that keeps no such record (no
/boot) gives no warm ready time, and the result says why.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Annotated

import httpx
import typer

from harness.boot_phases import WarmStart, warm_ready_s

RESTART_ENV = "RIGBENCH_RESTART_COMMAND"
DEFAULT_RESTART = "systemctl restart rigbench-rig.service"
POLL_S = 0.5


def _boot_record(client: httpx.Client) -> dict[str, object] | None:
    try:
        response = client.get("/boot")
    except httpx.HTTPError:
        return None  # not listening yet
    if response.status_code == 404:
        raise LookupError("the rig keeps no record of its start (no GET /boot)")
    return dict(response.json()) if response.status_code == 200 else None


def restart_rig(url: str, command: str, timeout_s: float) -> WarmStart:
    """Run `command`, then wait for a rig process started after it to complete its warm-up."""
    requested_at = time.time()
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        output = (done.stderr or done.stdout).strip()[-500:]
        return WarmStart(
            requested_at=requested_at,
            error=f"restart command {command!r} exited {done.returncode}: {output or 'no output'}",
        )
    deadline = requested_at + timeout_s
    with httpx.Client(base_url=url, timeout=10) as client:
        while time.time() < deadline:
            try:
                record = _boot_record(client)
            except LookupError as exc:
                return WarmStart(requested_at=requested_at, error=str(exc))
            raw = record.get("marks") if record else None
            marks = {str(k): float(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
            if marks.get("loading", 0.0) >= requested_at:  # the restarted process
                if record and record.get("phase") == "failed":
                    return WarmStart(
                        requested_at=requested_at, marks=marks, error="the rig failed to start"
                    )
                if "ready" in marks:
                    return WarmStart(
                        requested_at=requested_at,
                        marks=marks,
                        ready_s=warm_ready_s(marks, requested_at),
                    )
            time.sleep(POLL_S)
    return WarmStart(
        requested_at=requested_at, error=f"the restarted rig was not ready within {timeout_s:g} s"
    )


def restart_command(
    url: Annotated[str, typer.Option(help="the rig's base URL, http://HOST:PORT")],
    out: Annotated[Path, typer.Option(help="where the warm start's JSON goes")],
    timeout_s: Annotated[float, typer.Option(min=1, help="the most to wait for ready")] = 600,
) -> None:
    """Restart the rig on this instance and write its warm ready time (exit 1 without one)."""
    command = os.environ.get(RESTART_ENV) or DEFAULT_RESTART
    warm = restart_rig(url, command, timeout_s)
    out.write_text(warm.model_dump_json(indent=2))
    if warm.ready_s is None:
        typer.echo(f"no warm ready time: {warm.error}", err=True)
        raise typer.Exit(1)
    typer.echo(f"warm ready in {warm.ready_s:.1f} s")
