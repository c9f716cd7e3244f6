"""Prices and billed time: per-region on-demand prices, never another region's; an instance's
end read from what EC2 reports."""

from datetime import UTC, datetime

import pytest

from functions.budget import on_demand_price
from functions.cleanup import ended_at
from functions.errors import OverBudget
from hardware.instance_types import get_instance_type


def test_on_demand_price_is_per_region_from_the_one_catalog() -> None:
    """Sweeps price on-demand from the catalog bakes price from, in each region it lists."""
    assert on_demand_price("us-east-1", "g5g.2xlarge") == 0.556
    assert on_demand_price("us-west-2", "g4dn.xlarge") == get_instance_type("g4dn.xlarge").price(
        "us-west-2"
    )
    assert on_demand_price("us-east-1", "g5.xlarge") == 1.006


def test_an_unknown_region_is_refused_by_name_not_priced_as_us_east_1() -> None:
    with pytest.raises(OverBudget, match=r"no on-demand price for g5g\.2xlarge in eu-west-1"):
        on_demand_price("eu-west-1", "g5g.2xlarge")


def test_an_unknown_type_is_refused() -> None:
    with pytest.raises(OverBudget, match=r"instance type 'p5\.48xlarge' is not supported"):
        on_demand_price("us-east-1", "p5.48xlarge")


def test_end_time_comes_from_the_state_transition_reason() -> None:
    instance = {"StateTransitionReason": "User initiated (2026-12-02 20:30:05 GMT)"}
    assert (
        ended_at(instance, fallback=0.0) == datetime(2026, 12, 2, 20, 30, 5, tzinfo=UTC).timestamp()
    )
    assert ended_at({"StateTransitionReason": ""}, fallback=42.0) == 42.0
