"""Local sweeps of real workloads end to end (the state machine, handlers, the torch rig on CPU,
the harness): a shared-prefix workload with an SLO and a capacity search, run A/A, and the
bundled chat dataset on the chat endpoint. What each sweep stored is read back as users read
it: `rigbench compare --format json`, the report, the harness reports.

The SLO's verdicts are checked against what the harness recorded (each probe's requests and
the targets), never against how fast this machine is: the search's answer must be the highest
probe that met the SLO, every probe above it having missed."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from harness.schemas import BenchmarkReport, RequestRecord
from rigbench.cli import app
from tests.local.conftest import REPO, local_env, processes_under

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

COMMON: dict[str, Any] = {
    "model": "random:tiny",
    "budget_usd": 2,
    "deadlines": {"ready_s": 600, "bench_s": 600, "instance_s": 1500},
    "waits": {"agent_poll_s": 5, "ready_poll_s": 5, "command_poll_s": 5},
}
SLO = {"ttft_ms": 1000, "tpot_ms": 200}
PREFIX_INPUT: dict[str, Any] = {
    **COMMON,
    "sweep_id": "prefix-capacity",
    "rigs": ["torch", "torch@b"],  # A/A: the same rig twice
    "boots_per_rig": 1,
    "cells": {"concurrency": [1], "rates": [4], "arrival": "constant", "requests_per_cell": 4,
              "warmup_requests": 1},
    "workload": {"kind": "shared_prefix", "groups": 2, "prefix_tokens": 24, "suffix_tokens": 8,
                 "output_tokens": 6},
    "slo": SLO,
    "capacity": {"by": "concurrency", "max": 4},
}  # fmt: skip
CHAT_INPUT: dict[str, Any] = {
    **COMMON,
    "sweep_id": "chat-dataset",
    "rigs": ["torch"],
    "boots_per_rig": 1,
    "cells": {"concurrency": [2], "requests_per_cell": 6, "warmup_requests": 1},
    "workload": {"kind": "dataset", "path": "sample-chat"},
    "endpoint": "chat",
}


def run_sweep(sweep: dict[str, Any], home: Path) -> str:
    from rigbench.commands.local import run_local

    console = Console(record=True, width=1000)
    code = run_local(dict(sweep), home=home, console=console, quota_vcpus=24)
    terminal = console.export_text()
    assert code == 0, terminal[-4000:]
    assert processes_under(home) == []
    return terminal


def cli(home: Path, *args: str) -> str:
    env = {**local_env(home), **{k: None for k in os.environ if k.startswith("AWS_")}}
    result = CliRunner().invoke(app, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr[-2000:]
    return result.stdout


def harness_reports(home: Path, sweep_id: str) -> dict[str, tuple[BenchmarkReport, list[Any]]]:
    """Per rig (one boot each), its harness report and request records, as stored in S3."""
    found: dict[str, tuple[BenchmarkReport, list[Any]]] = {}
    for path in (home / "data" / "s3").glob(f"*/reports%2F{sweep_id}%2F*report.json"):
        rig = path.name.split("%2F")[2].replace("%40", "@")
        records = path.with_name(path.name.replace("report.json", "report.requests.jsonl"))
        found[rig] = (
            BenchmarkReport.model_validate_json(path.read_text()),
            [RequestRecord.model_validate_json(line) for line in records.read_text().splitlines()],
        )
    return found


@pytest.fixture(scope="module")
def prefix_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    home = tmp_path_factory.mktemp("prefix") / "home"
    return home, run_sweep(PREFIX_INPUT, home)


def test_a_shared_prefix_sweep_with_an_slo_searches_capacity_on_every_boot(
    prefix_sweep: tuple[Path, str],
) -> None:
    home, terminal = prefix_sweep
    reports = harness_reports(home, "prefix-capacity")
    assert set(reports) == {"torch", "torch@b"}
    for rig, (report, records) in reports.items():
        measured = [r for r in records if not r.warmup]
        assert all(r.ok for r in measured), rig
        assert {r.input_len for r in measured} == {24 + 8}  # prefix + own suffix, exactly
        assert {r.usage_prompt_tokens for r in measured} == {24 + 8}  # as the rig counted them
        assert [c.concurrency for c in report.cells if not c.capacity_probe][:1] == [1]
        assert [c.rate for c in report.cells if not c.capacity_probe][1:] == [4.0]
        capacity = report.capacity
        assert capacity is not None
        assert capacity.by == "concurrency"
        # The verdict of each probe is what its requests say against the targets.
        for probe in capacity.probes:
            cell = report.cells[probe.cell]
            assert cell.capacity_probe
            assert cell.concurrency == probe.load
            mine = [r for r in measured if r.cell == probe.cell]
            assert len(mine) == cell.requests_ok
            met = 0
            for r in mine:
                assert r.first_content_time is not None
                assert r.end_time is not None
                ttft = (r.first_content_time - r.send_time) * 1e3
                tpot = (r.end_time - r.first_content_time) * 1e3 / (r.output_tokens - 1)
                met += ttft <= SLO["ttft_ms"] and tpot <= SLO["tpot_ms"]
            assert probe.slo_attainment == pytest.approx(met / len(mine))
            assert probe.meets_slo is (100 * met / len(mine) >= 90)
        # ...and the answer is the highest probe that met it, every probe above it missing.
        met_loads = [p.load for p in capacity.probes if p.meets_slo]
        assert capacity.value == max(met_loads, default=0)
        assert all(p.load > capacity.value for p in capacity.probes if not p.meets_slo)
        assert (capacity.stopped == "max") is (capacity.value == 4)

    # The comparison JSON carries the workload, goodput and each boot's capacity.
    comparison = json.loads(cli(home, "compare", "prefix-capacity", "--local", "--format", "json"))
    assert comparison["workload"].startswith("shared prefix: 2 groups of 24 tokens + 8 own")
    cells = {c["cell"]: c for c in comparison["cells"]}
    # no probe is a cell of its own; each boot's start (time to ready) is
    assert set(cells) == {"c=1", "rate=4.0/s", "capacity", "start-up"}
    goodput = next(m for m in cells["c=1"]["metrics"] if m["metric"]["key"] == "goodput_req_s")
    assert all(r["boots"][0] > 0 for r in goodput["results"])
    (capacity_metric,) = cells["capacity"]["metrics"]
    assert capacity_metric["metric"]["key"] == "capacity.concurrency"
    for result in capacity_metric["results"]:
        report = reports[result["rig"]][0]
        assert report.capacity is not None
        assert result["boots"] == [report.capacity.value]
        # A/A, one boot each: no capacity verdict
        assert result["verdict"] in (None, "no verdict possible")
    lines = {c["rig"]: c["words"] for c in comparison["capacity"]}
    assert set(lines) == {"torch", "torch@b"}
    assert all("users at once within the SLO (TTFT <= 1000 ms, TPOT <= 200 ms" in w
               for w in lines.values())  # fmt: skip

    # The terminal opens the comparison with the answer; the report draws it.
    assert "workload: shared prefix" in terminal
    assert terminal.index("capacity within the SLO, per rig") < terminal.index(
        "rigbench comparison"
    )
    page = (home / "report-prefix-capacity.html").read_text()
    assert page.index("The answer: capacity within the SLO") < page.index(">Sweep<")
    assert 'id="plot-pareto"' in page
    # concurrency and rate cells share no axis: a pair of load plots each
    assert 'id="plot-throughput"' in page
    assert 'id="plot-throughput-rate"' in page
    assert "Pareto view" in page
    assert "users at once within the SLO" in page

    # Every results row carries the workload and its boot's capacity.
    rows = json.loads(
        cli(home, "results", "--local", "--sweep", "prefix-capacity", "--format", "json")
    )
    assert len(rows) == 4  # 2 rigs x 2 cells: probes are not rows
    for row in rows:
        assert row["workload"]["kind"] == "shared_prefix"
        assert row["capacity"]["value"] == reports[row["rig"]][0].capacity.value  # type: ignore[union-attr]


def test_the_bundled_chat_dataset_on_the_chat_endpoint(tmp_path: Path) -> None:
    home = tmp_path / "home"
    run_sweep(CHAT_INPUT, home)
    ((report, records),) = harness_reports(home, "chat-dataset").values()
    assert report.endpoint == "chat"
    assert report.dataset is not None
    sample = REPO / "harness" / "data" / "sample-chat.jsonl"
    assert report.dataset.name == "sample-chat"
    assert report.dataset.sha256 == hashlib.sha256(sample.read_bytes()).hexdigest()
    assert report.dataset.rows_used == 1 + 6  # the warm-up's line and the cell's six
    measured = [r for r in records if not r.warmup]
    assert len(measured) == 6
    assert all(r.ok for r in measured)
    lines = [json.loads(line) for line in sample.read_text().splitlines()]
    # each request forced the output its line asked for, and got it
    assert sorted(r.output_len for r in measured) == sorted(
        line["output_tokens"] for line in lines[1:7]
    )
    assert all(r.output_tokens == r.output_len for r in measured)
    # the chat template wrapped the messages: more prompt tokens than the words sent
    words = [sum(len(m["content"].split()) for m in line["messages"]) for line in lines[1:7]]
    assert min(r.usage_prompt_tokens or 0 for r in measured) > min(words)
    comparison = json.loads(cli(home, "compare", "chat-dataset", "--local", "--format", "json"))
    assert comparison["workload"] == "dataset sample-chat, chat endpoint"
