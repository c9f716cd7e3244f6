"""Quota room: the Service Quotas vCPU limit for G instances minus the vCPUs already running."""

from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.errors import QuotaExhausted
from functions.events import Quota, SweepState
from functions.observability import instrumented
from functions.settings import Clients

SPOT_G_VT_QUOTA = "L-3819A6DF"  # All G and VT Spot Instance Requests (vCPU)
ON_DEMAND_G_VT_QUOTA = "L-DB2E81BA"  # Running On-Demand G and VT instances (vCPU)
INLINE_MAP_MAX_CONCURRENCY = 40


def quota_code(market: str) -> str:
    """The quota a market's launches count against (spot-or-on-demand: spot's; a fallback
    needs room in the on-demand quota too, which EC2 checks at the launch)."""
    return ON_DEMAND_G_VT_QUOTA if market == "on-demand" else SPOT_G_VT_QUOTA


def is_g_or_vt(instance_type: str) -> bool:
    family = instance_type.split(".", 1)[0]
    return family.startswith("g") or family.startswith("vt")


def instance_vcpus(ec2: Any, instance_types: list[str]) -> dict[str, int]:
    unique = sorted(set(instance_types))
    found = ec2.describe_instance_types(InstanceTypes=unique)["InstanceTypes"]
    return {t["InstanceType"]: int(t["VCpuInfo"]["DefaultVCpus"]) for t in found}


def running_g_vcpus(ec2: Any, market: str) -> int:
    """vCPUs of pending/running G and VT instances in this market (spot or on-demand)."""
    instances = []
    for page in ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
    ):
        for reservation in page["Reservations"]:
            instances.extend(reservation["Instances"])
    counted = [
        i["InstanceType"]
        for i in instances
        if is_g_or_vt(i["InstanceType"])
        and (i.get("InstanceLifecycle") == "spot") == (market != "on-demand")
    ]
    if not counted:
        return 0
    vcpus = instance_vcpus(ec2, counted)
    return sum(vcpus[t] for t in counted)


def check_quota(state: SweepState, clients: Clients) -> Quota:
    sweep = state.sweep
    code = quota_code(sweep.market)
    value = float(
        clients.service_quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"][
            "Value"
        ]
    )
    need = instance_vcpus(clients.ec2, [sweep.instance_type])[sweep.instance_type]
    used = running_g_vcpus(clients.ec2, sweep.market)
    room = value - used
    fits = int(room // need) if room > 0 else 0
    if fits < 1:
        raise QuotaExhausted(
            f"{sweep.market} G/VT vCPU quota {code} is {value:g} with {used} in use: "
            f"room for {max(room, 0):g} vCPU, {sweep.instance_type} needs {need}; "
            "request an increase in Service Quotas"
        )
    return Quota(
        quota_code=code,
        quota_vcpus=value,
        used_vcpus=used,
        room_vcpus=room,
        instance_vcpus=need,
        max_concurrency=min(fits, len(state.items), INLINE_MAP_MAX_CONCURRENCY),
    )


@instrumented
@event_parser(model=SweepState)
def handler(event: SweepState, context: LambdaContext) -> dict[str, Any]:
    quota = check_quota(event, Clients())
    return quota.model_dump(mode="json")
