"""Is the instance still there to work on? Spot interruptions are recorded by their own rule;
a reclaim is told apart from any other loss (InstanceInterrupted: the boot may relaunch)."""

from typing import Any

from botocore.exceptions import ClientError

from functions.budget import saw_instance
from functions.errors import InstanceInterrupted, InstanceLost, error_code
from functions.events import BootState
from functions.tables import ledger

SPOT_RECLAIMED = "Server.SpotInstanceTermination"  # EC2's StateReason code for a reclaim


def interruption_of(ddb: Any, ledger_table: str, instance_id: str) -> str | None:
    item = ddb.get_item(
        TableName=ledger_table,
        Key=ledger.interruption(instance_id),
        ConsistentRead=True,
    ).get("Item")
    return item["warned_at"]["S"] if item else None


def instance_state(ec2: Any, instance_id: str) -> str:
    return described_state(ec2, instance_id)[0]


def described_state(ec2: Any, instance_id: str) -> tuple[str, str]:
    """(state name, StateReason code); ("gone", "") when EC2 no longer knows the instance."""
    try:
        reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    except ClientError as exc:
        if error_code(exc) == "InvalidInstanceID.NotFound":
            return "gone", ""
        raise
    if not reservations:
        return "gone", ""
    instance = reservations[0]["Instances"][0]
    return str(instance["State"]["Name"]), str((instance.get("StateReason") or {}).get("Code", ""))


def ensure_alive(
    ec2: Any, ddb: Any, ledger_table: str, state: BootState, during: str, now: float
) -> None:
    """Raise InstanceLost when the instance was interrupted or is no longer running; else note
    in the ledger that it was seen alive now (what a vanished instance is billed up to)."""
    assert state.instance is not None
    instance_id = state.instance.instance_id
    warned = interruption_of(ddb, ledger_table, instance_id)
    if warned:
        raise InstanceInterrupted(
            f"spot interruption: {instance_id} got the 2-minute interruption warning at "
            f"{warned} during {during}"
        )
    found, reason = described_state(ec2, instance_id)
    if reason == SPOT_RECLAIMED:
        raise InstanceInterrupted(f"spot interruption: EC2 reclaimed {instance_id} during {during}")
    if found not in ("pending", "running"):
        raise InstanceLost(f"{instance_id} is {found} during {during}")
    saw_instance(ddb, ledger_table, state.sweep.sweep_id, state.rig, state.boot, instance_id, now)
