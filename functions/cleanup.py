"""End a boot's instances and bill them, found by their tags and the ledger, never by what a
state happens to carry: Finish, the execution status-change handler and the reaper all end
boots through `end_boot`, so a Launch that timed out after RunInstances, a duplicate, or a
retry's second instance is ended and billed the same way.

Billing truth: each instance is billed from its real LaunchTime to its own end (the time our
terminate call returned, or the time EC2 says it stopped), never to a time read once for a
whole pass; an instance that vanished from EC2 is billed from its launch to when a step last
saw it alive, never 0 s. An instance that turns up after its boot was reconciled (a Launch
still in flight when the execution ended) is billed on its own, once (`reconcile_boot`).
"""

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from functions import clock
from functions.budget import boot_record, reconcile_boot, record_times
from functions.errors import error_code
from functions.observability import logger
from functions.settings import BOOT_TAG, PROJECT_TAG, RIG_TAG, SWEEP_TAG

LIVE = ("pending", "running", "stopping", "stopped")
ENDED = ("shutting-down", "terminated")
_REASON_TIME = re.compile(r"\((\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) (?:UTC|GMT)\)")


@dataclass
class BootEnd:
    instance_ids: list[str] = field(default_factory=list)
    terminated: list[str] = field(default_factory=list)
    vanished: list[str] = field(default_factory=list)
    by_instance: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    cost_usd: float = 0.0
    settled: bool = True  # False: the boot gained an instance while being ended: go again


def tagged_instances(ec2: Any, filters: dict[str, str]) -> list[dict[str, Any]]:
    """Every instance (any state EC2 still reports) carrying all the given tags."""
    found: list[dict[str, Any]] = []
    for page in ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": f"tag:{k}", "Values": [v]} for k, v in filters.items()]
    ):
        for reservation in page["Reservations"]:
            found.extend(reservation["Instances"])
    return found


def instances_by_id(ec2: Any, instance_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The ones EC2 still knows; a vanished id is simply absent."""
    known: dict[str, dict[str, Any]] = {}
    for instance_id in instance_ids:
        try:
            reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        except ClientError as exc:
            if error_code(exc) != "InvalidInstanceID.NotFound":
                raise
            continue
        for reservation in reservations:
            for instance in reservation["Instances"]:
                known[instance["InstanceId"]] = instance
    return known


def terminate(ec2: Any, instance_id: str) -> None:
    """Terminate even an instance someone protected from termination (our own tag only: the
    IAM policy limits ModifyInstanceAttribute to project instances)."""
    try:
        ec2.terminate_instances(InstanceIds=[instance_id])
    except ClientError as exc:
        code = error_code(exc)
        if code == "InvalidInstanceID.NotFound":
            return
        if code != "OperationNotPermitted":
            raise
        logger.warning("instance protected from termination", extra={"instance": instance_id})
        ec2.modify_instance_attribute(
            InstanceId=instance_id, DisableApiTermination={"Value": False}
        )
        ec2.terminate_instances(InstanceIds=[instance_id])


def end_replaced(
    ec2: Any, project: str, sweep_id: str, rig: str, boot: int, replacement: str
) -> list[str]:
    """End the boot's other live instances once `replacement` runs: after a spot warning EC2
    may take its time to reclaim the warned one, and both would bill meanwhile. They are billed
    with the boot (`end_boot`), to when EC2 says they stopped."""
    tags = {PROJECT_TAG: project, SWEEP_TAG: sweep_id, RIG_TAG: rig, BOOT_TAG: str(boot)}
    ended = [
        i["InstanceId"]
        for i in tagged_instances(ec2, tags)
        if i["InstanceId"] != replacement and i["State"]["Name"] in LIVE
    ]
    for instance_id in ended:
        terminate(ec2, instance_id)
    if ended:
        logger.warning("ended the instances a relaunch replaced", extra={"instances": ended})
    return ended


def ended_at(instance: dict[str, Any], fallback: float) -> float:
    """When EC2 says the instance stopped running (its state transition reason)."""
    match = _REASON_TIME.search(instance.get("StateTransitionReason", "") or "")
    if not match:
        return fallback
    when = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
    return when.timestamp()


def end_instance(ec2: Any, instance: dict[str, Any]) -> tuple[float, bool]:
    """Terminate if still live; (seconds it ran, whether this call terminated it). A live
    instance is billed to when our terminate call returned, an ended one to EC2's own time."""
    launched = instance["LaunchTime"].timestamp()
    state = instance["State"]["Name"]
    if state in LIVE:
        terminate(ec2, instance["InstanceId"])
        return max(0.0, clock.now() - launched), True
    return max(0.0, ended_at(instance, clock.now()) - launched), False


def end_boot(
    ec2: Any, ddb: Any, ledger_table: str, project: str, sweep_id: str, rig: str, boot: int,
    attempts: int = 5,
) -> BootEnd:  # fmt: skip
    """End and bill every instance of the boot. The reconciliation is conditioned on the set
    of instances it billed: a Launch that records another one meanwhile makes it go round
    again, so an instance can never be left out of the bill."""
    end = BootEnd()
    for _ in range(attempts):
        end = _end_boot_once(ec2, ddb, ledger_table, project, sweep_id, rig, boot)
        if end.settled:
            return end
    raise RuntimeError(f"{rig} boot {boot} of {sweep_id} kept gaining instances while ending")


def _end_boot_once(
    ec2: Any, ddb: Any, ledger_table: str, project: str, sweep_id: str, rig: str, boot: int
) -> BootEnd:  # fmt: skip
    record = boot_record(ddb, ledger_table, sweep_id, rig, boot)
    recorded = sorted(record.get("instance_ids", {}).get("SS", []))
    tags = {PROJECT_TAG: project, SWEEP_TAG: sweep_id, RIG_TAG: rig, BOOT_TAG: str(boot)}
    found = {i["InstanceId"]: i for i in tagged_instances(ec2, tags)}
    found.update(instances_by_id(ec2, [i for i in recorded if i not in found]))
    end = BootEnd(instance_ids=sorted(set(found) | set(recorded)))
    for instance_id, instance in sorted(found.items()):
        seconds, terminated = end_instance(ec2, instance)
        end.by_instance[instance_id] = seconds
        if terminated:
            end.terminated.append(instance_id)
    vanished = [i for i in recorded if i not in found]
    if vanished:
        launched = record_times(record, "launched_at")
        last_seen = record_times(record, "last_seen")
        for instance_id in vanished:
            start = launched.get(instance_id, 0.0)
            end.by_instance[instance_id] = max(0.0, last_seen.get(instance_id, start) - start)
        end.vanished = vanished
        logger.warning("instances vanished", extra={"instances": vanished, "boot": boot})
    end.seconds = sum(end.by_instance.values())
    billed = reconcile_boot(
        ddb, ledger_table, sweep_id, rig, boot, end.by_instance, expect=recorded
    )
    end.cost_usd, end.settled = billed.cost_usd, billed.settled
    return end
