"""The monthly cap counts open reservations: a sweep that would cross it is refused before
launch, saying by how much, while the sweep holding the reservation runs on."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from rigbench.emulation import Emulation
from tests.orchestrator.conftest import (
    assert_clean,
    error_of,
    start_emulation,
    sweep_id_of,
    sweep_input,
)
from tests.orchestrator.scripted_fleet import ScriptedFleet

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def capped(bundle_root: Path) -> Iterator[Emulation]:
    emu = start_emulation(bundle_root, parameters={"MonthlyCapUsd": 1.0})
    try:
        yield emu
    finally:
        emu.stop()


def test_monthly_cap_refuses_a_sweep_that_would_cross_it(capped: Emulation) -> None:
    fleet = capped.fleet
    assert isinstance(fleet, ScriptedFleet)
    fleet.price_usd_per_hour = 0.30
    fleet.bench = "running"
    deadlines = {"ready_s": 20, "bench_s": 600, "instance_s": 7200}
    body = sweep_input(
        deadlines=deadlines,
        waits={"agent_poll_s": 0, "ready_poll_s": 0, "command_poll_s": 1},
        max_interruptions_per_boot=0,  # no relaunch allowance: 2 h x $0.30 exactly
    )
    holding = capped.start_execution(
        body
    )  # reserves 2 h x $0.375 (MaxPrice) = $0.75, keeps running
    assert fleet.bench_started.wait(60)

    refused = capped.wait(capped.start_execution(body), 60)  # another $0.75
    error, cause = error_of(refused)
    assert error == "OverBudget"
    assert "monthly cap $1.00 would be exceeded by $0.50" in cause
    assert len(fleet.launch_requests) == 1

    fleet.bench = "failed"  # let the first sweep end
    first = capped.wait(holding, 60)
    assert error_of(first)[0] == "CommandFailed"
    assert_clean(capped, sweep_id_of(first))
