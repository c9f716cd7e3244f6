"""Is a rig ready? Only when it answers a real completion with non-empty text.

`/health` alone is not trusted (a rig once said 200 while every generation failed).
`check_ready` also reads the instance's install status file and the systemd unit, so a
failed install or a crash-looping rig is reported as terminal at once.

    python -m rigs.readiness --base-url http://127.0.0.1:8000 [--status-file F] [--service U]

prints a `ReadyState` as JSON and exits 0 when ready, 3 on a terminal failure, 1 otherwise.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Literal

import httpx
from pydantic import BaseModel

from rigs.bootstrap.status import read_status
from rigs.log_tail import LOG_TAIL_LINES, last_lines

ReadyPhase = Literal["unreachable", "installing", "loading", "unhealthy", "failed", "ready"]
PROBE_PROMPT = "Hello, my name is"


class ReadyState(BaseModel):
    ready: bool
    phase: ReadyPhase
    terminal: bool = False  # waiting longer cannot help
    detail: str = ""
    model: str | None = None
    text: str | None = None


def probe_ready(base_url: str, *, timeout_s: float = 120.0, max_tokens: int = 4) -> ReadyState:
    """Health, then the served model's name, then a greedy completion that must have text."""
    base = base_url.rstrip("/")
    try:
        with httpx.Client(base_url=base, timeout=timeout_s) as client:
            health = client.get("/health")
            if health.status_code != 200:
                return ReadyState(
                    ready=False, phase="loading", detail=f"/health {health.status_code}"
                )
            models = client.get("/v1/models")
            if models.status_code != 200:
                return _unhealthy(f"/v1/models {models.status_code}: {models.text[:300]}")
            data = models.json().get("data") or []
            if not data or not isinstance(data[0].get("id"), str):
                return _unhealthy("/v1/models lists no model")
            model = data[0]["id"]
            completion = client.post(
                "/v1/completions",
                json={
                    "model": model,
                    "prompt": PROBE_PROMPT,
                    "max_tokens": max_tokens,
                    "min_tokens": max_tokens,
                    "ignore_eos": True,
                    "temperature": 0,
                },
            )
    except httpx.TransportError as err:
        return ReadyState(ready=False, phase="unreachable", detail=f"{type(err).__name__}: {err}")
    except ValueError as err:  # a body that is not the JSON it should be
        return _unhealthy(f"bad response: {err}")
    if completion.status_code != 200:
        return _unhealthy(f"completion {completion.status_code}: {completion.text[:300]}")
    try:
        text = completion.json()["choices"][0]["text"]
    except (ValueError, KeyError, IndexError, TypeError) as err:
        return _unhealthy(f"completion body without choices[0].text: {err!r}")
    if not isinstance(text, str) or not text:
        return _unhealthy("completion returned empty text", model=model)
    return ReadyState(ready=True, phase="ready", model=model, text=text, detail="completion ok")


def _unhealthy(detail: str, model: str | None = None) -> ReadyState:
    return ReadyState(ready=False, phase="unhealthy", detail=detail, model=model)


def service_failed(unit: str) -> str | None:
    """Why systemd gave up on `unit` (after its restart limit), with the end of the rig's own
    log from the journal; None while it has not."""
    if shutil.which("systemctl") is None:
        return None
    state = subprocess.run(
        ["systemctl", "is-failed", unit], capture_output=True, text=True, check=False
    ).stdout.strip()
    if state != "failed":
        return None
    journal = subprocess.run(
        ["journalctl", "--unit", unit, "--no-pager", "--output", "cat",
         "--lines", str(LOG_TAIL_LINES)],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    tail = last_lines(journal)
    return f"systemd unit {unit} is failed" + (f"; the end of its log:\n{tail}" if tail else "")


def check_ready(
    base_url: str,
    *,
    status_file: Path | None = None,
    service: str | None = None,
    timeout_s: float = 120.0,
) -> ReadyState:
    if status_file is not None:
        status = read_status(status_file)
        if status is not None and status.phase == "failed":
            return ReadyState(
                ready=False,
                phase="failed",
                terminal=True,
                detail=f"install failed at {status.step or 'unknown step'}: {status.error}",
            )
        if status is None or status.phase != "serving":
            phase = status.phase if status else "not started"
            return ReadyState(ready=False, phase="installing", detail=f"install phase: {phase}")
    if service is not None and (reason := service_failed(service)):
        return ReadyState(ready=False, phase="failed", terminal=True, detail=reason)
    return probe_ready(base_url, timeout_s=timeout_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rigs.readiness", description=__doc__)
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--status-file", type=Path, default=None)
    parser.add_argument("--service", default=None)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    state = check_ready(
        args.base_url, status_file=args.status_file, service=args.service, timeout_s=args.timeout
    )
    print(state.model_dump_json())
    return 0 if state.ready else 3 if state.terminal else 1


if __name__ == "__main__":
    sys.exit(main())
