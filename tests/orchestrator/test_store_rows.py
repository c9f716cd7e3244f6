"""Store's rows from a harness report read with the harness's own schema: a report an older
harness wrote gives rows that hold what it recorded, and no schema default in place of a
figure it did not measure."""

from pathlib import Path

from functions.boot_plan import plan_boot
from functions.events import BootState, Reservation
from functions.execution_input import parse_sweep_input
from functions.instance_commands import InstanceProvenance
from functions.store import result_rows
from functions.tables.results import cell_key
from harness.schemas import BenchmarkReport, cell_label, metric_value
from tests.orchestrator.conftest import accepted

OLD_REPORT = (
    Path(__file__).resolve().parents[1]
    / "harness"
    / "data"
    / "report-0.1-before-achieved-load.json"
)
NOT_RECORDED_BEFORE_ACHIEVED_LOAD = (
    "achieved_concurrency", "achieved_request_rate", "ttft_validity", "itl_validity", "delivery",
    "first_token_shared_reads", "first_failure", "goodput_req_s",
)  # fmt: skip


def boot_state() -> BootState:
    sweep = parse_sweep_input({"rigs": ["torch"], "model": "random:tiny", "budget_usd": 1})
    config = accepted(sweep)
    return BootState(
        sweep=config,
        reservation=Reservation(
            price_usd_per_hour=1.0, price_source="test", per_boot_usd=2.0, total_usd=6.0,
            month="2025-01",
        ),
        rig="torch",
        boot=1,
        plan=plan_boot(sweep, "torch"),
        instance={
            "instance_id": "i-0123456789abcdef0", "subnet_id": "subnet-0123abcd",
            "availability_zone": "us-east-1a", "image_id": "ami-0123",
            "instance_type": "g5g.2xlarge", "market": "spot", "launched_at": 0.0,
            "ready_deadline_at": 1.0, "deadline_at": 2.0,
        },
    )  # fmt: skip


def test_rows_of_a_report_from_before_achieved_load_hold_what_it_recorded() -> None:
    report = BenchmarkReport.model_validate_json(OLD_REPORT.read_text())
    found = InstanceProvenance(served_model="random:tiny", gpu="none", driver="none")
    rows = result_rows(boot_state(), report, found, "reports/s-1/torch/01/report.json")

    assert [row["cell"] for row in rows] == ["c00001", "c00004"]
    assert [row["row_key"] for row in rows] == ["torch#01#c00001", "torch#01#c00004"]
    for row in rows:
        metrics = row["metrics"]
        # Recorded: kept as the report has it.
        assert metric_value(metrics, "queue_wait_ms.p50") is not None
        assert "shared_read_fraction" in metrics
        # Not recorded then: absent (None to every reader), not "valid" or "streamed".
        assert not set(NOT_RECORDED_BEFORE_ACHIEVED_LOAD) & set(metrics)
        assert metric_value(metrics, "ttft_validity.p50") is None
    assert rows[0]["agreement"] is None


def test_rows_of_a_current_report_hold_every_figure() -> None:
    old = BenchmarkReport.model_validate_json(OLD_REPORT.read_text())
    current = BenchmarkReport.model_validate_json(old.model_dump_json())  # every field written
    found = InstanceProvenance(served_model="random:tiny", gpu="none", driver="none")
    (row, _) = result_rows(boot_state(), current, found, "k")
    assert set(NOT_RECORDED_BEFORE_ACHIEVED_LOAD) <= set(row["metrics"])
    assert row["metrics"]["delivery"] == "streamed"


def test_a_cell_s_sort_key_keeps_the_spelling_of_the_stored_rows() -> None:
    # Rows already in the table carry these keys: a new spelling would split their history.
    old = BenchmarkReport.model_validate_json(OLD_REPORT.read_text())
    by_concurrency, _ = old.cells
    by_rate = by_concurrency.model_copy(update={"concurrency": None, "rate": 2.5})
    assert (cell_key(by_concurrency), cell_key(by_rate)) == ("c00001", "r000002.5000")
    assert (cell_label(by_concurrency), cell_label(by_rate)) == ("c=1", "rate=2.5/s")


def test_rows_carry_the_workload_and_capacity_and_leave_probes_in_the_report() -> None:
    old = BenchmarkReport.model_validate_json(OLD_REPORT.read_text())
    assert old.capacity is None
    assert old.dataset is None
    found = InstanceProvenance(served_model="random:tiny", gpu="none", driver="none")
    # an older report: its workload is the random prompts of its input length
    (row, _) = result_rows(boot_state(), old, found, "k")
    assert row["workload"]["kind"] == "random"
    assert row["workload"]["prompt_tokens"] == old.config.input_len
    assert row["workload"]["words"].startswith(f"random prompts of {old.config.input_len} tokens")
    assert row["capacity"] is None
    probe = old.cells[-1].model_copy(update={"concurrency": 8, "capacity_probe": True})
    capacity = {
        "by": "concurrency", "value": 4, "max": 8, "stopped": "bracketed",
        "slo": {"ttft_ms": 500}, "probes": [
            {"load": 8, "meets_slo": False, "slo_attainment": 0.5, "cell": len(old.cells)}
        ],
    }  # fmt: skip
    searched = BenchmarkReport.model_validate(
        {**old.model_dump(), "cells": [*old.model_dump()["cells"], probe.model_dump()],
         "capacity": capacity}
    )  # fmt: skip
    rows = result_rows(boot_state(), searched, found, "k")
    assert [r["cell"] for r in rows] == ["c00001", "c00004"]  # the probe is no row
    assert all(r["capacity"]["value"] == 4 for r in rows)
    assert all(r["capacity"]["slo"]["percentile"] == 90 for r in rows)
