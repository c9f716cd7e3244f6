"""The fault matrix (benchmarks/fault_matrix.py) as tests: for every case, once the execution
has ended and its status-change cleanup has run (the reaper only where the case says so), no
instance and no boot execution of the sweep is running, no reservation is open, the ledger
billed what the instances really ran (to 1 s per instance: EC2's times are to the second, a
vanished instance is billed to its last sighting; over what ran, also by as long as the
terminate call took to return), and the month's committed spend moved by exactly what was
billed."""

import re

import pytest

from benchmarks.fault_matrix import CASES, Case, run_case
from rigbench.emulation import Emulation


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fault_leaves_nothing_running_open_or_unbilled(emu: Emulation, case: Case) -> None:
    outcome = run_case(emu, case)
    assert outcome.status in case.expect, outcome
    assert outcome.instances_left == 0, outcome
    assert outcome.boot_executions_left == 0, outcome
    assert outcome.reservations_open == 0, outcome
    assert outcome.billed_within_tolerance(), outcome
    assert outcome.committed_delta_ok, outcome
    assert outcome.holds(case), outcome
    if outcome.status != "SUCCEEDED":
        assert outcome.cleanup_ran, outcome
    if case.name.startswith("launch-") or case.name.endswith("-while-launching"):
        assert outcome.instances_launched == 1, "a retried or duplicated launch made a second"
    if case.name == "finish-gives-up-mid-sweep":
        ended_after = float(re.findall(r"ended ([\d.]+) s after", outcome.note)[0])
        assert ended_after < 60, outcome  # the reaper's schedule is every minute
    if case.name in ("spot-reclaim-relaunched", "late-warning-slow-reclaim"):
        assert (outcome.instances_launched, outcome.interruptions) == (2, 1), outcome
    if case.name == "late-warning-slow-reclaim":
        assert "ended by the relaunch when its replacement's agent" in outcome.note, outcome
    if case.name in ("decide-round-fails", "stop-at-round-boundary"):
        assert outcome.instances_launched == 6, outcome  # the first round: 3 boots x 2 rigs
    if case.name == "decide-round-fails":
        assert outcome.note.endswith(
            "8 boots reserved for the worst case: 6 reconciled, 2 released"
        )
