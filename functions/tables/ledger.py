"""The ledger table (template.yaml `LedgerTable`): its key scheme, amounts and months.

Items (pk, sk), amounts in integer micro-dollars so that ADD never drifts:
    MONTH#2026-12 / TOTAL            committed = reservations still open + actual spend
    SWEEP#<id>    / TOTAL            reserved, spent, budget (a bake's id is a sweep id here)
    SWEEP#<id>    / OWNER            execution_arn: the one execution that owns this sweep id
    SWEEP#<id>    / BOOT#<rig>#<nn>  status reserved|reconciled|released (never launched: an
                                     adaptive sweep stopped first), reserved, spent, seconds,
                                     launch_anchor (first launch attempt: fixes the deadline),
                                     instance_ids, launched_at, last_seen (and per
                                     instance launched_at:<id>, last_seen:<id>), billed_ids
    SWEEP#<id>    / FINISH_FAILED#<rig>#<n>  Finish gave up (written by the state machine's
                                     MarkFinishFailed; the reaper ends the boot)
    EXECUTION#<arn> / SWEEP          sweep_id: the status-change handler's way back to the sweep
    INSTANCE#<id> / INTERRUPTION     written by the spot interruption warning rule
    INSTANCE#<id> / STRAY            spent, seconds, month: a project instance of no sweep that
                                     the reaper ended and billed to the month (once)
    REGRESSIONS#2026-12 / <sweep created_at>#<sweep>#<rig>#<cell>#<metric>
                                     a regression alert (functions/alerts.py), by sweep month
Sweeps still open carry `open` (GSI open_sweeps), so the reaper finds aborted ones by Query.
"""

from datetime import datetime
from typing import Any

MICRO = 1_000_000
TOTAL = "TOTAL"
BOOT_PREFIX = "BOOT#"
SWEEP_PREFIX = "SWEEP#"
RELEASED = "released"  # a boot's status when its reservation was given back unlaunched


def to_micro(usd: float) -> int:
    return round(usd * MICRO)


def usd(micro: int | float) -> float:
    return round(float(micro) / MICRO, 6)


def month_of(when: datetime | str) -> str:
    """YYYY-MM of a time or an ISO timestamp: the ledger's month, the results' `by_month`."""
    return when[:7] if isinstance(when, str) else when.strftime("%Y-%m")


def key(pk: str, sk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def sweep_pk(sweep_id: str) -> str:
    return f"{SWEEP_PREFIX}{sweep_id}"


def sweep_of_pk(pk: str) -> str:
    return pk.removeprefix(SWEEP_PREFIX)


def month_pk(month: str) -> str:
    return f"MONTH#{month}"


def boot_sk(rig: str, boot: int) -> str:
    return f"{BOOT_PREFIX}{rig}#{boot:02d}"


def rig_boot_of_sk(sk: str) -> tuple[str, int]:
    """(rig, boot) of a BOOT# sort key."""
    _, rig, boot = sk.split("#")
    return rig, int(boot)


def sweep_total(sweep_id: str) -> dict[str, Any]:
    return key(sweep_pk(sweep_id), TOTAL)


def sweep_owner(sweep_id: str) -> dict[str, Any]:
    return key(sweep_pk(sweep_id), "OWNER")


def boot(sweep_id: str, rig: str, boot: int) -> dict[str, Any]:
    return key(sweep_pk(sweep_id), boot_sk(rig, boot))


def finish_failed_sk(rig: str, boot: int) -> str:
    return f"FINISH_FAILED#{rig}#{boot}"  # unpadded: statemachine/sweep.asl.json formats it


def finish_failed(sweep_id: str, rig: str, boot: int) -> dict[str, Any]:
    return key(sweep_pk(sweep_id), finish_failed_sk(rig, boot))


def month_total(month: str) -> dict[str, Any]:
    return key(month_pk(month), TOTAL)


def execution_sweep(execution_arn: str) -> dict[str, Any]:
    return key(f"EXECUTION#{execution_arn}", "SWEEP")


def interruption(instance_id: str) -> dict[str, Any]:
    return key(f"INSTANCE#{instance_id}", "INTERRUPTION")


def stray(instance_id: str) -> dict[str, Any]:
    return key(f"INSTANCE#{instance_id}", "STRAY")


def regressions_pk(month: str) -> str:
    return f"REGRESSIONS#{month}"


def boot_instances(ddb: Any, table: str, sweep_id: str) -> dict[tuple[str, int], list[str]]:
    """(rig, boot) -> the instances Launch recorded for it, first launched first (a boot
    relaunched after a spot reclaim has several)."""
    found: dict[tuple[str, int], list[str]] = {}
    pages = ddb.get_paginator("query").paginate(
        TableName=table,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :boot)",
        ExpressionAttributeValues={":pk": {"S": sweep_pk(sweep_id)}, ":boot": {"S": BOOT_PREFIX}},
    )
    for item in (i for page in pages for i in page["Items"]):
        ids = item.get("instance_ids", {}).get("SS", [])
        launched = {i: float(item.get(f"launched_at:{i}", {}).get("N", "0")) for i in ids}
        found[rig_boot_of_sk(item["sk"]["S"])] = sorted(ids, key=lambda i: (launched[i], i))
    return found
