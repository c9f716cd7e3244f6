"""A bearer token in front of `rigbench mcp --http`: required when the server listens beyond
loopback (other machines can reach it), or on loopback with --require-token (other users of
this machine can). The token comes from RIGBENCH_MCP_TOKEN, or is made at start and printed
once on stderr for the client's configuration."""

from __future__ import annotations

import hmac
import json
import os
import secrets
from collections.abc import Mapping

from starlette.types import ASGIApp, Receive, Scope, Send

TOKEN_ENV = "RIGBENCH_MCP_TOKEN"
MIN_TOKEN_CHARS = 32
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


class TokenError(ValueError):
    """RIGBENCH_MCP_TOKEN is set but too short to be a secret."""


def needs_token(host: str, require_token: bool) -> bool:
    return require_token or host not in LOOPBACK


def bearer_token(env: Mapping[str, str] | None = None) -> tuple[str, bool]:
    """(the token, whether it was made here) from RIGBENCH_MCP_TOKEN, else a fresh one."""
    given = (os.environ if env is None else env).get(TOKEN_ENV, "")
    if not given:
        return secrets.token_urlsafe(32), True
    if len(given) < MIN_TOKEN_CHARS:
        raise TokenError(
            f"{TOKEN_ENV} has {len(given)} characters; a bearer token needs at least "
            f"{MIN_TOKEN_CHARS} (unset it and one is made for you)"
        )
    return given, False


class BearerAuth:
    """Refuses (401, `WWW-Authenticate: Bearer`) every HTTP request whose Authorization is not
    `Bearer <token>`, compared in constant time; lifespan events pass through."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers", [])).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                await _unauthorized(send)
                return
        await self.app(scope, receive, send)


async def _unauthorized(send: Send) -> None:
    body = json.dumps(
        {"error": "unauthorized", "message": f"send Authorization: Bearer <{TOKEN_ENV}>"}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="rigbench-mcp"'),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
