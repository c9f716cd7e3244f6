"""The capacity search against servers of known capacity: the reference server with S slots,
whose requests past S in flight wait for one (`--slots`).

A request that waits for a slot waits about one whole request: D = ttft + (tokens - 1) x itl
on the server's schedule. The TTFT target sits halfway between what a request in a slot gets
(ttft) and what a waiting one gets (about ttft + D), so the verdict rests on the server's own
schedule, with D/2 of margin either way, not on how fast this machine is; the test checks that
margin against what the server recorded (/stats)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.schemas import BenchmarkReport, CapacityResult
from tests.harness.conftest import StartServer, server_stats
from tests.harness.test_cli import rigbench

pytestmark = pytest.mark.slow

TTFT_MS, ITL_MS, TOKENS = 20.0, 20.0, 24
REQUEST_MS = TTFT_MS + (TOKENS - 1) * ITL_MS  # 480 ms
TARGET_MS = TTFT_MS + REQUEST_MS / 2  # 260 ms: waiting for a slot misses it, a slot meets it


def check_search(capacity: CapacityResult, report: BenchmarkReport) -> None:
    """The answer is what the probes say: the highest load that met the SLO, every probe above
    it missed; each probe is a cell of the report, marked as one."""
    met = [p.load for p in capacity.probes if p.meets_slo]
    missed = [p.load for p in capacity.probes if not p.meets_slo]
    assert capacity.value == max(met, default=0)
    assert all(load > capacity.value for load in missed)
    assert len({p.load for p in capacity.probes}) == len(capacity.probes)  # none probed twice
    for probe in capacity.probes:
        cell = report.cells[probe.cell]
        assert cell.capacity_probe
        assert cell.meets_slo is probe.meets_slo
        load = cell.concurrency if capacity.by == "concurrency" else cell.rate
        assert load == probe.load


@pytest.mark.parametrize("slots", [1, 3, 5])
def test_capacity_by_concurrency_finds_the_slots(
    reference_server: StartServer, tmp_path: Path, slots: int
) -> None:
    url = reference_server(
        "--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--slots", str(slots)
    )
    out = tmp_path / "report.json"
    result = rigbench(
        "--url", url, "--model", "reference", "--concurrency", "1", "--requests", "8",
        "--warmup", "1", "--input-len", "8", "--output-len", str(TOKENS),
        "--slo", f"ttft_ms={TARGET_MS:g}", "--capacity", "concurrency", "--capacity-max", "8",
        "--out", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    report = BenchmarkReport.model_validate_json(out.read_text())
    capacity = report.capacity
    assert capacity is not None
    assert capacity.value == slots
    assert capacity.stopped == "bracketed"
    assert capacity.slo.ttft_ms == TARGET_MS
    assert capacity.slo.percentile == 90
    check_search(capacity, report)
    at = report.cells[next(p.cell for p in capacity.probes if p.load == slots)]
    assert capacity.output_tok_s == at.output_tok_s
    line = f"capacity: {slots} users at once within the SLO (TTFT <= {TARGET_MS:g} ms, for 90%"
    assert line in result.stdout
    # the JSON contract: by, value, slo and probes
    assert {"by", "value", "slo", "probes"} <= json.loads(out.read_text())["capacity"].keys()
    # The premise, from the server's own record: a request in a slot got its first token well
    # inside the target, and the ones that waited for a slot waited well past it.
    stats = server_stats(url)
    assert stats["observed_ttft_ms"]["p99"] < TARGET_MS - REQUEST_MS / 4
    assert stats["slot_wait_ms"]["max"] > REQUEST_MS * 3 / 4


def test_capacity_by_rate_brackets_within_ten_percent(
    reference_server: StartServer, tmp_path: Path
) -> None:
    url = reference_server("--ttft-ms", str(TTFT_MS), "--itl-ms", str(ITL_MS), "--slots", "2")
    out = tmp_path / "report.json"
    result = rigbench(
        "--url", url, "--model", "reference", "--rate", "1", "--requests", "8",
        "--warmup", "1", "--input-len", "8", "--output-len", str(TOKENS),
        "--slo", f"ttft_ms={TARGET_MS:g}", "--capacity", "rate", "--capacity-max", "32",
        "--arrival", "constant", "--out", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    report = BenchmarkReport.model_validate_json(out.read_text())
    capacity = report.capacity
    assert capacity is not None
    assert capacity.by == "rate"
    check_search(capacity, report)
    assert capacity.stopped == "bracketed"
    lowest_missed = min(p.load for p in capacity.probes if not p.meets_slo)
    assert lowest_missed <= capacity.value * 1.1
    # Two slots serve at most 2 / D requests a second: a steady rate above that queues
    # without end, so no probe above it can meet the SLO... unless it is too short to fill
    # the queue. At four times that, 16 requests arrive in well under two request times.
    assert capacity.value < 4 * 2 / (REQUEST_MS / 1e3)
    assert f"capacity: {capacity.value:g} requests/s within the SLO" in result.stdout


def test_a_deadline_stops_the_search_and_says_so(
    reference_server: StartServer, tmp_path: Path
) -> None:
    url = reference_server("--ttft-ms", "5", "--itl-ms", "5", "--slots", "64")
    out = tmp_path / "report.json"
    result = rigbench(
        "--url", url, "--model", "reference", "--concurrency", "1", "--requests", "4",
        "--warmup", "0", "--output-len", "4", "--slo", "ttft_ms=60000",
        "--capacity", "concurrency", "--capacity-max", "1024", "--deadline-s", "0.01",
        "--out", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    capacity = BenchmarkReport.model_validate_json(out.read_text()).capacity
    assert capacity is not None
    assert capacity.stopped == "deadline"
    assert capacity.probes == []
    assert capacity.value == 0
    assert "capacity: " in result.stdout


def test_warm_up_before_every_cell_and_probe_when_asked(
    reference_server: StartServer, tmp_path: Path
) -> None:
    url = reference_server("--ttft-ms", "5", "--itl-ms", "2")
    out = tmp_path / "report.json"
    result = rigbench(
        "--url", url, "--model", "reference", "--concurrency", "1,2", "--rate", "20",
        "--requests", "3", "--warmup", "2", "--warmup-each-cell", "--output-len", "3",
        "--slo", "ttft_ms=60000", "--capacity", "concurrency", "--capacity-max", "2",
        "--out", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    report = BenchmarkReport.model_validate_json(out.read_text())
    records = [
        json.loads(line) for line in (tmp_path / "report.requests.jsonl").read_text().splitlines()
    ]
    # three cells and two probes (c=1, c=2: both meet a 60 s target), each after a warm-up
    assert len(report.cells) == 5
    assert sum(r["warmup"] for r in records) == 2 * 5
    assert all(r["cell"] == -1 for r in records if r["warmup"])
    assert sum(not r["warmup"] for r in records) == sum(c.requests_ok for c in report.cells)
    by_send = sorted(records, key=lambda r: r["send_time"])
    cells = [r["cell"] for r in by_send]
    # warm-up requests precede each cell: never inside one
    for index in range(5):
        mine = [i for i, c in enumerate(cells) if c == index]
        assert cells[mine[0] - 2 : mine[0]] == [-1, -1]
