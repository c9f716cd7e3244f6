"""Lambda handlers of the bake state machine (statemachine/bake.asl.json): each parses the
state, calls one plain function of functions/bake_steps.py and returns the state grown by
that step's field."""

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.bake_steps import (
    BakeState,
    check_build,
    check_image,
    create_image,
    launch_builder,
    plan_bake,
    record_image,
    terminate_builder,
)
from functions.observability import instrumented
from functions.settings import Clients, Settings
from functions.validate import read_bundle


def _out(state: BakeState, **update: Any) -> dict[str, Any]:
    return state.model_copy(update=update).model_dump(mode="json", exclude_none=True)


@instrumented
def plan(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings, clients = Settings.from_env(), Clients()
    bundle = read_bundle(clients.s3, settings.bucket, settings.bundle_manifest_key)
    state = plan_bake(
        event.get("input"),
        execution_name=str(event["execution_name"]),
        execution_arn=str(event.get("execution_arn", "")),
        bundle_key=bundle.key,
        clients=clients,
        settings=settings,
    )
    return state.model_dump(mode="json", exclude_none=True)


@instrumented
def launch(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    state = BakeState.model_validate(event)
    return _out(state, builder=launch_builder(state, Clients(), Settings.from_env()))


@instrumented
def build(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    state = BakeState.model_validate(event)
    return _out(state, build=check_build(state, Clients()))


@instrumented
def image(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    state = BakeState.model_validate(event)
    clients = Clients()
    if state.image is None:
        return _out(state, image=create_image(state, clients, Settings.from_env()))
    return _out(state, image=check_image(state, clients))


@instrumented
def record(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    state = BakeState.model_validate(event)
    return _out(state, recorded=record_image(state, Clients()))


@instrumented
def terminate(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    state = BakeState.model_validate(event)
    return _out(state, finished=terminate_builder(state.plan, Clients(), Settings.from_env()))
