"""Launch one instance for a rig x boot: spot (or on-demand when asked), each subnet in turn;
a spot-or-on-demand sweep tries on-demand in each subnet when no subnet had spot. When every
subnet refused and one was only busy, `CapacityRefused` asks the state machine to try again
after a backoff, until the boot's ready deadline (counted from its first try), then
`CapacityUnavailable`; at once when no subnet sells the type."""

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.serialization.pydantic import PydanticSerializer
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from functions import clock
from functions.bootstrap import instance_plan, user_data
from functions.budget import (
    BootEnded,
    anchor_launch,
    bill_at,
    boot_record,
    record_instance,
    subnet_zones,
)
from functions.cleanup import end_boot, end_replaced
from functions.deadline import schedule_deadline
from functions.errors import CapacityRefused, CapacityUnavailable, error_code
from functions.events import BootState, Instance
from functions.observability import instrumented, logger, metrics
from functions.settings import (
    BOOT_TAG,
    DEADLINE_TAG,
    PROJECT_TAG,
    RIG_TAG,
    SWEEP_TAG,
    Clients,
    Settings,
)

# Errors that mean "not now": try the next subnet/AZ, and all of them again after a backoff.
BUSY_ERRORS = frozenset(
    {
        "InsufficientInstanceCapacity",
        "MaxSpotInstanceCountExceeded",
        "SpotMaxPriceTooLow",
        "InsufficientCapacity",
    }
)
# ... and "not here" (the type is not sold in that zone): the next subnet, but never again.
CAPACITY_ERRORS = BUSY_ERRORS | {"Unsupported"}


def instance_tags(state: BootState, settings: Settings, deadline_at: float) -> list[dict[str, str]]:
    return [
        {"Key": PROJECT_TAG, "Value": settings.project},
        {"Key": SWEEP_TAG, "Value": state.sweep.sweep_id},
        {"Key": RIG_TAG, "Value": state.rig},
        {"Key": BOOT_TAG, "Value": str(state.boot)},
        {"Key": DEADLINE_TAG, "Value": str(int(deadline_at))},
        {"Key": "Name", "Value": f"rigbench-{state.sweep.sweep_id}-{state.rig}-{state.boot}"},
    ]


@dataclass(frozen=True)
class LaunchImage:
    image_id: str
    root_device: str
    root_size_gib: int | None = None


Market = Literal["spot", "on-demand"]


def markets(market: str) -> list[Market]:
    """The markets a launch tries, in order."""
    if market == "spot-or-on-demand":
        return ["spot", "on-demand"]
    return ["on-demand"] if market == "on-demand" else ["spot"]


def client_token(state: BootState, subnet: str, market: Market = "spot") -> str:
    key = f"{state.sweep.sweep_id}/{state.rig}/{state.boot}/{subnet}"
    if market == "on-demand" and state.sweep.market == "spot-or-on-demand":
        key += "/on-demand"  # the fallback's parameters differ from the spot try's
    if state.interruptions:  # a relaunch after a spot reclaim is a new instance
        key += f"/relaunch-{state.interruptions}"
    return hashlib.sha256(key.encode()).hexdigest()[:64]


def run_params(
    state: BootState,
    settings: Settings,
    image: LaunchImage,
    subnet: str,
    deadline_at: float,
    market: Market | None = None,
) -> dict[str, Any]:
    sweep = state.sweep
    market = market or markets(sweep.market)[0]
    plan = instance_plan(state, settings, deadline_at)
    tags = instance_tags(state, settings, deadline_at)
    params: dict[str, Any] = {
        "ImageId": image.image_id,
        "InstanceType": sweep.instance_type,
        "MinCount": 1,
        "MaxCount": 1,
        "SubnetId": subnet,
        "SecurityGroupIds": [settings.security_group_id],
        "IamInstanceProfile": {"Arn": settings.instance_profile_arn},
        "UserData": user_data(plan),
        "InstanceInitiatedShutdownBehavior": "terminate",
        "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
        "BlockDeviceMappings": [encrypted_root(image)],
        "TagSpecifications": [
            {"ResourceType": "instance", "Tags": tags},
            {"ResourceType": "volume", "Tags": tags},
        ],
        "ClientToken": client_token(state, subnet, market),
    }
    if market == "spot":
        reservation = state.reservation
        max_price = reservation.max_price_usd_per_hour or reservation.price_usd_per_hour
        params["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {
                # Never pay more per hour than was reserved: the ledger's bound holds.
                "MaxPrice": f"{max_price:.6f}",
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            },
        }
    return params


def resolve_image(ssm: Any, image: str) -> str:
    """An AMI id as is; an SSM parameter name (the DLAMI's, a baked image's) to its value."""
    if image.startswith("ami-"):
        return image
    return str(ssm.get_parameter(Name=image)["Parameter"]["Value"])


def launch_image(ec2: Any, ssm: Any, image: str) -> LaunchImage:
    """The AMI to launch and its root device (whose volume the launch encrypts)."""
    image_id = resolve_image(ssm, image)
    described = ec2.describe_images(ImageIds=[image_id])["Images"]
    if not described:
        raise ValueError(f"AMI {image_id} ({image}) not found in this region")
    root_device = str(described[0].get("RootDeviceName") or "/dev/sda1")
    sizes = [
        m["Ebs"]["VolumeSize"]
        for m in described[0].get("BlockDeviceMappings", [])
        if m.get("DeviceName") == root_device and "VolumeSize" in m.get("Ebs", {})
    ]
    return LaunchImage(image_id, root_device, int(sizes[0]) if sizes else None)


def encrypted_root(image: LaunchImage, size_gib: int | None = None) -> dict[str, Any]:
    """The root volume, encrypted whatever the account's default (IAM requires it), of the
    image's own size unless asked for more."""
    ebs: dict[str, Any] = {"Encrypted": True, "VolumeType": "gp3"}
    size = max(filter(None, (size_gib, image.root_size_gib)), default=None)
    if size is not None:
        ebs["VolumeSize"] = size
    return {"DeviceName": image.root_device, "Ebs": ebs}


def refuse_if_closed_meanwhile(
    state: BootState, clients: Clients, settings: Settings, instance_id: str
) -> None:
    """The execution may have ended (a stop, a timeout) while RunInstances ran, and its
    cleanup closed the boot before this instance existed: end and bill it here, now."""
    record = boot_record(
        clients.dynamodb, settings.ledger_table, state.sweep.sweep_id, state.rig, state.boot
    )
    if record.get("status", {}).get("S") == "reserved":
        return
    ended = end_boot(
        clients.ec2, clients.dynamodb, settings.ledger_table, settings.project,
        state.sweep.sweep_id, state.rig, state.boot,
    )  # fmt: skip
    logger.warning(
        "boot closed while launching: ended what was launched",
        extra={"instance": instance_id, "terminated": ended.terminated},
    )
    raise BootEnded(
        f"{state.rig} boot {state.boot} of sweep {state.sweep.sweep_id} was closed while "
        f"{instance_id} launched: terminated and billed it"
    )


def launch_instance(state: BootState, clients: Clients, settings: Settings, now: float) -> Instance:
    """Launch, or (a retry) get back the instance the first attempt launched: the deadline
    comes from the boot's first attempt, so every retry sends the same parameters and EC2's
    ClientToken returns the same instance instead of a second one."""
    sweep = state.sweep
    anchor = anchor_launch(
        clients.dynamodb, settings.ledger_table, sweep.sweep_id, state.rig, state.boot, now
    )
    deadline_at = float(int(anchor + sweep.deadlines.instance_s))
    image = launch_image(clients.ec2, clients.ssm, state.plan.image)
    zones = subnet_zones(clients.ec2, sweep.subnets)
    refused: list[str] = []
    busy = False
    for market in markets(sweep.market):
        for subnet in sweep.subnets:
            try:
                response = clients.ec2.run_instances(
                    **run_params(state, settings, image, subnet, deadline_at, market)
                )
            except ClientError as exc:
                code = error_code(exc)
                if code not in CAPACITY_ERRORS:
                    raise
                busy = busy or code in BUSY_ERRORS
                refused.append(f"{subnet} ({zones.get(subnet, '?')}, {market}): {code}")
                logger.warning(
                    "launch refused", extra={"subnet": subnet, "market": market, "code": code}
                )
                continue
            launched = response["Instances"][0]
            return launched_instance(
                state, clients, settings, launched, (subnet, zones), image, market, deadline_at,
                refused, now,
            )  # fmt: skip
    what = f"no {sweep.market} capacity for {sweep.instance_type} in any subnet"
    ready_by = anchor + sweep.deadlines.ready_s
    if busy and now < ready_by:
        raise CapacityRefused(
            f"{what} (tried again after a backoff until {ready_by - anchor:.0f} s after the "
            "first try): " + "; ".join(refused)
        )
    tried = (
        f"tried for {now - anchor:.0f} s (the ready deadline, {sweep.deadlines.ready_s} s)"
        if busy
        else "no subnet sells it (Unsupported): not tried again"
    )
    raise CapacityUnavailable(f"{what}, {tried}: " + "; ".join(refused))


def launched_instance(
    state: BootState,
    clients: Clients,
    settings: Settings,
    launched: Any,  # RunInstances' Instances[0]
    where: tuple[str, dict[str, str]],
    image: LaunchImage,
    market: Market,
    deadline_at: float,
    refused: list[str],
    requested_at: float,
) -> Instance:
    """Record what RunInstances launched (a fallback to on-demand billed at its price), end it
    if the boot was closed meanwhile, and arm its deadline."""
    sweep = state.sweep
    subnet, zones = where
    launched_at = launched["LaunchTime"].timestamp()
    record_instance(
        clients.dynamodb,
        settings.ledger_table,
        sweep.sweep_id,
        state.rig,
        state.boot,
        launched["InstanceId"],
        launched_at,
    )
    if market == "on-demand" and sweep.market == "spot-or-on-demand":
        bill_at(
            clients.dynamodb, settings.ledger_table, sweep.sweep_id, state.rig, state.boot,
            state.reservation.fallback_usd_per_hour,
        )  # fmt: skip
    refuse_if_closed_meanwhile(state, clients, settings, launched["InstanceId"])
    if state.interruptions:  # the warned instance must not run on beside its replacement
        end_replaced(
            clients.ec2, settings.project, sweep.sweep_id, state.rig, state.boot,
            launched["InstanceId"],
        )  # fmt: skip
    if settings.deadline_role_arn:
        schedule_deadline(
            clients.scheduler, settings.deadline_role_arn, launched["InstanceId"], deadline_at
        )
    metrics.add_metric(name="InstancesLaunched", unit=MetricUnit.Count, value=1)
    return Instance(
        instance_id=launched["InstanceId"],
        subnet_id=subnet,
        availability_zone=zones.get(subnet, launched["Placement"]["AvailabilityZone"]),
        image_id=image.image_id,
        instance_type=sweep.instance_type,
        market=market,
        launched_at=launched_at,
        ready_deadline_at=launched_at + sweep.deadlines.ready_s,
        deadline_at=deadline_at,
        refused=refused,
        requested_at=requested_at,
    )


@instrumented
@event_parser(model=BootState)
def handler(event: BootState, context: LambdaContext) -> dict[str, Any]:
    settings = Settings.from_env()
    config = IdempotencyConfig(
        # The sweep id belongs to one execution (claimed in Validate); the ARN is belt and braces.
        event_key_jmespath="[sweep.sweep_id, sweep.execution_arn, rig, boot, interruptions]",
        expires_after_seconds=event.sweep.deadlines.instance_s,
    )
    config.register_lambda_context(context)
    clients = Clients()

    @idempotent_function(
        data_keyword_argument="state",
        config=config,
        persistence_store=DynamoDBPersistenceLayer(
            table_name=settings.idempotency_table, boto3_client=clients.dynamodb
        ),
        output_serializer=PydanticSerializer,
    )
    def launch_once(state: BootState) -> Instance:
        return launch_instance(state, clients, settings, clock.now())

    instance = launch_once(state=event)
    return instance.model_dump(mode="json")
