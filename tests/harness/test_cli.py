"""`rigbench bench` as a user runs it: real exit codes, one-line errors. In process (typer's
CliRunner runs the code a new process would, minus its start-up), but for Ctrl-C: a signal to a
real `python -m rigbench` process, the entry point's smoke test."""

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from harness.runner import failed_cells
from harness.schemas import BenchmarkReport
from rigbench.cli import app
from tests.harness.conftest import ROOT, StartServer

runner = CliRunner()


def rigbench(*args: str, env: Mapping[str, str | None] | None = None) -> Result:
    """`rigbench bench ARGS`, in this process; `env` sets (None: unsets) variables meanwhile."""
    return runner.invoke(app, ["bench", *args], env=env, catch_exceptions=False)


def one_error_line(result: Result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rigbench bench: error: ")
    return lines[0]


@pytest.mark.slow
def test_failed_requests_past_the_share_exit_1_after_the_report_is_written(
    reference_server: StartServer, tmp_path: Path
) -> None:
    # Seed 0: the pre-flight request (the server's first) is not one of the injected 500s.
    url = reference_server("--ttft-ms", "20", "--itl-ms", "5", "--error-rate", "0.5")
    out = tmp_path / "run" / "report.json"
    args = ["--url", url, "--model", "reference", "--concurrency", "1,4", "--requests", "6",
            "--warmup", "2", "--output-len", "5", "--out", str(out)]  # fmt: skip
    result = rigbench(*args)
    assert result.exit_code == 1, result.stderr
    error = one_error_line(result)
    assert "cells failed" in error
    assert "(first: http_error: HTTP 500: injected failure)" in error  # the server's words
    report = json.loads(out.read_text())
    assert {"cells", "harness_version", "url", "model", "started_at"} <= report.keys()
    assert report["url"] == url
    assert report["model"] == "reference"
    assert [c["concurrency"] for c in report["cells"]] == [1, 4]
    for cell in report["cells"]:
        assert cell["requests_ok"] + cell["requests_failed"] == 6
        assert set(cell["ttft_ms"]) >= {"mean", "p50", "p90", "p99"}
    failed = [c for c in report["cells"] if c["requests_failed"]]
    assert failed
    for cell in failed:
        assert cell["first_failure"] == "http_error: HTTP 500: injected failure"
    records = (tmp_path / "run" / "report.requests.jsonl").read_text().splitlines()
    assert len(records) == 2 + 6 + 6
    assert "TTFT p50" in result.stdout  # the results table
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    failed_rows = [row for row in rows if "│      0 │" not in row]  # the "failed" column
    assert failed_rows
    for row in failed_rows:  # each failed cell's row shows the server's message
        assert "first failure: http_error: HTTP 500: injected failure" in row
    # A line per cell as it completed, before the table (piped: plain lines).
    progress = [line for line in result.stdout.splitlines() if line.startswith("cell ")]
    assert [line.split(":")[0] for line in progress] == ["cell 1/2 c=1", "cell 2/2 c=4"]
    assert result.stdout.index("cell 2/2") < result.stdout.index("rigbench bench: reference")

    # The share is the run's to set: with every failure tolerated, only an all-failed cell
    # would fail the run.
    assert report["config"]["max_failed_share"] == 0.01
    tolerant = BenchmarkReport.model_validate(report)
    tolerant.config.max_failed_share = 1.0
    assert failed_cells(tolerant) == []


def test_unreachable_url_fails_fast_with_one_line() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = rigbench("--url", f"http://127.0.0.1:{port}", "--model", "m")
    assert result.exit_code == 1
    assert "cannot reach" in one_error_line(result)


def test_an_unwritable_out_is_refused_before_any_request(tmp_path: Path) -> None:
    with socket.socket() as s:  # nobody listens: had the run started, the error would be 1
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "report.json"  # its folder would have to be a file
    result = rigbench("--url", f"http://127.0.0.1:{port}", "--model", "m", "--out", str(out))
    assert result.exit_code == 2
    assert "cannot write in" in one_error_line(result)


@pytest.mark.slow
def test_server_that_never_answers_fails_within_10_s() -> None:
    with socket.socket() as s:  # accepts connections (backlog) but never answers
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        start = time.monotonic()
        result = rigbench("--url", f"http://127.0.0.1:{s.getsockname()[1]}", "--model", "m")
        elapsed = time.monotonic() - start
    assert result.exit_code == 1
    assert "no answer within 10 s" in one_error_line(result)
    assert elapsed < 20  # 10 s, and room to spare on a loaded box


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--capacity", "concurrency"], "a capacity search needs an slo"),
        (["--capacity", "users", "--slo", "ttft_ms=5"], "--capacity must be concurrency or rate"),
        (["--arrival", "bursty"], "--arrival 'bursty': give poisson, constant or gamma:SHAPE"),
        (["--arrival", "gamma:0"], "--arrival 'gamma:0'"),
        (["--workload", "[1]"], "--workload takes a JSON object"),
        (["--workload", '{"kind": "shared_prefix", "groups": 0}'], "--workload"),
        (["--slo", "ttft_ms=5", "--slo-percentile", "100"], "--slo-percentile must be within"),
        (["--dataset", "no-such-bundled-name"], "--dataset no-such-bundled-name: cannot read"),
        (["--concurrency", "1,-4"], "concurrency"),
        (["--concurrency", "one"], "--concurrency takes comma-separated ints"),
        (["--rate", "0"], "rate"),
        (["--requests", "-1"], "--requests"),
        (["--input-len", "0"], "--input-len"),
        (["--input-len", "abc"], "--input-len"),
        (["--endpoint", "embeddings"], "--endpoint"),
        (["--frobnicate"], "No such option"),
        (["--slo", "x"], "--slo 'x': give NAME=MS pairs"),
        (["--slo", "ttft_ms=-5"], "--slo 'ttft_ms=-5'"),
        (["--header", "nocolon"], "--header 'nocolon': give NAME:VALUE"),
        (["--percentiles", "50,100"], "percentiles must be within (0, 100)"),
        (["--max-failed-share", "2"], "--max-failed-share"),
        (
            ["--dataset", "/nonexistent/prompts.jsonl"],
            "--dataset /nonexistent/prompts.jsonl: cannot read",
        ),
    ],
)
def test_invalid_arguments_exit_2_with_one_line(args: list[str], expected: str) -> None:
    result = rigbench("--url", "http://127.0.0.1:9", "--model", "m", *args)
    assert result.exit_code == 2
    assert expected in one_error_line(result)


def test_missing_url_and_bad_url_are_one_line_errors() -> None:
    assert "--url and --model are required" in one_error_line(rigbench("--model", "m"))
    result = rigbench("--url", "localhost:8000", "--model", "m")
    assert result.exit_code == 2
    assert "--url" in one_error_line(result)


@pytest.mark.slow
def test_ctrl_c_writes_the_partial_report(reference_server: StartServer, tmp_path: Path) -> None:
    url = reference_server("--ttft-ms", "20", "--itl-ms", "20")
    out = tmp_path / "report.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rigbench", "bench", "--url", url, "--model", "reference",
         "--concurrency", "2", "--requests", "200", "--warmup", "1", "--output-len", "10",
         "--out", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not out.exists() and time.monotonic() < deadline:  # written after warm-up
            time.sleep(0.05)
        time.sleep(1.0)  # well into the cell: about 8 requests done
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    report = json.loads(out.read_text())
    assert report["interrupted"] is True
    cell = report["cells"][-1]
    assert cell["complete"] is False
    assert 0 < cell["requests_ok"] < 200
    assert cell["requests_failed"] == 0
    assert cell["requests_interrupted"] == 2  # the two in flight, not counted as failures
    records = (tmp_path / "report.requests.jsonl").read_text().splitlines()
    assert len(records) == 1 + cell["requests_ok"] + 2
