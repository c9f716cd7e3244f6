"""The harness at its edge, with real processes: a client made to read late says which
figures it could not measure, and no client process outlives an interrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import loopback
from tests.harness.conftest import ROOT, StartServer

pytestmark = pytest.mark.slow


def bench_process(url: str, out: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "rigbench", "bench", "--url", url, "--model", "reference",
         "--out", str(out), *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


def session_members(session: int) -> set[int]:
    """Live processes (not zombies) whose session id is `session`, from /proc."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == session and fields[0] != "Z":
            found.add(int(entry.name))
    return found


def test_a_client_stopped_between_reads_marks_its_figures_invalid(
    reference_server: StartServer, tmp_path: Path
) -> None:
    # The client process is frozen 40 ms in every 50 (SIGSTOP/SIGCONT): tokens due every
    # 5 ms pile up in its sockets and are read together. It must say so, not print numbers.
    url = reference_server("--ttft-ms", "20", "--itl-ms", "5")
    out = tmp_path / "report.json"
    proc = bench_process(url, out, "--concurrency", "4", "--requests", "8", "--warmup", "0",
                         "--output-len", "64")  # fmt: skip
    try:
        # Frozen from the start (imports included): a run that ends within a fixed start-up
        # sleep would never be frozen at all.
        while proc.poll() is None:
            proc.send_signal(signal.SIGSTOP)
            time.sleep(0.04)
            proc.send_signal(signal.SIGCONT)
            time.sleep(0.01)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    cell = json.loads(out.read_text())["cells"][0]
    assert cell["requests_ok"] == 8
    assert cell["shared_read_fraction"] > 0.5
    assert cell["itl_validity"]["p50"] is False
    # The errors the harness predicts are the errors it made, against what the server kept
    # (its own record of arrival to first token, and of the gaps between its writes).
    kept = loopback.get(f"{url}/stats").json()
    for metric, true in (("itl", kept["observed_chunk_gap_ms"]["p50"]),
                         ("ttft", kept["observed_ttft_ms"]["p50"])):  # fmt: skip
        predicted = cell[f"{metric}_validity"]["predicted_error_ms"]["mean"]
        assert cell[f"{metric}_ms"]["mean"] - true == pytest.approx(predicted, rel=0.15, abs=0.5)
    assert cell["ttft_validity"]["p50"] is False
    assert "invalid" in stdout  # in place of the figures (the table may wrap the reason)
    assert "WARNING: the client was past its own ceiling" in stdout.replace("\n", " ")


def test_a_client_within_its_edge_reports_the_load_it_reached(
    reference_server: StartServer, tmp_path: Path
) -> None:
    url = reference_server("--ttft-ms", "20", "--itl-ms", "5")
    out = tmp_path / "report.json"
    proc = bench_process(url, out, "--concurrency", "4", "--requests", "16", "--warmup", "4",
                         "--output-len", "32")  # fmt: skip
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    cell = json.loads(out.read_text())["cells"][0]
    # Four streams, each idle only between a response and its next request.
    assert 3.0 <= cell["achieved_concurrency"] <= 4.0
    assert cell["achieved_request_rate"] == pytest.approx(16 / cell["duration_s"])
    assert (cell["load_shortfall"] is None) == (cell["achieved_concurrency"] >= 0.95 * 4)
    assert cell["delivery"] == "streamed"
    assert "in flight" in stdout


@pytest.mark.parametrize(
    ("workers", "how"),
    [("1", signal.SIGINT), ("2", signal.SIGINT), ("2", signal.SIGKILL)],
    ids=["one-process-ctrl-c", "workers-ctrl-c", "workers-parent-killed"],
)
def test_no_client_process_outlives_an_interrupted_run(
    reference_server: StartServer, tmp_path: Path, workers: str, how: signal.Signals
) -> None:
    url = reference_server("--ttft-ms", "20", "--itl-ms", "20")
    out = tmp_path / "report.json"
    proc = bench_process(url, out, "--concurrency", "4", "--requests", "400", "--warmup", "1",
                         "--output-len", "10", "--workers", workers)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:  # written after warm-up
            time.sleep(0.05)
        assert out.exists(), "the run never finished its warm-up"
        time.sleep(2.0)  # into the cell: the workers (if any) are sending
        members = session_members(proc.pid)
        # the parent, its workers and (with workers) multiprocessing's resource tracker
        assert len(members) >= 1 + (int(workers) if workers != "1" else 0), members
        if how == signal.SIGINT:
            os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
            _, stderr = proc.communicate(timeout=30)
            assert proc.returncode == 130, stderr
        else:
            proc.kill()
            proc.communicate(timeout=30)
        deadline = time.monotonic() + 2.0
        while session_members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert session_members(proc.pid) == set()
    finally:
        for pid in session_members(proc.pid):
            os.kill(pid, signal.SIGKILL)
        proc.kill()
