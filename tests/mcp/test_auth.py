"""`rigbench mcp --http` behind a bearer token (rigbench.mcp.auth): the SDK's own streamable
HTTP app answers only requests that carry the token; the token is a secret or is refused."""

from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from mcp.server.mcpserver import MCPServer

from rigbench.mcp.auth import BearerAuth, TokenError, bearer_token, needs_token
from tests import loopback

TOKEN = "t" * 40
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "test", "version": "1"}},
}  # fmt: skip
ACCEPT = {"accept": "application/json, text/event-stream"}


@contextmanager
def _serving(app: BearerAuth) -> Iterator[str]:
    with loopback.serve_in_thread(app) as base:
        yield f"{base}/mcp"


def _post(url: str, headers: dict[str, str]) -> httpx.Response:
    return loopback.post(url, json=INITIALIZE, headers={**ACCEPT, **headers}, timeout=30)


@pytest.mark.slow
def test_only_requests_with_the_token_reach_the_server() -> None:
    server = MCPServer("auth-test")
    # As `rigbench mcp --host 0.0.0.0` builds it (no DNS-rebinding check beyond loopback).
    with _serving(BearerAuth(server.streamable_http_app(host="0.0.0.0"), TOKEN)) as url:
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": TOKEN}):
            refused = _post(url, headers)
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"].startswith("Bearer")
            assert "RIGBENCH_MCP_TOKEN" in refused.json()["message"]
        served = _post(url, {"authorization": f"Bearer {TOKEN}"})
        assert served.status_code == 200, served.text
        assert "auth-test" in served.text


def test_beyond_loopback_or_on_request_a_token_is_needed() -> None:
    assert not needs_token("127.0.0.1", require_token=False)
    assert needs_token("127.0.0.1", require_token=True)
    assert needs_token("0.0.0.0", require_token=False)
    assert needs_token("192.168.1.5", require_token=False)


def test_the_token_is_the_environment_s_or_a_fresh_secret() -> None:
    assert bearer_token({"RIGBENCH_MCP_TOKEN": TOKEN}) == (TOKEN, False)
    made, fresh = bearer_token({})
    assert fresh
    assert len(made) >= 32
    assert bearer_token({})[0] != made
    with pytest.raises(TokenError, match="RIGBENCH_MCP_TOKEN has 6 characters"):
        bearer_token({"RIGBENCH_MCP_TOKEN": "secret"})
