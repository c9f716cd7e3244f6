"""One emulated account per test module (deploying takes seconds); each test resets the
fleet's knobs and checks what its own sweep left behind."""

import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from boto3.dynamodb.types import TypeDeserializer

from functions.events import BundleRef, SweepConfig
from functions.execution_input import SweepInput
from rigbench.emulation import Emulation, Faults
from rigbench.stack.history import boot_executions
from tests.orchestrator.scripted_fleet import ScriptedFleet

RIGS = ("torch", "vllm")
# Short retries and polls for tests (DefinitionSubstitutions / stack parameters); the
# template's defaults are the real ones.
FAST = {"LambdaRetryIntervalSeconds": 1, "LambdaRetryBackoffRate": 1, "MinPollSeconds": 0}
_deserializer = TypeDeserializer()


@pytest.fixture(scope="session")
def bundle_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle tree with two rig definitions (the rigs' own content is not under test here)."""
    root = tmp_path_factory.mktemp("bundle")
    for rig in RIGS:
        (root / "rigs" / rig).mkdir(parents=True)
        (root / "rigs" / rig / "rig.toml").write_text(f'name = "{rig}"\n')
    (root / "harness").mkdir()
    (root / "harness" / "__init__.py").write_text("")
    return root


def start_emulation(bundle_root: Path, **kwargs: Any) -> Emulation:
    parameters = {**FAST, **kwargs.pop("parameters", {})}
    emulation = Emulation(
        ScriptedFleet(),
        bundle_root=bundle_root,
        faults=Faults(hang_s=0.5),
        parameters=parameters,
        **kwargs,
    )
    emulation.start()
    return emulation


@pytest.fixture(scope="module")
def emulation(bundle_root: Path) -> Iterator[Emulation]:
    emulation = start_emulation(bundle_root)
    try:
        yield emulation
    finally:
        emulation.stop()


def fleet_of(emu: Emulation) -> ScriptedFleet:
    assert isinstance(emu.fleet, ScriptedFleet)
    return emu.fleet


@pytest.fixture
def emu(emulation: Emulation) -> Emulation:
    """The module's emulation with a fresh fleet and no pending faults."""
    fleet_of(emulation).reset()
    emulation.faults.lambdas.clear()
    emulation.faults.throttles.clear()
    emulation.faults.protect_on_launch = False
    emulation.faults.unterminable.clear()
    return emulation


def sweep_input(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "rigs": ["torch"],
        "model": "random:tiny",
        "boots_per_rig": 1,
        "budget_usd": 5,
        "cells": {"concurrency": [1, 4], "requests_per_cell": 4, "output_tokens": 16},
        "waits": {"agent_poll_s": 0, "ready_poll_s": 0, "command_poll_s": 0},
        "deadlines": {"ready_s": 20, "bench_s": 20, "instance_s": 600},
    }
    base.update(overrides)
    return base


def run_sweep(emu: Emulation, body: dict[str, Any] | str, timeout_s: float = 90) -> dict[str, Any]:
    arn = emu.start_execution(body)
    return emu.wait(arn, timeout_s)


def history(emu: Emulation, arn: str) -> list[dict[str, Any]]:
    pages = emu.client("stepfunctions").get_paginator("get_execution_history")
    return [e for page in pages.paginate(executionArn=arn) for e in page["events"]]


def boot_histories(emu: Emulation, arn: str) -> dict[str, list[dict[str, Any]]]:
    """The history of each boot execution the sweep started, by its ARN."""
    return {boot: history(emu, boot) for boot in boot_executions(history(emu, arn))}


def sweep_id_of(described: dict[str, Any]) -> str:
    return str(described["executionArn"].rsplit(":", 1)[1])


def _number(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return str(value)


def plain(item: dict[str, Any]) -> dict[str, Any]:
    value = {k: _deserializer.deserialize(v) for k, v in item.items()}
    return json.loads(json.dumps(value, default=_number))


def result_rows(emu: Emulation, sweep_id: str) -> list[dict[str, Any]]:
    ddb = emu.client("dynamodb")
    items = ddb.query(
        TableName=emu.table("ResultsTable"),
        KeyConditionExpression="sweep_id = :s",
        ExpressionAttributeValues={":s": {"S": sweep_id}},
    )["Items"]
    return [plain(i) for i in items]


def ledger_items(emu: Emulation, pk: str) -> dict[str, dict[str, Any]]:
    ddb = emu.client("dynamodb")
    items = ddb.query(
        TableName=emu.table("LedgerTable"),
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": pk}},
        ConsistentRead=True,
    )["Items"]
    return {i["sk"]["S"]: plain(i) for i in items}


def assert_clean(emu: Emulation, sweep_id: str, *, reserved: bool = True) -> None:
    """Zero instances left running and the sweep's ledger reconciled to actual seconds."""
    assert emu.running_instances() == []
    ledger = ledger_items(emu, f"SWEEP#{sweep_id}")
    ledger.pop("OWNER", None)  # which execution owns the sweep id
    if not reserved:
        assert ledger == {}, "nothing may be reserved when the sweep failed before the budget step"
        return
    total = ledger.pop("TOTAL")
    assert ledger, "every boot has a ledger item"
    for sk, boot in ledger.items():
        assert boot["status"] == "reconciled", f"{sk} was never reconciled"
    assert total["reserved"] == 0, "the reservation is released once every boot ended"
    assert total["spent"] == sum(b["spent"] for b in ledger.values())
    assert "open" not in total, "the sweep is closed"
    month = ledger_items(emu, f"MONTH#{total['month']}")["TOTAL"]
    assert month["committed"] >= total["spent"]


def error_of(described: dict[str, Any]) -> tuple[str, str]:
    return str(described.get("error", "")), str(described.get("cause", ""))


def accepted(sweep: SweepInput) -> SweepConfig:
    """The state's record of `sweep` as ValidateInput would write it (fixed ids)."""
    return SweepConfig.accepted(
        sweep,
        sweep_id="s-1",
        subnets=["subnet-0123abcd"],
        bundle=BundleRef(sha256="0" * 64, key="bundles/x.tar.gz", rigs=sweep.rigs),
        execution_arn="arn:aws:states:us-east-1:123456789012:execution:sweep:s-1",
        created_at="2025-01-01T00:00:00+00:00",
    )
