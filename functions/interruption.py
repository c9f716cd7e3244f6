"""EventBridge "EC2 Spot Instance Interruption Warning": mark the boot interrupted, so the
step polling it fails with a clear InstanceLost instead of waiting out a deadline."""

from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.events import SpotInterruptionEvent
from functions.instance_state import instance_state
from functions.observability import instrumented, logger
from functions.settings import PROJECT_TAG, Clients, Settings
from functions.tables import ledger


def record_interruption(event: SpotInterruptionEvent, clients: Clients, settings: Settings) -> bool:
    instance_id = event.detail.instance_id
    if instance_state(clients.ec2, instance_id) == "gone":
        return False
    described = clients.ec2.describe_instances(InstanceIds=[instance_id])
    tags = {
        t["Key"]: t["Value"] for t in described["Reservations"][0]["Instances"][0].get("Tags", [])
    }
    if tags.get(PROJECT_TAG) != settings.project:
        return False  # not ours
    warned_at = event.time or datetime.now(UTC).isoformat(timespec="seconds")
    item = {
        **ledger.interruption(instance_id),
        "warned_at": {"S": warned_at},
        "action": {"S": event.detail.instance_action},
    }
    item.update(
        {k.split(":", 1)[1]: {"S": v} for k, v in tags.items() if k.startswith("rigbench:")}
    )
    clients.dynamodb.put_item(TableName=settings.ledger_table, Item=item)
    logger.warning("spot interruption warning", extra={"instance": instance_id})
    return True


@instrumented
@event_parser(model=SpotInterruptionEvent)
def handler(event: SpotInterruptionEvent, context: LambdaContext) -> dict[str, Any]:
    return {"recorded": record_interruption(event, Clients(), Settings.from_env())}
