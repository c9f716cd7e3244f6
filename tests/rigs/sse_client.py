"""Read an OpenAI SSE stream into its JSON events (test helper)."""

from __future__ import annotations

import json
from typing import Any

from tests import loopback


def stream_events(base: str, path: str, body: dict[str, Any]) -> tuple[list[dict[str, Any]], bool]:
    """All `data:` JSON payloads of a streamed request, and whether `[DONE]` ended it."""
    events: list[dict[str, Any]] = []
    done = False
    with loopback.stream("POST", f"{base}{path}", json=body, timeout=60) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if not line:
                continue
            assert line.startswith("data: "), line
            assert not done, "data after [DONE]"
            payload = line.removeprefix("data: ")
            if payload == "[DONE]":
                done = True
            else:
                events.append(json.loads(payload))
    return events, done
