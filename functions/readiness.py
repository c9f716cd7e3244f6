"""Wait ready, one poll per invocation (the Wait/Choice loop lives in the state machine):
first the SSM agent comes online, then the rig answers a real completion."""

from typing import Any

from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from functions import clock
from functions.bootstrap import InstancePlan, instance_plan
from functions.errors import AgentNeverOnline, InstallFailed, RigNeverReady, error_code
from functions.events import AgentCheck, BootState, Instance, ReadyCheck
from functions.instance_commands import parse_probe, probe_commands
from functions.instance_state import ensure_alive
from functions.observability import instrumented
from functions.poll_schedule import next_wait_s
from functions.settings import Clients, Settings

PROBE_TIMEOUT_S = 180
FINISHED = {
    "Success",
    "Failed",
    "Cancelled",
    "TimedOut",
    "DeliveryTimedOut",
    "ExecutionTimedOut",
    "Undeliverable",
    "Terminated",
}


def _instance(state: BootState) -> Instance:
    if state.instance is None:
        raise ValueError("no instance in the state: the launch step did not run")
    return state.instance


def agent_online(ssm: Any, instance_id: str) -> bool:
    response = ssm.describe_instance_information(
        Filters=[{"Key": "InstanceIds", "Values": [instance_id]}]
    )
    return any(
        info.get("PingStatus") == "Online" for info in response.get("InstanceInformationList", [])
    )


def check_agent(state: BootState, clients: Clients, settings: Settings, now: float) -> AgentCheck:
    instance = _instance(state)
    ensure_alive(clients.ec2, clients.dynamodb, settings.ledger_table, state, "boot", now)
    checks = (state.agent.checks if state.agent else 0) + 1
    waits = state.sweep.waits
    wait_s = next_wait_s(waits.agent_poll_s, waits.first_poll_s, now - instance.launched_at)
    if agent_online(clients.ssm, instance.instance_id):
        return AgentCheck(online=True, checks=checks, wait_s=wait_s, online_at=now)
    if now > instance.ready_deadline_at:
        raise AgentNeverOnline(
            f"the SSM agent on {instance.instance_id} never came online within "
            f"{state.sweep.deadlines.ready_s} s of launch ({checks} checks)"
        )
    return AgentCheck(online=False, checks=checks, wait_s=wait_s)


def send_probe(ssm: Any, instance_id: str, plan: InstancePlan) -> str:
    response = ssm.send_command(
        InstanceIds=[instance_id],
        DocumentName="AWS-RunShellScript",
        Parameters={
            "commands": probe_commands(plan),
            "executionTimeout": [str(PROBE_TIMEOUT_S)],
        },
        TimeoutSeconds=60,
        Comment="rigbench readiness probe",
    )
    return str(response["Command"]["CommandId"])


def never_ready(state: BootState, instance: Instance, phase: str, detail: str) -> RigNeverReady:
    return RigNeverReady(
        f"{state.rig} on {instance.instance_id} gave no real completion within "
        f"{state.sweep.deadlines.ready_s} s of launch "
        f"(last phase {phase!r}: {detail or 'no detail'})"
    )


def check_ready(state: BootState, clients: Clients, settings: Settings, now: float) -> ReadyCheck:
    """The probe's answer, with how long the Wait before the next check lasts."""
    check = _check_ready(state, clients, settings, now)
    waits = state.sweep.waits
    age = now - _instance(state).launched_at
    return check.model_copy(
        update={"wait_s": next_wait_s(waits.ready_poll_s, waits.first_poll_s, age)}
    )


def _check_ready(state: BootState, clients: Clients, settings: Settings, now: float) -> ReadyCheck:
    instance = _instance(state)
    ensure_alive(clients.ec2, clients.dynamodb, settings.ledger_table, state, "rig start", now)
    previous = state.ready or ReadyCheck()
    checks = previous.checks + 1
    phase, detail = previous.phase, previous.detail
    if previous.probe_command_id:
        invocation: dict[str, Any]
        try:
            invocation = dict(
                clients.ssm.get_command_invocation(
                    CommandId=previous.probe_command_id, InstanceId=instance.instance_id
                )
            )
        except ClientError as exc:
            if error_code(exc) != "InvocationDoesNotExist":
                raise
            invocation = {"Status": "Pending"}
        if invocation["Status"] not in FINISHED:
            if now > instance.ready_deadline_at:
                raise never_ready(state, instance, phase, detail)
            return previous.model_copy(update={"checks": checks})
        probe = parse_probe(invocation.get("StandardOutputContent", ""))
        if probe.install_failed:
            raise InstallFailed(
                f"{state.rig} install failed on {instance.instance_id}: {probe.explain()}"
            )
        if probe.terminal:
            raise RigNeverReady(
                f"{state.rig} on {instance.instance_id} cannot become ready "
                f"({probe.phase}): {probe.explain()}"
            )
        if probe.is_ready:
            return ReadyCheck(
                ready=True, phase=probe.phase, checks=checks, detail=f"completion {probe.text!r}"
            )
        phase = probe.phase
        detail = probe.error or probe.detail or invocation.get("StandardErrorContent", "")[-300:]
    if now > instance.ready_deadline_at:
        raise never_ready(state, instance, phase, detail)
    return ReadyCheck(
        ready=False,
        probe_command_id=send_probe(
            clients.ssm, instance.instance_id, instance_plan(state, settings, instance.deadline_at)
        ),
        phase=phase,
        detail=detail,
        checks=checks,
    )


@instrumented
@event_parser(model=BootState)
def agent_handler(event: BootState, context: LambdaContext) -> dict[str, Any]:
    agent = check_agent(event, Clients(), Settings.from_env(), clock.now())
    return agent.model_dump(mode="json")


@instrumented
@event_parser(model=BootState)
def ready_handler(event: BootState, context: LambdaContext) -> dict[str, Any]:
    ready = check_ready(event, Clients(), Settings.from_env(), clock.now())
    return ready.model_dump(mode="json")
