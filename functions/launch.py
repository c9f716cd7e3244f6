"""Launch one instance for a rig x boot: spot (or on-demand when asked), each subnet in turn."""

import hashlib
from dataclasses import dataclass
from typing import Any

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
from functions.budget import BootEnded, anchor_launch, boot_record, record_instance, subnet_zones
from functions.cleanup import end_boot, end_replaced
from functions.deadline import schedule_deadline
from functions.errors import CapacityUnavailable, error_code
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

# Errors that mean "not here, not now": try the next subnet/AZ.
CAPACITY_ERRORS = frozenset(
    {
        "InsufficientInstanceCapacity",
        "MaxSpotInstanceCountExceeded",
        "SpotMaxPriceTooLow",
        "Unsupported",
        "InsufficientCapacity",
    }
)


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


def client_token(state: BootState, subnet: str) -> str:
    key = f"{state.sweep.sweep_id}/{state.rig}/{state.boot}/{subnet}"
    if state.interruptions:  # a relaunch after a spot reclaim is a new instance
        key += f"/relaunch-{state.interruptions}"
    return hashlib.sha256(key.encode()).hexdigest()[:64]


def run_params(
    state: BootState,
    settings: Settings,
    image: LaunchImage,
    subnet: str,
    deadline_at: float,
) -> dict[str, Any]:
    sweep = state.sweep
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
        "ClientToken": client_token(state, subnet),
    }
    if sweep.market == "spot":
        params["InstanceMarketOptions"] = {
            "MarketType": "spot",
            "SpotOptions": {
                # Never pay more per hour than was reserved: the ledger's bound holds.
                "MaxPrice": f"{state.reservation.price_usd_per_hour:.6f}",
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
    for subnet in sweep.subnets:
        try:
            response = clients.ec2.run_instances(
                **run_params(state, settings, image, subnet, deadline_at)
            )
        except ClientError as exc:
            code = error_code(exc)
            if code not in CAPACITY_ERRORS:
                raise
            refused.append(f"{subnet} ({zones.get(subnet, '?')}): {code}")
            logger.warning("launch refused", extra={"subnet": subnet, "code": code})
            continue
        launched = response["Instances"][0]
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
            market=sweep.market,
            launched_at=launched_at,
            ready_deadline_at=launched_at + sweep.deadlines.ready_s,
            deadline_at=deadline_at,
            refused=refused,
            requested_at=now,
        )
    raise CapacityUnavailable(
        f"no {sweep.market} capacity for {sweep.instance_type} in any subnet: " + "; ".join(refused)
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
