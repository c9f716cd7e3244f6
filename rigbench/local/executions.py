"""Executions saved to disk: moto's Step Functions state lives in the process that ran the
sweep, so each execution's description and history are written when a local session ends,
for `rigbench status --local` in a later process."""

import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

EXECUTIONS_DIR = "executions"
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")


class SavedExecution(BaseModel):
    described: dict[str, Any]
    events: list[dict[str, Any]]


def _path(root: Path, name: str) -> Path:
    return root / EXECUTIONS_DIR / f"{_SAFE_NAME.sub('_', name)}.json"


def save(root: Path, described: dict[str, Any], events: list[dict[str, Any]]) -> Path:
    path = _path(root, str(described["name"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    body = SavedExecution(described=described, events=events).model_dump_json()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(body)
    tmp.replace(path)
    return path


def load(root: Path, name: str) -> SavedExecution | None:
    path = _path(root, name)
    if not path.is_file():
        return None
    return SavedExecution.model_validate_json(path.read_text())


def load_all(root: Path) -> list[SavedExecution]:
    folder = root / EXECUTIONS_DIR
    if not folder.is_dir():
        return []
    return [SavedExecution.model_validate_json(p.read_text()) for p in folder.glob("*.json")]


def _iso(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")


def plain(value: Any) -> Any:
    """boto3's answer (datetimes inside) as JSON values."""
    return json.loads(json.dumps(value, default=_iso))


STOPPED_ERROR = "SessionStopped"


def as_stopped(saved: SavedExecution, cause: str) -> SavedExecution:
    """The record of an execution this session stopped as it ended: ABORTED with the session's
    reason. moto's parser, stopped inside a Map, ends the execution FAILED with its own
    AttributeError (a parser bug); what happened is that we stopped it, and the record says so."""
    events = [
        e for e in saved.events if e.get("type") not in ("ExecutionFailed", "ExecutionAborted")
    ]
    last = events[-1] if events else {}
    aborted = {
        "type": "ExecutionAborted",
        "id": int(last.get("id") or 0) + 1,
        "previousEventId": int(last.get("id") or 0),
        "timestamp": saved.described.get("stopDate") or last.get("timestamp"),
        "executionAbortedEventDetails": {"error": STOPPED_ERROR, "cause": cause},
    }
    described = {**saved.described, "status": "ABORTED", "error": STOPPED_ERROR, "cause": cause}
    return SavedExecution(described=described, events=[*events, aborted])
