"""What a new user trips on first, each a one-line error or a fix: the CLI in-process with
typer's runner (the emulation starts only where a command needs the local stack)."""

import io
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

# The handlers' logger binds its stream when first imported: here, not inside a runner's
# captured (and then closed) stdout.
import functions.observability  # noqa: F401
from analysis.boot_values import values_from_reports
from analysis.compare import compare
from rigbench import version
from rigbench.cli import app
from rigbench.cloud import render_results
from rigbench.local import executions
from rigbench.progress import PhaseLines, sweep_table
from rigbench.report.terminal import render_text
from rigbench.stack import ResultRow, SweepProgress
from rigbench.stack.models import BootProgress, Phase

runner = CliRunner()


def invoke(*args: str, columns: int = 200) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": str(columns)})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


@pytest.fixture
def no_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No AWS credentials anywhere boto3 looks."""
    import os

    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def one_line_error(output: str) -> str:
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output
    return lines[0]


def test_version() -> None:
    code, output = invoke("--version")
    assert code == 0
    assert output == f"rigbench {version()}\n"
    assert version().startswith("0.")


@pytest.mark.slow
def test_the_installed_rigbench_command_runs() -> None:
    """The console script (pyproject's [project.scripts]) as a new process: its smoke test."""
    command = Path(sys.executable).with_name("rigbench")
    done = subprocess.run([command, "--version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"rigbench {version()}\n"


def test_help_reflows_and_tags_no_flag_with_a_type() -> None:
    code, output = invoke("run", "--help")
    assert code == 0
    assert "<bool>" not in output
    # Paragraphs reflow to the width: the docstring's own line breaks are gone.
    assert "(--local: on this\n" not in output
    assert "(--local: on this machine; with no AWS credentials" in " ".join(output.split())
    code, output = invoke("reap", "--help")
    assert "reconcile\n" not in output
    assert "<bool>" not in output


def test_rig_serve_host_is_described() -> None:
    code, output = invoke("rig", "serve", "--help")
    assert code == 0
    flat = " ".join(output.split())
    assert "127.0.0.1 (this machine only, as on an instance" in flat
    assert "0.0.0.0 (every interface)" in flat
    assert "[default: 127.0.0.1]" in flat


def test_rig_serve_an_unknown_random_model_is_one_line() -> None:
    code, output = invoke("rig", "serve", "torch", "--model", "random:nope", "--port", "1")
    assert code == 2
    line = one_line_error(output)
    assert line == "error: unknown random model random:'nope'; known: random:e2b, random:tiny"


def test_run_concurrency_names_the_flag(no_aws: None, tmp_path: Path) -> None:
    code, output = invoke(
        "run", "--local", "--home", str(tmp_path / "home"), "--rig", "torch",
        "--model", "random:tiny", "--budget", "1", "--concurrency", "1,x",
    )  # fmt: skip
    assert code == 2
    assert one_line_error(output) == "--concurrency: 'x' is not a whole number (give e.g. 1,8)"
    assert not (tmp_path / "home").exists()


def test_report_out_in_a_missing_directory_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "nonexistent" / "dir" / "x.html"
    code, output = invoke("report", "some-sweep", "--local", "--out", str(out))
    assert code == 2
    line = one_line_error(output)
    assert line == f"error: --out {out}: no directory {out.parent} (create it first)"
    assert not out.parent.exists()


def test_deploy_without_credentials_refuses_and_uploads_nothing(
    no_aws: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, output = invoke("deploy", "--bundle-only")
    assert code == 2
    line = one_line_error(output)
    assert line.startswith("deploy needs AWS credentials and none were found")
    assert "nothing deployed or uploaded" in line
    assert not (tmp_path / ".rigbench").exists()  # no emulation was started in its place


def test_bake_takes_stack_like_every_command(no_aws: None) -> None:
    code, output = invoke("bake", "vllm", "--stack", "other")
    assert code == 2
    assert one_line_error(output).startswith("bake needs AWS credentials")
    code, output = invoke("bake", "vllm", "--stack-name", "other")
    assert code == 2
    assert "No such option: --stack-name" in output


@pytest.mark.slow
def test_reap_with_nothing_to_reap_says_so_and_status_ids_stay_whole(
    no_aws: None, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    long_id = "nightly-torch-vs-jax-random-tiny-2026-12-03-000000"
    start = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    executions.save(
        home,
        {
            "name": long_id,
            "executionArn": f"arn:aws:states:us-east-1:123456789012:execution:sm:{long_id}",
            "status": "SUCCEEDED",
            "startDate": start.isoformat(),
            "stopDate": (start + timedelta(minutes=3)).isoformat(),
        },
        [],
    )
    code, output = invoke("reap", "--local", "--home", str(home))
    assert code == 0, output
    assert "nothing to terminate: no instance past its deadline or orphaned" in output
    assert "sweep: \n" not in output
    code, output = invoke("status", "--local", "--home", str(home), columns=80)
    assert code == 0, output
    assert long_id in output  # whole on one line: it can be copied
    assert max(len(line) for line in output.splitlines()) <= 80


def progress(*phases: Phase, finished: int = 0) -> SweepProgress:
    return SweepProgress(
        sweep_id="s",
        execution_arn="arn",
        boots=[
            BootProgress(index=i, rig="torch", boot=i + 1, phase=p, finished=i < finished)
            for i, p in enumerate(phases)
        ],
    )


def test_piped_progress_is_a_line_per_change() -> None:
    out = io.StringIO()
    lines = PhaseLines(Console(file=out, width=200))
    lines(progress(Phase.LAUNCHING))
    lines(progress(Phase.LAUNCHING))  # nothing changed: nothing printed
    lines(progress(Phase.TERMINATED, Phase.LAUNCHING, finished=1))
    printed = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]
    assert printed == [
        "sweep s: starting (running)",
        "torch boot 1: launching",
        "torch boot 1: terminated",
        "torch boot 2: launching",
    ]


def test_terminal_progress_shows_queued_boots_and_an_estimate() -> None:
    began = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    now = began + timedelta(minutes=4)
    table = sweep_table(
        progress(Phase.TERMINATED, Phase.BENCHMARKING, finished=1),
        now=now, expected_boots=4, started_at=began,
    )  # fmt: skip
    caption = str(table.caption)
    assert "2 of 4 boots queued" in caption
    # 4 min for one finished boot, 3 boots to go: about 12 min, said to be an estimate.
    assert "about 12 min left (estimate from 1 finished boot)" in caption


def test_results_table_in_the_comparison_labels_with_units() -> None:
    stat = {"p50": 0, "p90": 0, "p99": 0, "mean": 0}
    rows = [
        ResultRow(
            sweep_id="s", row_key="torch#01#c00001", rig="torch", boot=1, model="random:tiny",
            instance_type="g5g.2xlarge", cell="c00001", started_at="2026-12-03T00:00:00+00:00",
            metrics={"concurrency": 1, "output_tok_s": 12, "ttft_ms": stat, "itl_ms": stat,
                     "tpot_ms": stat, "e2e_ms": {**stat, "p50": 8.5}},
        )
    ]  # fmt: skip
    out = io.StringIO()
    Console(file=out, width=200).print(render_results(rows, "table"))
    text = out.getvalue()
    assert "c=1" in text
    assert "c00001" not in text
    for header in ("output tok/s", "TTFT p50 ms", "ITL p50 ms", "TPOT p50 ms", "E2E p50 ms"):
        assert header in text
    data = next(line for line in text.splitlines() if "torch" in line)
    assert "12.0" in data
    assert "8.5" in data
    assert " 0 " not in data  # every figure with its decimal


def test_one_boot_of_one_rig_claims_no_interval_and_no_baseline() -> None:
    stat = {"p50": 8.5, "p90": 9.0, "p99": 9.5, "mean": 8.6}
    cell = {
        "concurrency": 1, "requests_ok": 4, "requests_failed": 0, "ttft_ms": stat,
        "itl_ms": stat, "tpot_ms": stat, "e2e_ms": stat, "output_tok_s": 40.0,
    }  # fmt: skip
    text = render_text(compare(values_from_reports({"torch": [{"cells": [cell]}]})))
    assert "median of 1 boots" not in text
    assert "[8.50, 8.50]" not in text
    assert "baseline" not in text
    assert "rigbench comparison (one rig: torch)" in text
    assert "one boot per rig" in text
    assert "8.50" in text
