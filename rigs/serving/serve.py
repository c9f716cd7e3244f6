"""Run the shared app under uvicorn; exit non-zero if the engine cannot load or warm up.

It listens on 127.0.0.1 unless told otherwise: the harness reaches a rig on the same machine.

Exiting (rather than serving 503 forever) lets a supervisor such as systemd restart the rig
and lets the bootstrap's status file report the failure at once.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import uvicorn

from rigs.serving.app import (
    DEFAULT_MAX_WAITING,
    DEFAULT_REQUEST_TIMEOUT_S,
    Loader,
    build_lazy_app,
)

log = logging.getLogger("rigs.serving")


def serve_options(engine_factory: Loader, args: argparse.Namespace) -> None:
    """`serve` as a rig's server was told on its command line: host, port, the served names
    (as vLLM does, the --model argument itself unless named) and the bounds."""
    serve(
        engine_factory,
        args.host,
        args.port,
        served_model_names=args.served_model_name or [args.model],
        max_waiting=args.max_waiting,
        request_timeout_s=args.request_timeout_s,
    )


def serve(
    engine_factory: Loader,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    served_model_names: Sequence[str] = (),
    log_level: str = "info",
    max_waiting: int = DEFAULT_MAX_WAITING,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
) -> None:
    """Serve until interrupted; `engine_factory` runs in a thread after the socket is up."""
    failure: list[str] = []
    server: uvicorn.Server | None = None

    def on_failure(reason: str) -> None:
        failure.append(reason)
        if server is not None:
            server.should_exit = True

    app = build_lazy_app(
        engine_factory,
        served_model_names=served_model_names,
        on_failure=on_failure,
        max_waiting=max_waiting,
        request_timeout_s=request_timeout_s,
    )
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False)
    server = uvicorn.Server(config)
    server.run()
    if failure:
        log.error("rig failed: %s", failure[0])
        sys.exit(1)
