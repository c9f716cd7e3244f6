"""The fault matrix (benchmarks/fault_matrix.py) as tests: for every case, once the execution
has ended and its status-change cleanup has run (no reaper), no instance of the sweep is
running, no reservation is open, the ledger billed what the instances really ran, and the
month's committed spend moved by exactly what was billed."""

import pytest

from benchmarks.fault_matrix import CASES, Case, run_case
from rigbench.emulation import Emulation

# Finish bills up to "now" as it terminates; EC2 launch times have 1 s resolution; a vanished
# instance is billed to its last sighting, one poll (1 s here) before it vanished.
UNBILLED_TOLERANCE_S = 3.0


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fault_leaves_nothing_running_open_or_unbilled(emu: Emulation, case: Case) -> None:
    outcome = run_case(emu, case)
    assert outcome.status in case.expect, outcome
    assert outcome.instances_left == 0, outcome
    assert outcome.reservations_open == 0, outcome
    assert abs(outcome.unbilled_s) <= UNBILLED_TOLERANCE_S, outcome
    assert outcome.committed_delta_ok, outcome
    if outcome.status != "SUCCEEDED":
        assert outcome.cleanup_ran, outcome
    if case.name.startswith("launch-"):
        assert outcome.instances_launched == 1, "a retried or duplicated launch made a second"
