"""Where the local fleet plugs into moto: EC2 launch/terminate, SSM commands and agents.

moto's EC2 creates instances that do nothing, its SSM reports every command a Success with
empty output, and it does not implement DescribeInstanceInformation. Here:
- RunInstances boots a local instance for every instance moto creates (rig from its tag);
- TerminateInstances ends the local instance's process groups;
- SendCommand runs the commands in the instance's workspace (InvalidInstanceId when the
  instance is not online, as SSM answers), GetCommandInvocation reports their real status
  and output;
- DescribeInstanceInformation lists the instances that are running, PingStatus Online.
The patches hold for as long as the context is open, in this process (the moto server runs
in a thread of this process).
"""

import contextlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any
from unittest import mock

from moto.core.common_models import BaseModel as MotoModel
from moto.core.responses import ActionResult
from moto.ec2.models.instances import InstanceBackend
from moto.ssm.exceptions import SSMException as RESTError
from moto.ssm.models import SimpleSystemManagerBackend
from moto.ssm.responses import SimpleSystemManagerResponse

from rigbench.local.fleet import LocalFleet, UnknownInstanceError, UnknownInvocationError

RIG_TAG = "rigbench:rig"
SWEEP_TAG = "rigbench:sweep"
DEFAULT_TIMEOUT_S = 3600

# (instance tags) -> the model spec that instance's rig serves.
ModelFor = Callable[[dict[str, str]], str]


def _tags(instance: MotoModel) -> dict[str, str]:
    return {t["key"]: t["value"] for t in instance.get_tags()}  # type: ignore[attr-defined]


@contextlib.contextmanager
def local_fleet_seams(fleet: LocalFleet, model_for: ModelFor) -> Iterator[None]:
    """Route moto's EC2 and SSM through `fleet` while the context is open."""
    run_instances = InstanceBackend.run_instances
    terminate_instances = InstanceBackend.terminate_instances
    send_command = SimpleSystemManagerBackend.send_command
    get_command_invocation = SimpleSystemManagerBackend.get_command_invocation

    def launch(self: InstanceBackend, *args: Any, **kwargs: Any) -> Any:
        reservation = run_instances(self, *args, **kwargs)
        for instance in reservation.instances:
            tags = _tags(instance)
            rig = tags.get(RIG_TAG)
            if rig is None:
                continue  # not a rig instance: nothing to play locally
            fleet.launch(instance.id, rig, model_for(tags))
        return reservation

    def terminate(self: InstanceBackend, instance_ids: list[str]) -> Any:
        result = terminate_instances(self, instance_ids)
        for instance_id in instance_ids:
            fleet.terminate(instance_id)
        return result

    def send(self: SimpleSystemManagerBackend, **kwargs: Any) -> Any:
        instance_ids = list(kwargs.get("instance_ids") or [])
        offline = [i for i in instance_ids if not fleet.agent_online(i)]
        if offline:
            raise RESTError("InvalidInstanceId", f"Instances {offline} not in a valid state")
        command = send_command(self, **kwargs)
        parameters = kwargs.get("parameters") or {}
        timeout = DEFAULT_TIMEOUT_S
        if parameters.get("executionTimeout"):
            timeout = int(parameters["executionTimeout"][0])
        # moto adds every instance to a command sent without Targets; SSM sends to those named.
        for instance_id in instance_ids or command.instance_ids:
            try:
                fleet.send_command(
                    command.command_id, instance_id, list(parameters.get("commands", [])), timeout
                )
            except UnknownInstanceError as exc:
                raise RESTError("InvalidInstanceId", str(exc)) from exc
        return command

    def invocation(
        self: SimpleSystemManagerBackend,
        command_id: str,
        instance_id: str,
        plugin_name: str | None,
    ) -> dict[str, Any]:
        moto_view = get_command_invocation(self, command_id, instance_id, plugin_name)
        try:
            real = fleet.invocation(command_id, instance_id)
        except (UnknownInstanceError, UnknownInvocationError):
            return moto_view
        return {**moto_view, **real.model_dump(), "StatusDetails": real.StatusDetails}

    def describe_instance_information(self: SimpleSystemManagerResponse) -> ActionResult:
        wanted: set[str] | None = None
        for spec in (
            self._get_param("Filters") or self._get_param("InstanceInformationFilterList") or []
        ):
            key = spec.get("Key") or spec.get("key")
            if key in ("InstanceIds", "InstanceId"):
                wanted = set(spec.get("Values") or spec.get("valueSet") or [])
        now = datetime.now(UTC)
        listing = [
            {
                "InstanceId": instance_id,
                "PingStatus": "Online",
                "LastPingDateTime": now,
                "AgentVersion": "local",
                "IsLatestVersion": True,
                "PlatformType": "Linux",
                "PlatformName": "rigbench local",
                "ResourceType": "EC2Instance",
            }
            for instance_id in fleet.online_instances()
            if wanted is None or instance_id in wanted
        ]
        return ActionResult({"InstanceInformationList": listing})

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(InstanceBackend, "run_instances", launch))
        stack.enter_context(mock.patch.object(InstanceBackend, "terminate_instances", terminate))
        stack.enter_context(mock.patch.object(SimpleSystemManagerBackend, "send_command", send))
        stack.enter_context(
            mock.patch.object(SimpleSystemManagerBackend, "get_command_invocation", invocation)
        )
        stack.enter_context(
            mock.patch.object(
                SimpleSystemManagerResponse,
                "describe_instance_information",
                describe_instance_information,
                create=True,
            )
        )
        yield
