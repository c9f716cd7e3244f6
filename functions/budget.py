"""Spend cap: price the sweep, reserve it in the ledger before launch, reconcile at termination.

The ledger's keys, micro-dollar amounts and months: `functions.tables.ledger`.
"""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from functions.errors import InvalidInput, OverBudget, error_code
from functions.events import Reservation, SweepConfig, SweepState
from functions.observability import instrumented, logger
from functions.settings import Clients, Settings
from functions.tables import ledger
from functions.tables.ledger import month_of, to_micro, usd
from hardware.instance_types import UnknownInstanceType, get_instance_type

OPEN_ATTRIBUTE = "open"
OPEN_SWEEPS_INDEX = "open_sweeps"
# What one spot relaunch may add to a boot's run: Launch terminates the warned instance as soon
# as its replacement is launched, within the Launch function's timeout (100 s), and EC2
# reclaims it two minutes after its warning anyway. Each allowed relaunch reserves this much.
RELAUNCH_OVERLAP_S = 120
MONTH_CHARGE_ATTEMPTS = 8


def boot_seconds(sweep: SweepConfig) -> int:
    """The most instance-seconds one boot can run: its deadline, plus an overlap per allowed
    relaunch (the warned instance and its replacement both running)."""
    return sweep.deadlines.instance_s + sweep.max_interruptions_per_boot * RELAUNCH_OVERLAP_S


def boot_seconds_text(sweep: SweepConfig) -> str:
    """How `boot_seconds` is made up, in words: "2 h deadline", or with relaunches allowed
    "(2 h deadline + 1 relaunch x 120 s)"."""
    text = f"{sweep.deadlines.instance_s / 3600:g} h deadline"
    k = sweep.max_interruptions_per_boot
    if k:
        text = f"({text} + {k} relaunch{'es' if k > 1 else ''} x {RELAUNCH_OVERLAP_S} s)"
    return text


def subnet_zones(ec2: Any, subnets: list[str]) -> dict[str, str]:
    found = ec2.describe_subnets(SubnetIds=subnets)["Subnets"]
    return {s["SubnetId"]: s["AvailabilityZone"] for s in found}


def spot_price(ec2: Any, instance_type: str, zones: list[str]) -> float:
    """The highest latest spot price over the zones the sweep may launch in."""
    latest: dict[str, float] = {}
    response = ec2.describe_spot_price_history(
        InstanceTypes=[instance_type],
        ProductDescriptions=["Linux/UNIX"],
        StartTime=datetime.now(UTC) - timedelta(hours=6),
    )
    for entry in sorted(response["SpotPriceHistory"], key=lambda e: e["Timestamp"]):
        if entry["AvailabilityZone"] in zones:
            latest[entry["AvailabilityZone"]] = float(entry["SpotPrice"])
    if not latest:
        raise OverBudget(
            f"no spot price for {instance_type} in {', '.join(zones)}: cannot bound the spend"
        )
    return max(latest.values())


def on_demand_price(region: str, instance_type: str) -> float:
    """The type's on-demand list price in `region`, from the one catalog (hardware/); a type or
    region it lacks is refused by name."""
    try:
        return get_instance_type(instance_type).price(region)
    except UnknownInstanceType as exc:
        raise OverBudget(f"{exc}: cannot price an on-demand sweep; use spot") from exc


# Spot's MaxPrice over the price read now, so that a price that rises a little between the
# reservation and the launch does not refuse the launch (SpotMaxPriceTooLow) nor, later, end
# the instance; the reservation covers it. Spot never costs more than on-demand (AWS caps it).
SPOT_PRICE_HEADROOM = 0.25


@dataclass(frozen=True)
class Pricing:
    price: float  # what a boot is billed per hour
    max_price: float  # the most an hour may cost (spot's MaxPrice)
    fallback: float  # spot-or-on-demand: the on-demand price a fallback is billed at (0: none)
    source: str

    @property
    def reserve_rate(self) -> float:
        """Per hour, what a boot reserves: the worst it may be billed."""
        return max(self.price, self.max_price, self.fallback)


def spot_max_price(spot: float, on_demand: float | None) -> float:
    capped = spot * (1 + SPOT_PRICE_HEADROOM)
    return capped if on_demand is None else max(spot, min(capped, on_demand))


def price_per_hour(
    ec2: Any, market: str, instance_type: str, subnets: list[str], region: str
) -> Pricing:
    if market == "on-demand":
        price = on_demand_price(region, instance_type)
        return Pricing(price, price, 0.0, f"on-demand list price ({region})")
    zones = sorted(set(subnet_zones(ec2, subnets).values()))
    spot = spot_price(ec2, instance_type, zones)
    fallback = on_demand_price(region, instance_type) if market == "spot-or-on-demand" else 0.0
    try:
        on_demand: float | None = get_instance_type(instance_type).price(region)
    except UnknownInstanceType:
        on_demand = None
    cap = spot_max_price(spot, on_demand)
    source = (
        f"spot price history ({', '.join(zones)}); MaxPrice ${cap:.4f}/h "
        f"({SPOT_PRICE_HEADROOM:.0%} headroom{', at most on-demand' if on_demand else ''})"
    )
    if fallback:
        source += f"; on-demand fallback ${fallback:.4f}/h"
    return Pricing(spot, cap, fallback, source)


def sweep_boots(sweep: SweepConfig) -> list[tuple[str, int]]:
    """(rig, boot) of every boot the sweep may run: what its reservation holds."""
    return [(rig, boot) for boot in range(1, sweep.boots_cap() + 1) for rig in sweep.rigs]


def existing_reservation(ddb: Any, table: str, sweep_id: str) -> dict[str, Any] | None:
    item = ddb.get_item(TableName=table, Key=ledger.sweep_total(sweep_id), ConsistentRead=True)
    return item.get("Item")


def claim_sweep(ddb: Any, table: str, sweep_id: str, execution_arn: str, now_iso: str) -> None:
    """One execution owns one sweep id: the first to claim it; any other is refused by name.
    The same execution claiming again (a retried step) is a no-op."""
    try:
        ddb.transact_write_items(
            TransactItems=[
                {
                    "Put": {
                        "TableName": table,
                        "Item": {
                            **ledger.sweep_owner(sweep_id),
                            "execution_arn": {"S": execution_arn},
                            "claimed_at": {"S": now_iso},
                        },
                        "ConditionExpression": "attribute_not_exists(pk) OR execution_arn = :arn",
                        "ExpressionAttributeValues": {":arn": {"S": execution_arn}},
                    }
                },
                {
                    "Put": {
                        "TableName": table,
                        "Item": {
                            **ledger.execution_sweep(execution_arn),
                            "sweep_id": {"S": sweep_id},
                        },
                    }
                },
            ]
        )
    except ClientError as exc:
        if error_code(exc) != "TransactionCanceledException":
            raise
        owner = sweep_owner(ddb, table, sweep_id) or "another execution"
        raise InvalidInput(
            f"invalid sweep input: sweep_id: {sweep_id!r} already belongs to {owner}; "
            "a sweep id names one execution only (leave sweep_id out to use the execution name)"
        ) from exc


def sweep_owner(ddb: Any, table: str, sweep_id: str) -> str | None:
    item = ddb.get_item(TableName=table, Key=ledger.sweep_owner(sweep_id), ConsistentRead=True).get(
        "Item"
    )
    return item["execution_arn"]["S"] if item else None


def sweep_of_execution(ddb: Any, table: str, execution_arn: str) -> str | None:
    item = ddb.get_item(
        TableName=table, Key=ledger.execution_sweep(execution_arn), ConsistentRead=True
    ).get("Item")
    return item["sweep_id"]["S"] if item else None


def month_committed(ddb: Any, table: str, month: str) -> int:
    """Micro-dollars committed in the month: open reservations plus actual spend."""
    item = ddb.get_item(TableName=table, Key=ledger.month_total(month), ConsistentRead=True).get(
        "Item", {}
    )
    return int(item.get("committed", {}).get("N", "0"))


def over_monthly_cap(settings: Settings, month: str, committed: int, total: int) -> OverBudget:
    cap = to_micro(settings.monthly_cap_usd)
    return OverBudget(
        f"monthly cap ${settings.monthly_cap_usd:.2f} would be exceeded by "
        f"${usd(committed + total - cap):.2f}: ${usd(committed):.2f} already committed "
        f"in {month} + this sweep's estimate ${usd(total):.2f}"
    )


def price_sweep(
    state: SweepState, clients: Clients, settings: Settings, now: datetime
) -> Reservation:
    """The sweep's reservation, read-only: priced, and refused (OverBudget) when over the
    sweep's budget or, alone, over the monthly cap. Committing it is `reserve_budget`'s."""
    sweep = state.sweep
    pricing = price_per_hour(
        clients.ec2, sweep.market, sweep.instance_type, sweep.subnets, settings.region
    )
    rate = pricing.reserve_rate
    per_boot = to_micro(rate * boot_seconds(sweep) / 3600)
    # The worst case: every rig x its cap (an adaptive sweep releases what it did not launch).
    boots = sweep.boot_count()
    total = per_boot * boots
    budget = to_micro(sweep.budget_usd)
    month = month_of(now)
    reservation = Reservation(
        price_usd_per_hour=pricing.price,
        price_source=pricing.source,
        max_price_usd_per_hour=pricing.max_price,
        fallback_usd_per_hour=pricing.fallback,
        per_boot_usd=usd(per_boot),
        total_usd=usd(total),
        month=month,
    )
    if total > budget:
        raise OverBudget(
            f"estimate ${usd(total):.2f} ({boots} boots x ${rate:.4f}/h x "
            f"{boot_seconds_text(sweep)}"
            f"{', the most max_boots_per_rig allows' if sweep.adaptive else ''}) is over "
            f"the sweep budget ${sweep.budget_usd:.2f} by ${usd(total - budget):.2f}; lower "
            f"{'max_boots_per_rig' if sweep.adaptive else 'boots'} or deadlines.instance_s, or "
            "raise budget_usd"
        )
    cap = to_micro(settings.monthly_cap_usd)
    if total > cap:
        raise OverBudget(
            f"estimate ${usd(total):.2f} alone is over the monthly cap "
            f"${settings.monthly_cap_usd:.2f} by ${usd(total - cap):.2f}"
        )
    return reservation


def reserve_budget(
    state: SweepState, clients: Clients, settings: Settings, now: datetime
) -> Reservation:
    sweep = state.sweep
    owner = sweep_owner(clients.dynamodb, settings.ledger_table, sweep.sweep_id)
    if owner != sweep.execution_arn:
        raise InvalidInput(
            f"sweep {sweep.sweep_id} belongs to {owner or 'no execution'}, not "
            f"{sweep.execution_arn}: refusing to reserve for it"
        )
    reservation = price_sweep(state, clients, settings, now)
    reserve(
        clients.dynamodb, settings, sweep_id=sweep.sweep_id, execution_arn=sweep.execution_arn,
        month=reservation.month, boots=sweep_boots(sweep),
        per_boot=to_micro(reservation.per_boot_usd), budget=to_micro(sweep.budget_usd),
        price=billed_price(reservation), created_at=now.isoformat(timespec="seconds"),
    )  # fmt: skip
    return reservation


def billed_price(reservation: Reservation) -> float:
    """What each hour is billed at: spot's MaxPrice, the most EC2 may charge (an upper bound);
    on-demand's list price. A fallback to on-demand re-prices its boot at launch (bill_at)."""
    return reservation.max_price_usd_per_hour or reservation.price_usd_per_hour


def reserve(
    ddb: Any,
    settings: Settings,
    *,
    sweep_id: str,
    execution_arn: str,
    month: str,
    boots: list[tuple[str, int]],
    per_boot: int,
    budget: int,
    price: float,
    created_at: str,
) -> None:
    """In one transaction: the month's commitment grows by every boot's `per_boot` micro-USD
    (refused past the monthly cap: OverBudget), the sweep's row opens (the reaper finds it by
    its sparse index) and each boot's row holds its share at `price` USD/h, to be settled by
    `reconcile_boot` or released by `release_unlaunched`. A sweep (or bake) whose reservation
    is already there (a retried step) is left as it is."""
    table = settings.ledger_table
    if existing_reservation(ddb, table, sweep_id):
        return  # a retried step: the reservation is already in the ledger
    total = per_boot * len(boots)
    cap = to_micro(settings.monthly_cap_usd)
    writes: list[Any] = [
        {
            "Update": {
                "TableName": table,
                "Key": ledger.month_total(month),
                "UpdateExpression": "ADD committed :total SET cap = :cap",
                "ConditionExpression": "attribute_not_exists(committed) OR committed <= :headroom",
                "ExpressionAttributeValues": {
                    ":total": {"N": str(total)},
                    ":cap": {"N": str(cap)},
                    ":headroom": {"N": str(cap - total)},
                },
            }
        },
        {
            "Put": {
                "TableName": table,
                "Item": {
                    **ledger.sweep_total(sweep_id),
                    "reserved": {"N": str(total)},
                    "spent": {"N": "0"},
                    "budget": {"N": str(budget)},
                    "month": {"S": month},
                    "created_at": {"S": created_at},
                    "execution_arn": {"S": execution_arn},
                    # Sparse index key: the sweep is open until its summary closes it (or
                    # the reaper does, once its execution has ended some other way).
                    OPEN_ATTRIBUTE: {"S": "1"},
                },
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        },
    ]
    for rig, boot in boots:
        writes.append(
            {
                "Put": {
                    "TableName": table,
                    "Item": {
                        **ledger.boot(sweep_id, rig, boot),
                        "status": {"S": "reserved"},
                        "reserved": {"N": str(per_boot)},
                        "price": {"N": str(to_micro(price))},
                        "month": {"S": month},
                    },
                }
            }
        )
    try:
        ddb.transact_write_items(TransactItems=writes)
    except ClientError as exc:
        if error_code(exc) != "TransactionCanceledException":
            raise
        reasons = exc.response.get("CancellationReasons", [])
        if reasons and reasons[0].get("Code") == "ConditionalCheckFailed":
            committed = month_committed(ddb, table, month)
            raise over_monthly_cap(settings, month, committed, total) from exc
        if existing_reservation(ddb, table, sweep_id):
            return  # a concurrent retry won the race
        raise


@dataclass(frozen=True)
class Billed:
    cost_usd: float  # the boot's whole bill so far
    reconciled: bool  # this call closed the reservation
    settled: bool = True  # False: the boot recorded an instance this bill did not cover


def reconcile_boot(
    ddb: Any,
    table: str,
    sweep_id: str,
    rig: str,
    boot: int,
    by_instance: dict[str, float],
    expect: list[str] | None = None,
) -> Billed:
    """Replace a boot's reservation by its actual cost (each instance's seconds x the reserved
    price), once. `expect` is the set of instances the caller read from the boot's record: if
    another was recorded meanwhile the bill is refused (settled False) and the caller goes
    again. On a boot already reconciled, an instance its bill did not cover (launched after
    the boot was closed) is billed on its own, once."""
    item = ddb.get_item(
        TableName=table, Key=ledger.boot(sweep_id, rig, boot), ConsistentRead=True
    ).get("Item")
    if item is None:
        return Billed(0.0, False)
    price = usd(int(item["price"]["N"]))
    month = item["month"]["S"]
    if item["status"]["S"] != "reserved":
        return _bill_late(ddb, table, sweep_id, rig, boot, item, by_instance)
    seconds = sum(by_instance.values())
    spent = to_micro(price * seconds / 3600)
    reserved = int(item["reserved"]["N"])
    recorded = sorted(set(expect if expect is not None else _ids(item)))
    same_instances = (
        "attribute_not_exists(instance_ids)" if not recorded else "size(instance_ids) = :recorded"
    )
    values: dict[str, Any] = {
        ":done": {"S": "reconciled"},
        ":reserved": {"S": "reserved"},
        ":spent": {"N": str(spent)},
        ":secs": {"N": f"{seconds:.3f}"},
    }
    update = "SET #s = :done, spent = :spent, seconds = :secs"
    if recorded:
        values[":recorded"] = {"N": str(len(recorded))}
    if by_instance:
        values[":billed"] = {"SS": sorted(by_instance)}
        update += ", billed_ids = :billed"
    closed = _close_boot(
        ddb, table, (sweep_id, rig, boot), update, f"#s = :reserved AND {same_instances}",
        values, month=month, reserved=reserved, spent=spent,
    )  # fmt: skip
    if not closed:
        now_item = boot_record(ddb, table, sweep_id, rig, boot)
        if now_item.get("status", {}).get("S") == "reserved":
            return Billed(usd(spent), False, settled=False)  # gained an instance: go again
        # Reconciled by a concurrent caller: bill what its bill did not cover.
        return _bill_late(ddb, table, sweep_id, rig, boot, now_item, by_instance)
    return Billed(usd(spent), True)


def _ids(item: dict[str, Any], name: str = "instance_ids") -> list[str]:
    return list(item.get(name, {}).get("SS", []))


def _bill_late(
    ddb: Any,
    table: str,
    sweep_id: str,
    rig: str,
    boot: int,
    item: dict[str, Any],
    by_instance: dict[str, float],
) -> Billed:
    """Bill, each once, the instances a closed boot's bill did not cover."""
    price = usd(int(item["price"]["N"]))
    month = item["month"]["S"]
    total = int(item.get("spent", {}).get("N", "0"))
    billed = set(_ids(item, "billed_ids"))
    for instance_id, seconds in sorted(by_instance.items()):
        if instance_id in billed:
            continue
        spent = to_micro(price * seconds / 3600)
        writes = [
            {
                "Update": {
                    "TableName": table,
                    "Key": ledger.boot(sweep_id, rig, boot),
                    "UpdateExpression": "ADD spent :spent, seconds :secs, billed_ids :id",
                    "ConditionExpression": "NOT contains(billed_ids, :one)",
                    "ExpressionAttributeValues": {
                        ":spent": {"N": str(spent)},
                        ":secs": {"N": f"{seconds:.3f}"},
                        ":id": {"SS": [instance_id]},
                        ":one": {"S": instance_id},
                    },
                }
            },
            {
                "Update": {
                    "TableName": table,
                    "Key": ledger.sweep_total(sweep_id),
                    "UpdateExpression": "ADD spent :spent",
                    "ExpressionAttributeValues": {":spent": {"N": str(spent)}},
                }
            },
        ]
        if not write_with_month(ddb, table, writes, month, spent):
            continue  # billed by a concurrent caller
        total += spent
        logger.warning(
            "billed an instance of a closed boot",
            extra={"instance": instance_id, "seconds": round(seconds, 3), "boot": boot},
        )
    return Billed(usd(total), False)


class BootEnded(Exception):
    """The boot's reservation is already reconciled: launching for it now would leak."""


def anchor_launch(ddb: Any, table: str, sweep_id: str, rig: str, boot: int, now: float) -> float:
    """The time of the boot's first launch attempt, written once: every retry computes the
    same deadline from it, so its RunInstances parameters (and ClientToken) are identical."""
    try:
        item = ddb.update_item(
            TableName=table,
            Key=ledger.boot(sweep_id, rig, boot),
            UpdateExpression="SET launch_anchor = if_not_exists(launch_anchor, :now)",
            ConditionExpression="#s = :reserved",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={
                ":now": {"N": f"{now:.3f}"},
                ":reserved": {"S": "reserved"},
            },
            ReturnValues="ALL_NEW",
        )["Attributes"]
    except ClientError as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            raise BootEnded(
                f"{rig} boot {boot} of sweep {sweep_id} has no open reservation (it was "
                "already ended): not launching"
            ) from exc
        raise
    return float(item["launch_anchor"]["N"])


def record_instance(
    ddb: Any, table: str, sweep_id: str, rig: str, boot: int, instance_id: str, launched_at: float
) -> None:
    ddb.update_item(
        TableName=table,
        Key=ledger.boot(sweep_id, rig, boot),
        UpdateExpression=(
            "ADD instance_ids :id SET launched_at = if_not_exists(launched_at, :at), "
            "last_seen = if_not_exists(last_seen, :at), "
            "#launched = if_not_exists(#launched, :at), #seen = if_not_exists(#seen, :at)"
        ),
        ExpressionAttributeNames={
            "#launched": f"launched_at:{instance_id}",
            "#seen": f"last_seen:{instance_id}",
        },
        ExpressionAttributeValues={
            ":id": {"SS": [instance_id]},
            ":at": {"N": f"{launched_at:.3f}"},
        },
    )


def bill_at(ddb: Any, table: str, sweep_id: str, rig: str, boot: int, price: float) -> None:
    """The boot is billed at `price` per hour from now on (a spot-or-on-demand boot that fell
    back to on-demand: its list price, which its reservation covers)."""
    ddb.update_item(
        TableName=table,
        Key=ledger.boot(sweep_id, rig, boot),
        UpdateExpression="SET price = :price",
        ConditionExpression="attribute_exists(pk)",
        ExpressionAttributeValues={":price": {"N": str(to_micro(price))}},
    )


def saw_instance(
    ddb: Any, table: str, sweep_id: str, rig: str, boot: int, instance_id: str, now: float
) -> None:
    """The boot's instance answered at `now`: what a vanished instance is billed up to."""
    ddb.update_item(
        TableName=table,
        Key=ledger.boot(sweep_id, rig, boot),
        UpdateExpression="SET last_seen = :now, #seen = :now",
        ConditionExpression="attribute_exists(pk)",
        ExpressionAttributeNames={"#seen": f"last_seen:{instance_id}"},
        ExpressionAttributeValues={":now": {"N": f"{now:.3f}"}},
    )


def record_times(record: dict[str, Any], name: str) -> dict[str, float]:
    """Instance id -> its `launched_at` or `last_seen`, from a boot's record; a record written
    before times were kept per instance gives the boot's one time to its first instance."""
    times = {
        key.split(":", 1)[1]: float(value["N"])
        for key, value in record.items()
        if key.startswith(f"{name}:")
    }
    first = sorted(_ids(record))[:1]
    if not times and first and name in record:
        times[first[0]] = float(record[name]["N"])
    return times


def boot_record(ddb: Any, table: str, sweep_id: str, rig: str, boot: int) -> dict[str, Any]:
    return dict(
        ddb.get_item(
            TableName=table,
            Key=ledger.boot(sweep_id, rig, boot),
            ConsistentRead=True,
        ).get("Item", {})
    )


def _close_boot(
    ddb: Any,
    table: str,
    key: tuple[str, str, int],
    update: str,
    condition: str,
    values: dict[str, Any],
    *,
    month: str,
    reserved: int,
    spent: int,
) -> bool:
    """Close one boot's ledger item (`update` where `condition` holds) and settle its
    reservation at what it spent (micro-USD), in one transaction: the sweep's reservation gives
    back `reserved` and adds `spent`; the month's commitment moves by the difference. False
    when the condition no longer held (nothing written)."""
    sweep_id, rig, boot = key
    boot_update = {
        "TableName": table,
        "Key": ledger.boot(sweep_id, rig, boot),
        "UpdateExpression": update,
        "ConditionExpression": condition,
        "ExpressionAttributeNames": {"#s": "status"},
        "ExpressionAttributeValues": values,
    }
    sweep_update = {
        "TableName": table,
        "Key": ledger.sweep_total(sweep_id),
        "UpdateExpression": "ADD reserved :release, spent :spent",
        "ExpressionAttributeValues": {
            ":release": {"N": str(-reserved)},
            ":spent": {"N": str(spent)},
        },
    }
    writes = [{"Update": boot_update}, {"Update": sweep_update}]
    return write_with_month(ddb, table, writes, month, spent - reserved)


def month_update(
    ddb: Any, table: str, month: str, delta: int, cap: int | None = None
) -> dict[str, Any]:
    """The month's update for a change of `delta` micro-USD in what it has committed. A release
    (delta <= 0) goes in as is. A charge goes into `committed` only up to the month's cap (the
    `cap` its reservations recorded, else the one given), and what is left over into `overrun`:
    spent, so recorded, but `committed` never passes the cap, so every later reservation is
    refused. Conditioned on the `committed` it read: a concurrent change fails it."""
    key = ledger.month_total(month)
    if delta <= 0:
        return {
            "TableName": table,
            "Key": key,
            "UpdateExpression": "ADD committed :delta",
            "ExpressionAttributeValues": {":delta": {"N": str(delta)}},
        }
    item = ddb.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item", {})
    seen = int(item["committed"]["N"]) if "committed" in item else None
    limit = int(item["cap"]["N"]) if "cap" in item else cap
    charge = delta if limit is None else min(delta, max(0, limit - (seen or 0)))
    values: dict[str, Any] = {":charge": {"N": str(charge)}}
    update = "ADD committed :charge"
    if charge < delta:
        values[":over"] = {"N": str(delta - charge)}
        update += ", overrun :over"
        logger.error(
            "spend passed the monthly cap: recorded as the month's overrun",
            extra={"month": month, "overrun_usd": usd(delta - charge)},
        )
    if seen is None:
        condition = "attribute_not_exists(committed)"
    else:
        condition = "committed = :seen"
        values[":seen"] = {"N": str(seen)}
    return {
        "TableName": table,
        "Key": key,
        "UpdateExpression": update,
        "ConditionExpression": condition,
        "ExpressionAttributeValues": values,
    }


def write_with_month(
    ddb: Any,
    table: str,
    writes: list[dict[str, Any]],
    month: str,
    delta: int,
    cap: int | None = None,
) -> bool:
    """`writes` and the month's `month_update` in one transaction, read again and retried
    while only the month's condition failed (a concurrent charge). False when one of `writes`'
    own conditions failed (nothing written)."""
    for _ in range(MONTH_CHARGE_ATTEMPTS):
        month_write = {"Update": month_update(ddb, table, month, delta, cap)}
        try:
            ddb.transact_write_items(TransactItems=[*writes, month_write])
        except ClientError as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
            reasons = [r.get("Code", "None") for r in exc.response.get("CancellationReasons", [])]
            if any(code not in ("None", "") for code in reasons[: len(writes)]) or not reasons:
                return False
            continue  # only the month moved meanwhile: read it again
        return True
    raise RuntimeError(f"the ledger's {month} total kept changing while charging it")


def release_unlaunched(ddb: Any, table: str, sweep_id: str) -> list[tuple[str, int]]:
    """Give back the reservation of every boot that never began to launch (an adaptive sweep
    stopped before its cap, or a decision failed): the boot is closed as "released" (nothing
    spent), so that Launch refuses it from now on (`anchor_launch` needs "reserved"). A boot
    that began to launch (`launch_anchor`) is Finish's, the reaper's or the sweep end's to bill.
    Returns the boots released."""
    released = []
    for record in open_boot_items(ddb, table, sweep_id):  # Query only: Summarize's grant
        if "launch_anchor" in record or _ids(record):
            continue
        rig, boot = ledger.rig_boot_of_sk(record["sk"]["S"])
        reserved = int(record["reserved"]["N"])
        values = {
            ":released": {"S": ledger.RELEASED},
            ":reserved": {"S": "reserved"},
            ":zero": {"N": "0"},
        }
        if _close_boot(
            ddb, table, (sweep_id, rig, boot), "SET #s = :released, spent = :zero",
            "#s = :reserved AND attribute_not_exists(launch_anchor)", values,
            month=record["month"]["S"], reserved=reserved, spent=0,
        ):  # fmt: skip
            released.append((rig, boot))
        # else it began to launch or was closed meanwhile: not this function's to release
    return released


def close_sweep(ddb: Any, table: str, sweep_id: str) -> None:
    try:
        ddb.update_item(
            TableName=table,
            Key=ledger.sweep_total(sweep_id),
            UpdateExpression="REMOVE #open",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeNames={"#open": OPEN_ATTRIBUTE},
        )
    except ClientError as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise  # no reservation was ever made: nothing to close


def open_sweeps(ddb: Any, table: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for page in ddb.get_paginator("query").paginate(
        TableName=table,
        IndexName=OPEN_SWEEPS_INDEX,
        KeyConditionExpression="#open = :one",
        ExpressionAttributeNames={"#open": OPEN_ATTRIBUTE},
        ExpressionAttributeValues={":one": {"S": "1"}},
    ):
        items.extend(page["Items"])
    return items


def open_boots(ddb: Any, table: str, sweep_id: str) -> list[tuple[str, int]]:
    """(rig, boot) of the sweep's boots still holding a reservation."""
    return [
        ledger.rig_boot_of_sk(item["sk"]["S"]) for item in open_boot_items(ddb, table, sweep_id)
    ]


def boot_items(ddb: Any, table: str, sweep_id: str) -> list[dict[str, Any]]:
    """Every boot of the sweep in the ledger, open or closed."""
    found = []
    for page in ddb.get_paginator("query").paginate(
        TableName=table,
        KeyConditionExpression="pk = :pk AND begins_with(sk, :boot)",
        ExpressionAttributeValues={
            ":pk": {"S": ledger.sweep_pk(sweep_id)},
            ":boot": {"S": ledger.BOOT_PREFIX},
        },
        ConsistentRead=True,
    ):
        found += page["Items"]
    return found


def open_boot_items(ddb: Any, table: str, sweep_id: str) -> list[dict[str, Any]]:
    return [i for i in boot_items(ddb, table, sweep_id) if i["status"]["S"] == "reserved"]


@instrumented
@event_parser(model=SweepState)
def handler(event: SweepState, context: LambdaContext) -> dict[str, Any]:
    reservation = reserve_budget(event, Clients(), Settings.from_env(), datetime.now(UTC))
    return reservation.model_dump(mode="json")
