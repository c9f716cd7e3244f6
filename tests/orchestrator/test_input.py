"""The execution input: one model, its schema in the repo, errors that name the field."""

import json
import re
import shlex
from pathlib import Path

import pytest
from pydantic import BaseModel

from functions.boot_plan import plan_boot
from functions.errors import InvalidInput
from functions.events import (
    BootState,
    CellsConfig,
    DeadlinesConfig,
    Reservation,
    SummarizeEvent,
    SweepConfig,
    SweepState,
    WaitsConfig,
)
from functions.execution_input import (
    EVENTS_PER_BOOT_IN_SWEEP,
    HISTORY_EVENT_LIMIT,
    HISTORY_EVENTS_RESERVED,
    MAX_BOOTS_PER_SWEEP,
    SCHEMA_PATH,
    Deadlines,
    LoadCells,
    SweepInput,
    Waits,
    parse_sweep_input,
    render_schema,
)
from tests.orchestrator.conftest import accepted

CONTEXT = {
    "rigs": {"torch", "vllm"},
    "allowed_instance_types": ["g5g.2xlarge"],
    "max_sweep_budget_usd": 10.0,
    "min_poll_s": 1,
}
GOOD = {"rigs": ["torch"], "model": "random:tiny", "budget_usd": 1}


def test_exported_schema_is_current() -> None:
    assert SCHEMA_PATH.read_text() == render_schema(), "run: python -m functions.execution_input"


def test_defaults_fill_a_minimal_input() -> None:
    sweep = parse_sweep_input(GOOD, CONTEXT)
    assert sweep.instance_type == "g5g.2xlarge"
    assert sweep.market == "spot"
    assert sweep.boots_per_rig == 3
    assert sweep.deadlines.instance_s >= sweep.deadlines.ready_s


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"rigs": ["torch", "tgi"]}, "rigs", "unknown rig 'tgi'"),
        ({"rigs": []}, "rigs", "at least 1"),
        ({"budget_usd": 0}, "budget_usd", "greater than 0"),
        ({"budget_usd": -3}, "budget_usd", "greater than 0"),
        ({"budget_usd": 50}, "budget_usd", "above the stack's per-sweep budget"),
        ({"boots_per_rig": 0}, "boots_per_rig", "greater than or equal to 1"),
        ({"boots_per_rig": 51}, "boots_per_rig", "less than or equal to 50"),
        ({"instance_type": "p5.48xlarge"}, "instance_type", "not allowed"),
        ({"market": "reserved"}, "market", "'on-demand' or 'spot-or-on-demand'"),
        ({"subnets": ["sub-1"]}, "subnets", "not a subnet id"),
        ({"waits": {"agent_poll_s": -1}}, "waits.agent_poll_s", "greater than or equal to 0"),
        (
            {"workload": {"kind": "random"}, "cells": {"prompt_tokens": 8}},
            "cells.prompt_tokens",
            "give the lengths in workload",
        ),
        ({"capacity": {"by": "rate", "max": 8}}, "capacity", "needs an slo"),
        (
            {"slo": {"ttft_ms": 500}, "capacity": {"by": "concurrency", "max": 2.5}},
            "capacity",
            "whole number",
        ),
        ({"slo": {"percentile": 90}}, "slo", "give at least one target"),
        (
            {"workload": {"kind": "dataset", "path": "/home/me/d.jsonl"}},
            "workload.path",
            "give a bundled dataset (sample-chat, sample-prompts) or an s3://BUCKET/KEY",
        ),
        (
            {"workload": {"kind": "dataset", "path": "sample-chat"}},
            "workload.path",
            "messages need --endpoint chat",
        ),
        (
            {
                "workload": {
                    "kind": "shared_prefix",
                    "groups": 0,
                    "prefix_tokens": 8,
                    "suffix_tokens": 8,
                }
            },
            "workload.shared_prefix.groups",
            "greater than or equal to 1",
        ),
        ({"endpoint": "embeddings"}, "endpoint", "'completions' or 'chat'"),
        ({"cells": {"arrival": "bursty"}}, "cells.arrival", "poisson"),
        ({"colour": "red"}, "colour", "Extra inputs"),
        ({"budget_usd": float("nan")}, "budget_usd", "finite number"),
        ({"budget_usd": float("inf")}, "budget_usd", "finite number"),
        ({"cells": {"rates": [float("inf")], "concurrency": []}}, "cells.rates.0", "finite"),
        ({"model": "google/gemma; rm -rf /"}, "model", "should match pattern"),
        ({"model": "$(curl evil)"}, "model", "should match pattern"),
        ({"model": "a`b`"}, "model", "should match pattern"),
        ({"model_revision": "main && reboot"}, "model_revision", "should match pattern"),
        ({"model_revision": "abc123"}, "model_revision", "'random:tiny' is not a Hugging Face"),
        ({"rigs": ["torch|sh"]}, "rigs.0", "should match pattern"),
        ({"waits": {"command_poll_s": 0}}, "waits.command_poll_s", "below the stack's minimum"),
        (
            {"deadlines": {"ready_s": 600, "bench_s": 600, "instance_s": 900}},
            "deadlines.instance_s",
            "shorter than ready_s + bench_s = 1200 s",
        ),
    ],
)
def test_bad_input_names_the_field(change: dict, field: str, words: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_sweep_input({**GOOD, **change}, CONTEXT)
    message = str(caught.value)
    assert f"{field}" in message
    assert words in message


def test_missing_required_fields_are_each_named() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_sweep_input({"budget_usd": 1}, CONTEXT)
    assert "rigs: Field required" in str(caught.value)
    assert "model: Field required" in str(caught.value)


@pytest.mark.parametrize("raw", ['{"rigs": ["torch"', "[1, 2]", '"text"'])
def test_malformed_or_non_object_json(raw: str) -> None:
    with pytest.raises(InvalidInput, match="invalid sweep input"):
        parse_sweep_input(raw, CONTEXT)


def test_too_many_boots_in_one_sweep() -> None:
    rigs = [f"r{i}" for i in range(5)]
    with pytest.raises(InvalidInput, match="boots_per_rig: 5 rigs x 13 boots = 65 boots, above"):
        parse_sweep_input(
            {**GOOD, "rigs": rigs, "boots_per_rig": 13}, {**CONTEXT, "rigs": set(rigs)}
        )
    sweep = parse_sweep_input({**GOOD, "rigs": ["torch", "vllm"], "boots_per_rig": 32}, CONTEXT)
    assert sweep.boot_count() == MAX_BOOTS_PER_SWEEP == 64


def test_nan_in_json_text_is_refused() -> None:
    with pytest.raises(InvalidInput, match="budget_usd: Input should be a finite number"):
        parse_sweep_input('{"rigs": ["torch"], "model": "m", "budget_usd": NaN}', CONTEXT)


def test_deeply_nested_input_is_one_clear_line() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(InvalidInput, match=r"invalid sweep input: .*bytes"):
        parse_sweep_input(deep, CONTEXT)
    nested: dict = {}
    node = nested
    for _ in range(50):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(InvalidInput, match="nested deeper than 8 levels"):
        parse_sweep_input({**GOOD, "cells": nested}, CONTEXT)
    with pytest.raises(InvalidInput, match="nested too deeply"):
        parse_sweep_input("[" * 5000 + "]" * 5000, CONTEXT)


def test_each_execution_s_worst_case_history_fits_and_an_overflowing_boot_is_refused() -> None:
    # Each boot writes its polls into its own execution; the sweep's holds a few per boot.
    thirty = parse_sweep_input({**GOOD, "rigs": ["torch", "vllm"], "boots_per_rig": 30}, CONTEXT)
    assert thirty.boot_count() == 60
    assert thirty.boot_history_events() == HISTORY_EVENTS_RESERVED + 2_453  # one relaunch
    assert thirty.history_events() == HISTORY_EVENTS_RESERVED + 60 * EVENTS_PER_BOOT_IN_SWEEP
    largest = parse_sweep_input({**GOOD, "rigs": ["torch", "vllm"], "boots_per_rig": 32}, CONTEXT)
    assert largest.history_events() <= HISTORY_EVENT_LIMIT
    # A relaunch after a spot reclaim polls again, within the same instance deadline: at 1 s
    # polls one boot's worst case is above the limit, whatever the number of boots.
    fast = {"agent_poll_s": 1, "ready_poll_s": 1, "command_poll_s": 1}
    with pytest.raises(InvalidInput, match=r"a boot could write 65944 history events"):
        parse_sweep_input({**GOOD, "boots_per_rig": 1, "waits": fast}, CONTEXT)


def test_schema_describes_the_model() -> None:
    schema = json.loads(SCHEMA_PATH.read_text())
    assert set(schema["required"]) == {"rigs", "model", "budget_usd"}
    assert schema["properties"]["market"]["enum"] == ["spot", "on-demand", "spot-or-on-demand"]


def test_a_hub_model_takes_a_revision() -> None:
    sweep = parse_sweep_input(
        {**GOOD, "model": "google/gemma-4-E2B-it", "model_revision": "v1.0"}, CONTEXT
    )
    assert sweep.model_revision == "v1.0"


def test_a_rig_listed_twice_under_a_label_is_an_a_a_sweep() -> None:
    sweep = parse_sweep_input(
        {**GOOD, "rigs": ["torch", "torch@b"], "rig_settings": {"torch@b": {"max_batch": 2}}},
        CONTEXT,
    )
    assert sweep.rigs == ["torch", "torch@b"]
    assert sweep.boot_count() == 6


@pytest.mark.parametrize(
    ("rigs", "words"),
    [
        (["torch", "torch"], "a rig is listed twice (to run it twice, label one: jax, jax@b)"),
        (["torch@b", "torch@b"], "a rig is listed twice"),
        (["tgi@b"], "unknown rig 'tgi@b'"),
        (["torch@"], "should match pattern"),
        (["torch@b@c"], "should match pattern"),
        (["torch@B"], "should match pattern"),
    ],
)
def test_labelled_rigs_are_checked(rigs: list[str], words: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(words)):
        parse_sweep_input({**GOOD, "rigs": rigs}, CONTEXT)


def test_a_later_task_parses_a_state_that_todays_input_rules_refuse() -> None:
    # A sweep accepted under yesterday's rules, then a deploy that refuses 51 boots, this
    # instance type, settings for a rig the sweep does not run and these deadlines: every
    # Task of the running sweep (polls included) still parses its state.
    sweep = parse_sweep_input(GOOD, CONTEXT)
    record = accepted(sweep).model_dump(mode="json")
    refused_today = {
        **record,
        "boots_per_rig": 51,
        "instance_type": "p9.imaginary",
        "rig_settings": {"vllm": {"gpu_memory_utilization": 2.0}},
        "deadlines": {"ready_s": 600, "bench_s": 600, "instance_s": 900},
    }
    with pytest.raises(InvalidInput) as refused:
        parse_sweep_input({k: refused_today[k] for k in SweepInput.model_fields})
    for field in ("boots_per_rig", "instance_type", "rig_settings", "deadlines.instance_s"):
        assert f"{field}:" in str(refused.value)

    plan = plan_boot(sweep, "torch")
    reservation = Reservation(
        price_usd_per_hour=1.0,
        price_source="test",
        per_boot_usd=2.0,
        total_usd=6.0,
        month="2025-01",
    )
    boot = {"sweep": refused_today, "reservation": reservation, "rig": "torch", "boot": 1}
    polled = BootState.model_validate(
        {**boot, "plan": plan, "command": {"command_id": "c", "sent_at": 1.0, "report_key": "k"}}
    )
    assert polled.sweep.boots_per_rig == 51
    assert polled.sweep.instance_type == "p9.imaginary"
    assert SweepState.model_validate({"sweep": refused_today}).sweep == polled.sweep
    assert SummarizeEvent.model_validate({"sweep": refused_today}).sweep == polled.sweep


@pytest.mark.parametrize(
    ("config", "given"),
    [
        (SweepConfig, SweepInput),
        (CellsConfig, LoadCells),
        (DeadlinesConfig, Deadlines),
        (WaitsConfig, Waits),
    ],
)
def test_the_state_records_every_field_of_the_input(
    config: type[BaseModel], given: type[BaseModel]
) -> None:
    assert set(given.model_fields) <= set(config.model_fields)


def test_workload_slo_and_capacity_reach_the_harness_as_it_reads_them(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from functions.instance_commands import measure_options
    from rigbench.cli import app

    sweep = parse_sweep_input(
        {
            **GOOD,
            "cells": {"concurrency": [1, 2], "rates": [4.0], "arrival": {"gamma": 0.5}},
            "workload": {"kind": "shared_prefix", "groups": 2, "prefix_tokens": 96,
                         "suffix_tokens": {"mean": 16, "stddev": 4}, "output_tokens": 8},
            "slo": {"ttft_ms": 500, "tpot_ms": 50},
            "capacity": {"by": "concurrency", "max": 16},
            "deadlines": {"ready_s": 600, "bench_s": 900, "instance_s": 1800},
        },
        CONTEXT,
    )  # fmt: skip
    assert sweep.concurrent_sequences() == 16  # the rig serves every load the search probes
    assert sweep.longest_request_tokens() == 96 + 16 + 12 + 8
    assert plan_boot(sweep, "torch", instance_host="local").settings["max_model_len"] == 256
    options = measure_options(accepted(sweep))
    text = " ".join(options)
    assert "--slo tpot_ms=50,ttft_ms=500 --slo-percentile 90" in text
    assert "--capacity concurrency --capacity-max 16 --deadline-s 840" in text
    assert "--arrival gamma:0.5" in text
    # The harness takes them as given: it gets past its arguments to the (absent) server.
    args = shlex.split(text)
    result = CliRunner().invoke(
        app, ["bench", "--url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "1",
              "--rate", "4", *args, "--out", str(tmp_path / "r.json")],
    )  # fmt: skip
    assert result.exit_code == 1, result.output  # unreachable, not a usage error (2)
    assert "127.0.0.1:9" in result.output


def test_a_chat_dataset_sweep_is_accepted_and_sized_by_the_rig() -> None:
    sweep = parse_sweep_input(
        {**GOOD, "workload": {"kind": "dataset", "path": "sample-chat"}, "endpoint": "chat"},
        CONTEXT,
    )
    assert sweep.longest_request_tokens() is None
    # the rig's own context: a dataset's lengths are known once the server tokenises them
    assert plan_boot(sweep, "torch", instance_host="local").settings["max_model_len"] == 8192
    config = accepted(sweep)
    assert config.workload == {"kind": "dataset", "path": "sample-chat", "output_tokens": None}
    assert config.endpoint == "chat"
