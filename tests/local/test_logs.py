"""`rigbench logs --local`: a failed boot's rig log, read from its local instance's folder
after the sweep's process has ended."""

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rigbench.cli import app
from rigbench.local.emulated import EmulatedAccount
from rigbench.local.home import LocalHome
from rigbench.stack import parse_sweep
from rigbench.stack.local import LocalStack
from rigs.bootstrap.user_data import BootstrapSpec
from tests.local.conftest import sweep_input

pytestmark = pytest.mark.slow

LAST_WORDS = "rig torch: cannot load random:tiny: out of memory (a planted failure)"


def dying_rig(spec: BootstrapSpec, port: int) -> list[str]:
    """A rig that writes to its log and exits before it serves, as a failed load does."""
    script = f"print('loading'); print({LAST_WORDS!r}, flush=True); raise SystemExit(3)"
    return [sys.executable, "-c", script]


def test_logs_shows_a_failed_boot_s_rig_log(home: LocalHome, tmp_path: Path) -> None:
    body = sweep_input(deadlines={"ready_s": 120, "bench_s": 60, "instance_s": 600})
    with LocalStack(home, EmulatedAccount.from_env(quota_vcpus=8), rig_command=dying_rig) as stack:
        stack.follow_poll_s = 0.5
        started = stack.start_sweep(parse_sweep(body))
        progress = stack.follow_sweep(started.execution_arn)
    assert progress.status == "FAILED"
    assert progress.boots[0].error, progress

    runner = CliRunner()
    args = ["logs", started.sweep_id, "--local", "--home", str(home.root)]
    shown = runner.invoke(app, args, catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert "torch boot 1" in text
    assert "rig.log" in text
    assert LAST_WORDS in shown.output
    assert "status.json" in text  # the local bootstrap's part: failed, with the rig's lines
    narrowed = runner.invoke(app, [*args, "--boot", "2"], catch_exceptions=False)
    assert narrowed.exit_code == 1
    assert "no logs of sweep" in narrowed.output
