"""Boots ending together release their reservations exactly, as DynamoDB's atomic requests
guarantee: a lost release would leave the sweep (and the month) holding money it never spent."""

import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from functions.budget import reconcile_boot, record_instance
from functions.tables.ledger import boot_sk, to_micro
from rigbench.emulation import Emulation
from tests.orchestrator.conftest import ledger_items

BOOTS, PER_BOOT, MONTH, USD_PER_HOUR = 16, 1000, "2026-12", 1.8


pytestmark = pytest.mark.slow


@pytest.fixture
def eager_thread_switches() -> Iterator[None]:
    # Switch threads as often as the interpreter can, so that requests served at once
    # interleave inside the server the way a loaded 2-core machine makes them.
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def _put(emu: Emulation, item: dict[str, str]) -> None:
    emu.client("dynamodb").put_item(
        TableName=emu.physical["LedgerTable"],
        Item={k: ({"N": v} if v.isdigit() else {"S": v}) for k, v in item.items()},
    )


def _reconcile_all_at_once(ddb: Any, table: str, sweep_id: str, seconds_each: float) -> None:
    """Reconcile every boot in its own thread at once, each billed one instance's seconds."""
    threads = [
        threading.Thread(
            target=reconcile_boot,
            args=(ddb, table, sweep_id, "torch", boot, {f"i-{boot}": seconds_each}),
        )
        for boot in range(BOOTS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@pytest.mark.parametrize("round_", range(3))
def test_boots_reconciled_at_once_release_every_reservation(
    emu: Emulation, eager_thread_switches: None, round_: int
) -> None:
    sweep_id, table = f"sweep-together-{round_}", emu.physical["LedgerTable"]
    pk = f"SWEEP#{sweep_id}"
    price = str(to_micro(USD_PER_HOUR))
    _put(emu, {"pk": pk, "sk": "TOTAL", "reserved": str(BOOTS * PER_BOOT), "spent": "0"})
    for boot in range(BOOTS):
        _put(emu, {"pk": pk, "sk": boot_sk("torch", boot), "status": "reserved",
                   "reserved": str(PER_BOOT), "price": price, "month": MONTH})  # fmt: skip
    _put(emu, {"pk": f"MONTH#{MONTH}", "sk": "TOTAL", "committed": str(BOOTS * PER_BOOT)})
    ddb = emu.client("dynamodb")
    _reconcile_all_at_once(ddb, table, sweep_id, seconds_each=1.0)
    spent_each = to_micro(USD_PER_HOUR * 1.0 / 3600)  # one second at $1.80/h: 500 micro-dollars
    sweep_total = ledger_items(emu, pk)["TOTAL"]
    assert sweep_total["reserved"] == 0
    assert sweep_total["spent"] == BOOTS * spent_each
    assert ledger_items(emu, f"MONTH#{MONTH}")["TOTAL"]["committed"] == BOOTS * spent_each


def _one_boot(emu: Emulation, sweep_id: str) -> str:
    pk = f"SWEEP#{sweep_id}"
    _put(emu, {"pk": pk, "sk": "TOTAL", "reserved": str(PER_BOOT), "spent": "0"})
    price = str(to_micro(USD_PER_HOUR))
    _put(emu, {"pk": pk, "sk": boot_sk("torch", 1), "status": "reserved",
               "reserved": str(PER_BOOT), "price": price, "month": MONTH})  # fmt: skip
    _put(emu, {"pk": f"MONTH#{MONTH}", "sk": "TOTAL", "committed": str(PER_BOOT)})
    return pk


def test_a_bill_that_missed_an_instance_recorded_meanwhile_is_refused(emu: Emulation) -> None:
    sweep_id, table, ddb = "sweep-gained", emu.physical["LedgerTable"], emu.client("dynamodb")
    pk = _one_boot(emu, sweep_id)
    record_instance(ddb, table, sweep_id, "torch", 1, "i-late", 100.0)  # after the caller read
    billed = reconcile_boot(ddb, table, sweep_id, "torch", 1, {}, expect=[])
    assert (billed.reconciled, billed.settled) == (False, False)
    assert ledger_items(emu, pk)[boot_sk("torch", 1)]["status"] == "reserved"
    billed = reconcile_boot(ddb, table, sweep_id, "torch", 1, {"i-late": 2.0}, expect=["i-late"])
    assert (billed.reconciled, billed.settled) == (True, True)


def test_an_instance_of_a_closed_boot_is_billed_once_when_it_turns_up(emu: Emulation) -> None:
    sweep_id, table, ddb = "sweep-late", emu.physical["LedgerTable"], emu.client("dynamodb")
    pk = _one_boot(emu, sweep_id)
    assert reconcile_boot(ddb, table, sweep_id, "torch", 1, {}).reconciled  # closed at 0 s
    for _ in range(2):  # Launch's own check, then the status-change handler: billed once
        reconcile_boot(ddb, table, sweep_id, "torch", 1, {"i-late": 2.0})
    spent = to_micro(USD_PER_HOUR * 2.0 / 3600)
    boot = ledger_items(emu, pk)[boot_sk("torch", 1)]
    assert (boot["seconds"], boot["spent"]) == (2, spent)
    raw = ddb.get_item(TableName=table, Key={"pk": {"S": pk}, "sk": {"S": boot_sk("torch", 1)}})
    assert raw["Item"]["billed_ids"] == {"SS": ["i-late"]}
    assert ledger_items(emu, pk)["TOTAL"]["spent"] == spent
    assert ledger_items(emu, f"MONTH#{MONTH}")["TOTAL"]["committed"] == spent


def test_boots_billed_past_their_reservations_at_once_never_push_the_month_past_its_cap(
    emu: Emulation, eager_thread_switches: None
) -> None:
    """Each of 16 boots ran 10 s where 1,000 micro-dollars (2 s) were reserved, all reconciled
    at once, with room for 100 more under the cap: the month's committed total stops at the
    cap, and what did not fit is the month's overrun, to the micro-dollar."""
    sweep_id, table, ddb = "sweep-over", emu.physical["LedgerTable"], emu.client("dynamodb")
    pk, month = f"SWEEP#{sweep_id}", "2026-11"
    price = str(to_micro(USD_PER_HOUR))
    _put(emu, {"pk": pk, "sk": "TOTAL", "reserved": str(BOOTS * PER_BOOT), "spent": "0"})
    for boot in range(BOOTS):
        _put(emu, {"pk": pk, "sk": boot_sk("torch", boot), "status": "reserved",
                   "reserved": str(PER_BOOT), "price": price, "month": month})  # fmt: skip
    cap = BOOTS * PER_BOOT + 100
    _put(emu, {"pk": f"MONTH#{month}", "sk": "TOTAL", "committed": str(BOOTS * PER_BOOT),
               "cap": str(cap)})  # fmt: skip
    _reconcile_all_at_once(ddb, table, sweep_id, seconds_each=10.0)
    spent_each = to_micro(USD_PER_HOUR * 10.0 / 3600)
    assert ledger_items(emu, pk)["TOTAL"]["spent"] == BOOTS * spent_each  # the truth, whole
    total = ledger_items(emu, f"MONTH#{month}")["TOTAL"]
    assert total["committed"] == cap
    assert total["overrun"] == BOOTS * spent_each - cap
