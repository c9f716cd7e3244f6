"""First state: validate the execution input against the stack and plan the rig x boot items."""

import json
import re
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from functions.boot_executions import boot_execution_name
from functions.boot_plan import plan_boot, require_baked_images
from functions.budget import claim_sweep
from functions.errors import InvalidInput
from functions.events import BootItem, BundleRef, SweepConfig, SweepState, ValidateEvent
from functions.execution_input import parse_sweep_input
from functions.observability import instrumented, metrics
from functions.settings import Clients, Settings
from rigs.sources import ModelSourceError, hub_commit, hub_repo


def read_bundle(s3: Any, bucket: str, manifest_key: str) -> BundleRef:
    """The manifest `rigbench deploy` wrote beside the bundle: which rigs it holds, its hash."""
    try:
        body = s3.get_object(Bucket=bucket, Key=manifest_key)["Body"].read()
    except ClientError as exc:
        raise InvalidInput(
            f"no rig bundle at s3://{bucket}/{manifest_key}: run `rigbench deploy` first"
        ) from exc
    return BundleRef.model_validate(json.loads(body))


def pinned_revision(model: str, revision: str | None) -> str | None:
    """The commit every boot of a hub model loads, resolved once, here: the input's revision
    (a branch or tag too), else the main branch, as the hub answers now. Where the hub cannot
    be reached the revision stays as given, and each boot's rows record what its rig loaded
    (a comparison of boots that loaded different commits gives no verdicts)."""
    repo = hub_repo(model)
    if repo is None:
        return revision
    try:
        return hub_commit(repo, revision) or revision
    except ModelSourceError as err:
        raise InvalidInput(f"invalid sweep input: model_revision: {err}") from None


def sweep_id_from(execution_name: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", execution_name.lower()).strip("-")[:63] or "sweep"


def validate_sweep(
    event: ValidateEvent, clients: Clients, settings: Settings, now: datetime
) -> SweepState:
    state = check_sweep(event, clients, settings, now)
    # Before anything is reserved or launched: this execution owns this sweep id, or fails.
    sweep = state.sweep
    claim_sweep(
        clients.dynamodb, settings.ledger_table, sweep.sweep_id, event.execution_arn,
        sweep.created_at,
    )  # fmt: skip
    return state


def check_sweep(
    event: ValidateEvent, clients: Clients, settings: Settings, now: datetime
) -> SweepState:
    """The input against the stack, read-only: the sweep and its rig x boot items, or
    InvalidInput. The sweep id is not claimed here (`validate_sweep` does)."""
    bundle = read_bundle(clients.s3, settings.bucket, settings.bundle_manifest_key)
    sweep = parse_sweep_input(
        event.input,
        context={
            "rigs": set(bundle.rigs),
            "allowed_instance_types": settings.allowed_instance_types,
            "max_sweep_budget_usd": settings.sweep_budget_usd or None,
            "min_poll_s": settings.min_poll_s,
        },
    )
    subnets = sweep.subnets or settings.subnet_ids
    if not subnets:
        raise InvalidInput("invalid sweep input: subnets: none given and the stack has none")
    if not event.execution_arn:
        raise InvalidInput("invalid sweep input: no execution ARN to own the sweep")
    config = SweepConfig.accepted(
        sweep,
        sweep_id=sweep.sweep_id or sweep_id_from(event.execution_name),
        subnets=subnets,
        bundle=bundle,
        execution_arn=event.execution_arn,
        created_at=now.isoformat(timespec="seconds"),
    )
    config = config.model_copy(
        update={"model_revision": pinned_revision(sweep.model, sweep.model_revision)}
    )
    # Image, dtype and settings per rig: refused here (a missing baked image too), not at launch.
    # The one plan of each rig: the later steps read it from the state, never plan again.
    plans = {
        rig: plan_boot(sweep, rig, settings.ami_parameter, settings.instance_host)
        for rig in sweep.rigs
    }
    require_baked_images(clients.ssm, list(plans.values()))
    # The first round: every boot of a fixed sweep, the first look's of an adaptive one.
    items = [
        BootItem(
            rig=rig, boot=b, plan=plans[rig],
            execution_name=boot_execution_name(config.sweep_id, rig, b),
        )
        for b in range(1, sweep.looks()[0] + 1)
        for rig in sweep.rigs
    ]  # fmt: skip
    return SweepState(sweep=config, items=items)


@instrumented
@event_parser(model=ValidateEvent)
def handler(event: ValidateEvent, context: LambdaContext) -> dict[str, Any]:
    state = validate_sweep(event, Clients(), Settings.from_env(), datetime.now(UTC))
    metrics.add_metric(name="SweepsValidated", unit=MetricUnit.Count, value=1)
    return state.model_dump(mode="json", exclude_none=True)
