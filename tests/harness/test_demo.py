import json
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rigbench.cli import app

pytestmark = pytest.mark.slow


def test_demo_benchmarks_the_reference_server_and_stops_it(tmp_path: Path) -> None:
    out = tmp_path / "demo.json"
    result = CliRunner().invoke(app, ["bench-demo", "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert "TTFT p50" in result.stdout
    report = json.loads(out.read_text())
    assert [c["concurrency"] for c in report["cells"]] == [4, 16, 32]
    assert all(c["requests_ok"] == 32 and c["requests_failed"] == 0 for c in report["cells"])
    host, port = report["url"].removeprefix("http://").split(":")
    with pytest.raises(ConnectionRefusedError):  # the demo stopped its server
        socket.create_connection((host, int(port)), timeout=2).close()
