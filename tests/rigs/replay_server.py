"""A real HTTP server on loopback that replays recorded vLLM responses (see fixtures/vllm)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.rigs.rig_process import free_port

FIXTURES = Path(__file__).parent / "fixtures" / "vllm"

# scenario -> (health status, completion fixture, completion status)
SCENARIOS = {
    "ready": (200, "completion.json", 200),
    "engine_dead_old_health": (200, "engine_dead.json", 500),  # /health lied in old vLLM
    "engine_dead": (503, "engine_dead.json", 500),
    "empty_text": (200, "completion_empty.json", 200),
}


class Replay:
    def __init__(self) -> None:
        self.scenario = "ready"
        self.requests: list[dict[str, Any]] = []

    def app(self) -> Starlette:
        async def health(request: Request) -> Response:
            return Response(status_code=SCENARIOS[self.scenario][0])

        async def models(request: Request) -> Response:
            return Response((FIXTURES / "models.json").read_bytes(), media_type="application/json")

        async def completions(request: Request) -> Response:
            body = await request.json()
            self.requests.append(body)
            _, fixture, status = SCENARIOS[self.scenario]
            if body.get("stream"):
                return Response(
                    (FIXTURES / "completion_stream.txt").read_bytes(),
                    media_type="text/event-stream",
                )
            return JSONResponse(json.loads((FIXTURES / fixture).read_text()), status_code=status)

        return Starlette(
            routes=[
                Route("/health", health),
                Route("/v1/models", models),
                Route("/v1/completions", completions, methods=["POST"]),
            ]
        )


@contextmanager
def replay_server() -> Iterator[tuple[str, Replay]]:
    replay = Replay()
    port = free_port()
    config = uvicorn.Config(replay.app(), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise TimeoutError("replay server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", replay
    finally:
        server.should_exit = True
        thread.join(timeout=10)
