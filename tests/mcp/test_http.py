"""`rigbench mcp --local --http PORT`: streamable HTTP on loopback, driven by the SDK's
client over a real socket; SIGTERM stops it cleanly (the stack closed, nothing left)."""

import signal
import socket
import subprocess
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.local.conftest import processes_under, wait_for
from tests.mcp.conftest import TOOLS, ok, refused
from tests.mcp.test_stdio import server_params


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def use(url: str) -> None:
    async with Client(url) as client:
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        assert (await ok(client, "list_sweeps"))["sweeps"] == []
        message = await refused(
            client, "start_sweep", {"rigs": ["torch"], "model": "m", "budget_usd": 9}
        )
        assert "ceiling of 1.5 USD" in message
        assert (await ok(client, "check_quotas", {}))["spot"]["quota_vcpus"] == 8


@pytest.mark.slow
def test_http_server_on_loopback_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    params = server_params(tmp_path / "home")
    port = free_port()
    log = tmp_path / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [params.command, *params.args, "--http", str(port)],
            env=params.env, cwd=params.cwd, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_for(lambda: listening(port) or server.poll() is not None, 180, "the server")
        assert server.poll() is None, log.read_text()
        anyio.run(use, f"http://127.0.0.1:{port}/mcp")
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=60)
    assert code == 0, log.read_text()
    assert "stack closed" in log.read_text()
    time.sleep(0.5)
    assert processes_under(tmp_path) == []
