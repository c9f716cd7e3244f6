"""Run the harness on the instance over SSM RunCommand and poll it to an end."""

from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from functions import clock
from functions.errors import CommandFailed, CommandTimedOut, InstanceLost, error_code
from functions.events import BootState, CommandState, Instance
from functions.instance_commands import bench_commands, measure_options
from functions.instance_state import ensure_alive
from functions.observability import instrumented
from functions.poll_schedule import next_wait_s
from functions.report_keys import REPORT, boot_prefix, instance_arn
from functions.settings import Clients, Settings

RUNNING = {"Pending", "InProgress", "Delayed"}
TIMED_OUT = {"TimedOut", "DeliveryTimedOut", "ExecutionTimedOut"}
LOST = {"Undeliverable", "Terminated"}
GRACE_S = 60  # SSM itself stops the command at bench_s; the poll gives it this long to say so


def _instance(state: BootState) -> Instance:
    if state.instance is None:
        raise ValueError("no instance in the state: the launch step did not run")
    return state.instance


def sent_before(ssm: Any, instance_id: str, comment: str) -> dict[str, Any] | None:
    """The harness command this boot already sent (a retry after a lost response)."""
    for page in ssm.get_paginator("list_commands").paginate(InstanceId=instance_id):
        for command in page["Commands"]:
            if command.get("Comment") == comment:
                return dict(command)
    return None


def _with_wait(command: CommandState, state: BootState, now: float) -> CommandState:
    """The command's state with how long the Wait before the next poll lasts."""
    waits = state.sweep.waits
    wait_s = next_wait_s(waits.command_poll_s, waits.first_poll_s, now - command.sent_at)
    return command.model_copy(update={"wait_s": wait_s})


def dispatch_bench(
    state: BootState, clients: Clients, settings: Settings, now: float
) -> CommandState:
    return _with_wait(_dispatch_bench(state, clients, settings, now), state, now)


def _dispatch_bench(
    state: BootState, clients: Clients, settings: Settings, now: float
) -> CommandState:
    """Send the harness once per boot: a retried dispatch finds the command the first attempt
    sent (by its comment, unique per sweep/rig/boot) instead of starting a second harness."""
    instance = _instance(state)
    sweep = state.sweep
    comment = f"rigbench {sweep.sweep_id} {state.rig} boot {state.boot}"
    arn = instance_arn(settings.instance_arn_prefix, instance.instance_id)
    key = boot_prefix(sweep.sweep_id, state.rig, state.boot, arn) + REPORT
    earlier = sent_before(clients.ssm, instance.instance_id, comment)
    if earlier is not None:
        return CommandState(
            command_id=earlier["CommandId"],
            sent_at=earlier["RequestedDateTime"].timestamp(),
            report_key=key,
        )
    commands = bench_commands(
        sweep_id=sweep.sweep_id,
        rig=state.rig,
        boot=state.boot,
        cells=sweep.cells,
        bucket=settings.bucket,
        instance_arn=arn,
        options=measure_options(sweep),
        restarts=sweep.restarts_per_boot,
        warm_options=measure_options(sweep, capacity=False),
        restart_timeout_s=sweep.deadlines.ready_s,
    )
    response = clients.ssm.send_command(
        InstanceIds=[instance.instance_id],
        DocumentName="AWS-RunShellScript",
        Parameters={"commands": commands, "executionTimeout": [str(sweep.deadlines.bench_s)]},
        TimeoutSeconds=60,
        Comment=comment,
    )
    return CommandState(command_id=response["Command"]["CommandId"], sent_at=now, report_key=key)


def poll_bench(state: BootState, clients: Clients, settings: Settings, now: float) -> CommandState:
    return _with_wait(_poll_bench(state, clients, settings, now), state, now)


def _poll_bench(state: BootState, clients: Clients, settings: Settings, now: float) -> CommandState:
    instance = _instance(state)
    if state.command is None:
        raise ValueError("no command in the state: the dispatch step did not run")
    command = state.command.model_copy(update={"checks": state.command.checks + 1})
    ensure_alive(clients.ec2, clients.dynamodb, settings.ledger_table, state, "the benchmark", now)
    invocation: dict[str, Any]
    try:
        invocation = dict(
            clients.ssm.get_command_invocation(
                CommandId=command.command_id, InstanceId=instance.instance_id
            )
        )
        status = str(invocation["Status"])
    except ClientError as exc:
        # Right after SendCommand the invocation may not exist yet: poll again.
        if error_code(exc) != "InvocationDoesNotExist":
            raise
        invocation, status = {}, "Pending"
    elapsed = now - command.sent_at
    limit = state.sweep.deadlines.bench_s
    if status in RUNNING:
        if elapsed > limit + GRACE_S:
            raise CommandTimedOut(
                f"the harness on {instance.instance_id} still {status} {elapsed:.0f} s after "
                f"dispatch (deadline {limit} s)"
            )
        return command.model_copy(update={"status": status})
    if status == "Success":
        return command.model_copy(update={"status": status, "done": True})
    stderr = str(invocation.get("StandardErrorContent", ""))[-500:]
    if status in TIMED_OUT:
        raise CommandTimedOut(
            f"the harness on {instance.instance_id} timed out ({status}) after its {limit} s "
            f"deadline: {stderr or 'no stderr'}"
        )
    if status in LOST:
        raise InstanceLost(f"the harness command on {instance.instance_id} ended {status}")
    raise CommandFailed(
        f"the harness on {instance.instance_id} ended {status} with exit code "
        f"{invocation.get('ResponseCode', '?')}: {stderr or 'no stderr'}"
    )


@instrumented
@event_parser(model=BootState)
def dispatch_handler(event: BootState, context: LambdaContext) -> dict[str, Any]:
    command = dispatch_bench(event, Clients(), Settings.from_env(), clock.now())
    return command.model_dump(mode="json")


@instrumented
@event_parser(model=BootState)
def poll_handler(event: BootState, context: LambdaContext) -> dict[str, Any]:
    command = poll_bench(event, Clients(), Settings.from_env(), clock.now())
    return command.model_dump(mode="json")
