"""The ledger's key scheme, amounts and months (`functions.tables.ledger`), as the handlers,
the reaper, the report and the state machine read and write them."""

import re
from datetime import UTC, datetime
from pathlib import Path

from functions.tables import ledger

STATEMACHINE = Path(__file__).resolve().parents[2] / "statemachine"


def test_the_month_of_a_time_and_of_its_iso_text_agree() -> None:
    when = datetime(2026, 12, 31, 23, 59, tzinfo=UTC)
    assert ledger.month_of(when) == ledger.month_of(when.isoformat()) == "2026-12"


def test_a_boot_key_names_its_sweep_rig_and_boot_and_reads_back() -> None:
    key = ledger.boot("nightly", "jax@b", 3)
    assert key == {"pk": {"S": "SWEEP#nightly"}, "sk": {"S": "BOOT#jax@b#03"}}
    assert ledger.rig_boot_of_sk(key["sk"]["S"]) == ("jax@b", 3)
    assert ledger.sweep_of_pk(key["pk"]["S"]) == "nightly"


def test_the_finish_failed_key_is_the_one_the_state_machine_writes() -> None:
    text = "".join(
        (STATEMACHINE / name).read_text() for name in ("sweep.asl.json", "boot.asl.json")
    )
    found = re.findall(r"States\.Format\('(FINISH_FAILED#[^']*)'", text)
    (template,) = set(found)
    assert template.format("torch", 1) == ledger.finish_failed_sk("torch", 1)


def test_amounts_are_whole_micro_dollars_both_ways() -> None:
    assert ledger.to_micro(0.556) == 556_000
    assert ledger.usd(556_000) == 0.556
    assert ledger.to_micro(0.1) * 3 == ledger.to_micro(0.3)  # ADD never drifts
