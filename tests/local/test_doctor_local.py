"""`rigbench doctor --local`: the same checks, on the embedded emulation."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rigbench.cli import app

pytestmark = pytest.mark.slow


def test_doctor_local_checks_the_emulated_stack(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["doctor", "--local", "--home", str(tmp_path / "home")], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "rigbench doctor: the embedded emulation (local mode)"
    text = " ".join(result.output.split())
    for check in ("credentials", "stack", "quota", "spot price", "bundle", "images"):
        assert f"ok {check}" in text, result.output
    # The emulated stack has no token secret: only models without a licence gate load.
    assert "warn token no Hugging Face token secret" in text
    assert "ready:" in text
