"""What an instance was charged per hour over its life: the spot price history of its zone and
type, weighted by how long each price held while it ran. The reservation's price (the spot
MaxPrice) stays the bound the budget holds; this is the price the cost per token is quoted at.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict

# Spot prices change a few times a day at most: the price in force at launch was set at most
# this long before it, in practice.
LOOKBACK = timedelta(hours=24)


class PricePaid(BaseModel):
    model_config = ConfigDict(frozen=True)

    usd_per_hour: float
    source: str  # where it came from, in words


def mean_price(changes: list[tuple[float, float]], start: float, end: float) -> float | None:
    """The time-weighted mean over [start, end] of a price that changed at each (epoch, price);
    the last change at or before `start` is the price in force then (else the first one)."""
    ordered = sorted(changes)
    if not ordered:
        return None
    if end <= start:
        before = [p for t, p in ordered if t <= start]
        return before[-1] if before else ordered[0][1]
    total = 0.0
    for i, (at, price) in enumerate(ordered):
        begins = start if i == 0 else max(at, start)
        ends = ordered[i + 1][0] if i + 1 < len(ordered) else end
        total += price * max(0.0, min(ends, end) - begins)
    return total / (end - start)


def spot_price_paid(
    ec2: Any, instance_type: str, availability_zone: str, start: float, end: float
) -> PricePaid | None:
    """The mean spot price of `instance_type` in `availability_zone` from `start` to `end`
    (epoch seconds); None when the history has no entry for them."""
    response = ec2.describe_spot_price_history(
        InstanceTypes=[instance_type],
        ProductDescriptions=["Linux/UNIX"],
        AvailabilityZone=availability_zone,
        StartTime=datetime.fromtimestamp(start, UTC) - LOOKBACK,
        EndTime=datetime.fromtimestamp(end, UTC),
    )
    changes = [
        (entry["Timestamp"].timestamp(), float(entry["SpotPrice"]))
        for entry in response["SpotPriceHistory"]
        if entry["AvailabilityZone"] == availability_zone and entry["Timestamp"].timestamp() <= end
    ]
    price = mean_price(changes, start, end)
    if price is None:
        return None
    return PricePaid(
        usd_per_hour=round(price, 6),
        source=f"spot price history of {instance_type} in {availability_zone}, time-weighted "
        f"over the instance's {end - start:.0f} s from launch to its results",
    )
