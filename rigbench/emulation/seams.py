"""Patches on moto's in-process backends that route the questions moto cannot answer to a
Fleet, run Lambda handlers in this process, and inject faults a test asks for.

Installed for the life of an Emulation (`Seams.install` / `Seams.uninstall`); moto's server
runs in this process, so its backends are these objects.

Where moto falls short of AWS, the seams fill in what the control plane relies on:
- Lambda runs the handler in-process (no Docker);
- DynamoDB applies each request atomically: moto's server answers on many threads and
  applies a transaction item by item (an ADD reads, then writes), so two concurrent
  reconciliations could lose one's release; the seams serve one DynamoDB request at a time;
- EC2 RunInstances honours ClientToken as EC2 does (same token and parameters: the same
  instance; same token, other parameters: IdempotentParameterMismatch);
- EventBridge: moto emits no "Step Functions Execution Status Change" event, so when an
  execution ends ABORTED, TIMED_OUT or FAILED the seams deliver it to the functions the
  template subscribes (`status_change_targets`), on their own thread as EventBridge would, for
  the state machines the rule names (`status_change_machines`: not the boot executions);
- every instance's real launch and end time is kept (`InstanceTimes`), the ground truth a
  test compares the ledger with.

Lambda faults (`Faults.fail_lambda`), each taken by one invocation of the function:
    raise      the handler raises before doing anything
    timeout    the invocation hangs, then reports Sandbox.Timedout; the handler never runs
    service    Lambda answers ServiceException; the handler never runs
    throttle   Lambda answers TooManyRequestsException (Lambda.TooManyRequestsException)
    after      the handler runs to the end (its side effects happen), then the caller gets
               Sandbox.Timedout: a response lost after the side effect
    duplicate  a second invocation of the same event runs while the first is in flight
    stop       the handler runs, then the execution named in its event is stopped

EC2: `vanish` (an instance's record disappears) and `reclaim` (a spot reclaim, as EC2 ends it);
`Faults.hold_launch` holds RunInstances (after Launch anchored the boot) until the test lets it
go: the execution can end (a stop, a timeout) while Launch is in flight, as on AWS, where the
Lambda runs on after its execution ended. `Seams.idle` waits for handlers still running.
"""

import importlib
import json
import os
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, cast

from moto import backends as moto_backends
from moto.awslambda.models import LambdaBackend, lambda_backends
from moto.cloudformation.models import Stack
from moto.core.exceptions import JsonRESTError
from moto.core.responses import ActionResult
from moto.dynamodb import models as dynamodb_models
from moto.dynamodb.exceptions import DynamodbException
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.responses import DynamoHandler, DynamoResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models import ec2_backends
from moto.ec2.models.instances import InstanceBackend, StateReason
from moto.ec2.responses.spot_instances import SpotInstances
from moto.kms import models as kms_models
from moto.servicequotas.models import ServiceQuotasBackend
from moto.ssm.models import Command, SimpleSystemManagerBackend
from moto.ssm.responses import SimpleSystemManagerResponse
from moto.stepfunctions.parser.api import ExecutionStatus
from moto.stepfunctions.parser.asl.component.common.path import result_path
from moto.stepfunctions.parser.asl.component.state.exec.state_task import lambda_eval_utils
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service import (
    state_task_service_sfn,
)
from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_sfn import (  # noqa: E501
    StateTaskServiceSfn,
)
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
from moto.stepfunctions.parser.asl.utils import json_path
from moto.stepfunctions.parser.backend.execution import BaseExecutionWorkerCommunication
from moto.stepfunctions.parser.backend.execution_worker import ExecutionWorker
from moto.stepfunctions.responses import StepFunctionResponse

from rigbench.emulation.fleet import CommandNotDelivered, Fleet, LaunchedInstance, LaunchRequest
from rigbench.emulation.sfn_tasks import normalise_parameters, normalise_response
from rigbench.emulation.speedups import (
    TableCopies,
    dynamodb_result,
    execution_history,
    jsonpath,
    jsonpath_ext,
    moto_modules,
    parse_definition,
    parse_template,
    private_key,
    step_functions_client,
    transact_write_items,
)

LambdaFault = Literal["raise", "timeout", "service", "throttle", "after", "duplicate", "stop"]
ENDS_WITHOUT_FINISH = {ExecutionStatus.ABORTED, ExecutionStatus.TIMED_OUT, ExecutionStatus.FAILED}
ACCOUNT_ID = "123456789012"  # moto's default account: the emulated stack lives there


@dataclass
class Faults:
    """Faults a test injects: Lambda failures per function, DynamoDB throttling per table."""

    lambdas: dict[str, list[LambdaFault]] = field(default_factory=dict)
    throttles: dict[str, int] = field(default_factory=dict)
    # How long an injected "timeout" hangs before Lambda reports Sandbox.Timedout; the state
    # machine sees the same error whatever the function's configured timeout is.
    hang_s: float = 1.0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    protect_on_launch: bool = False  # launched instances come up protected from termination
    hold_launch: "LaunchHold | None" = None  # RunInstances waits for the test to let it go
    unterminable: set[str] = field(default_factory=set)  # TerminateInstances always refused

    def fail_lambda(self, logical_id: str, kind: LambdaFault, times: int = 1) -> None:
        with self._lock:
            self.lambdas.setdefault(logical_id, []).extend([kind] * times)

    def throttle_dynamodb(self, table_name: str, times: int) -> None:
        """The next `times` PutItem calls on the table answer ProvisionedThroughputExceeded."""
        with self._lock:
            self.throttles[table_name] = self.throttles.get(table_name, 0) + times

    def take_lambda(self, logical_id: str) -> LambdaFault | None:
        with self._lock:
            queue = self.lambdas.get(logical_id)
            return queue.pop(0) if queue else None

    def take_throttle(self, table_name: str) -> bool:
        with self._lock:
            left = self.throttles.get(table_name, 0)
            if left <= 0:
                return False
            self.throttles[table_name] = left - 1
            return True


@dataclass
class LaunchHold:
    """RunInstances enters (`entered`), then waits for `release` before launching."""

    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    timeout_s: float = 120.0


@dataclass
class InstanceTimes:
    """When each instance really started and stopped costing money (the emulation's truth)."""

    launched: dict[str, float] = field(default_factory=dict)
    ended: dict[str, float] = field(default_factory=dict)
    # When the handler invocation that terminated the instance returned: a bill it took after
    # its TerminateInstances call ends between `ended` and this.
    answered: dict[str, float] = field(default_factory=dict)
    _ended_by_invocation: threading.local = field(default_factory=threading.local)

    def ended_now(self, instance_id: str) -> None:
        self.ended.setdefault(instance_id, time.time())
        ended_here = getattr(self._ended_by_invocation, "ids", None)
        if ended_here is not None:
            ended_here.append(instance_id)

    @contextmanager
    def invocation(self) -> Iterator[None]:
        """Around one handler invocation, on its thread: the instances it terminates are
        `answered` when it returns."""
        ended_here: list[str] = []
        self._ended_by_invocation.ids = ended_here
        try:
            yield
        finally:
            del self._ended_by_invocation.ids
            for instance_id in ended_here:
                self.answered.setdefault(instance_id, time.time())

    def seconds(self, instance_ids: Iterable[str], now: float) -> float:
        return sum(self.ended.get(i, now) - self.launched[i] for i in instance_ids)


@dataclass
class StatusChanges:
    """Execution status-change events delivered, and what their handlers answered."""

    def __post_init__(self) -> None:
        self._done: dict[str, threading.Event] = {}
        self.results: dict[str, list[Any]] = {}
        self._lock = threading.Lock()

    def _event(self, arn: str) -> threading.Event:
        with self._lock:
            return self._done.setdefault(arn, threading.Event())

    def delivered(self, arn: str, results: list[Any]) -> None:
        self.results[arn] = results
        self._event(arn).set()

    def wait(self, arn: str, timeout_s: float = 30.0) -> list[Any]:
        """The status-change handlers' answers, once they ran (raises when they never did)."""
        if not self._event(arn).wait(timeout_s):
            raise TimeoutError(f"no status-change cleanup ran for {arn} in {timeout_s} s")
        return self.results[arn]


@dataclass
class LambdaContext:
    """What a handler reads from its context in Lambda."""

    function_name: str
    invoked_function_arn: str
    memory_limit_in_mb: int
    timeout_s: float
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = ""
    started: float = field(default_factory=time.monotonic)

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.timeout_s - (time.monotonic() - self.started)) * 1000))


def _epoch(when: datetime) -> float:
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _error_payload(error_type: str, message: str, trace: list[str] | None = None) -> bytes:
    return json.dumps(
        {"errorMessage": message, "errorType": error_type, "stackTrace": trace or []}
    ).encode()


@dataclass
class Seams:
    fleet: Fleet
    faults: Faults
    logical_ids: dict[str, str]  # function physical name -> logical id
    timeout_override_s: float | None = None
    status_change_targets: list[str] = field(default_factory=list)  # function physical names
    # the state machines the rule matches (its detail.stateMachineArn; empty: every one)
    status_change_machines: set[str] = field(default_factory=set)
    closing: bool = False  # the emulation is being torn down: deliver no more events
    times: InstanceTimes = field(default_factory=InstanceTimes)
    status_changes: StatusChanges = field(default_factory=StatusChanges)
    _originals: list[tuple[object, str, Any]] = field(default_factory=list)
    _client_tokens: dict[str, tuple[str, str]] = field(default_factory=dict)
    _launch_lock: threading.Lock = field(default_factory=threading.Lock)
    _ended: set[str] = field(default_factory=set)  # executions whose end was reflected
    _in_flight: int = 0
    _in_flight_changed: threading.Condition = field(default_factory=threading.Condition)

    def idle(self, timeout_s: float = 60.0) -> None:
        """Wait until no handler runs (one may outlive its execution, as on AWS)."""
        with self._in_flight_changed:
            if not self._in_flight_changed.wait_for(lambda: self._in_flight == 0, timeout_s):
                raise TimeoutError(f"{self._in_flight} handlers still running after {timeout_s} s")

    # ------------------------------------------------------------------ install
    def install(self) -> None:
        seams = self

        def invoke(
            backend: LambdaBackend,
            function_name: str,
            qualifier: str | None,
            body: Any,
            headers: Any,
            response_headers: Any,
        ) -> bytes:
            return seams.invoke_handler(backend, function_name, qualifier, body, response_headers)

        original_send = SimpleSystemManagerBackend.send_command
        original_invocation = SimpleSystemManagerBackend.get_command_invocation
        original_quota = ServiceQuotasBackend.get_service_quota
        original_run = InstanceBackend.run_instances
        original_terminate = InstanceBackend.terminate_instances
        original_put = DynamoDBBackend.put_item
        original_dynamodb_action = DynamoHandler.call_action
        dynamodb_request = threading.Lock()
        original_terminated = BaseExecutionWorkerCommunication.terminated
        original_stop = ExecutionWorker.stop
        original_stop_execution = StepFunctionResponse.stop_execution

        def send_command(backend: SimpleSystemManagerBackend, **kwargs: Any) -> Command:
            # Copied first: moto's Command extends the list it is given with every instance
            # of the account when Targets is empty, which would send the command to all.
            instance_ids = list(dict.fromkeys(kwargs.get("instance_ids") or []))
            command = original_send(backend, **kwargs)
            commands = list((kwargs.get("parameters") or {}).get("commands", []))
            timeout = int(((kwargs.get("parameters") or {}).get("executionTimeout") or ["3600"])[0])
            for instance_id in instance_ids:
                seams.fleet.send_command(command.command_id, instance_id, commands, timeout)
            return command

        def get_command_invocation(
            backend: SimpleSystemManagerBackend,
            command_id: str,
            instance_id: str,
            plugin_name: str | None,
        ) -> dict[str, Any]:
            invocation = dict(original_invocation(backend, command_id, instance_id, plugin_name))
            try:
                result = seams.fleet.command_result(command_id, instance_id)
            except CommandNotDelivered as exc:
                raise JsonRESTError(
                    "InvocationDoesNotExist", "An error occurred (InvocationDoesNotExist)"
                ) from exc
            invocation.update(
                Status=result.status,
                StatusDetails=result.status,
                ResponseCode=result.response_code,
                StandardOutputContent=result.stdout[-24000:],
                StandardErrorContent=result.stderr[-8000:],
            )
            return invocation

        def describe_instance_information(response: SimpleSystemManagerResponse) -> ActionResult:
            ids: list[str] = []
            for entry in response._get_param("Filters", []) or []:
                if entry.get("Key") == "InstanceIds":
                    ids.extend(entry.get("Values", []))
            for entry in response._get_param("InstanceInformationFilterList", []) or []:
                if entry.get("key") == "InstanceIds":
                    ids.extend(entry.get("valueSet", []))
            now = datetime.now(UTC).isoformat()
            found = [
                {
                    "InstanceId": i,
                    "PingStatus": "Online",
                    "LastPingDateTime": now,
                    "PlatformType": "Linux",
                    "ResourceType": "EC2Instance",
                    "AgentVersion": "3.3",
                }
                for i in ids
                if seams.fleet.agent_online(i)
            ]
            return ActionResult({"InstanceInformationList": found})

        def get_service_quota(
            backend: ServiceQuotasBackend, service_code: str, quota_code: str
        ) -> dict[str, Any]:
            if service_code != "ec2":
                return original_quota(backend, service_code, quota_code)
            return {
                "ServiceCode": "ec2",
                "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
                "QuotaCode": quota_code,
                "QuotaName": quota_code,
                "Unit": "None",
                "Value": seams.fleet.quota_vcpus(quota_code),
                "Adjustable": True,
                "GlobalQuota": False,
                "QuotaArn": f"arn:aws:servicequotas:{backend.region_name}::ec2/{quota_code}",
            }

        def describe_spot_price_history(response: SpotInstances) -> ActionResult:
            types = response._get_param("InstanceTypes", [])
            filters = response._filters_from_querystring()
            offerings = response.ec2_backend.describe_spot_price_history(types, filters)
            history = [
                {
                    "InstanceType": o["InstanceType"],
                    "ProductDescription": "Linux/UNIX",
                    "SpotPrice": f"{price:.6f}",
                    "AvailabilityZone": o["Location"],
                    "Timestamp": at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                }
                for o in offerings
                for at, price in seams.fleet.spot_price_history(o["InstanceType"], o["Location"])
            ]
            return ActionResult({"SpotPriceHistory": history})

        def run_instances(
            backend: InstanceBackend,
            image_id: str,
            count: int,
            user_data: Any,
            security_group_names: list[str],
            **kwargs: Any,
        ) -> Any:
            token = kwargs.get("client_token") or ""
            text = user_data.decode() if hasattr(user_data, "decode") else str(user_data or "")
            hold = seams.faults.hold_launch
            if hold is not None:
                hold.entered.set()
                hold.release.wait(hold.timeout_s)
            with seams._launch_lock:  # EC2 checks and records a token atomically
                return launch(backend, image_id, count, user_data, security_group_names,
                              token, text, **kwargs)  # fmt: skip

        def launch(
            backend: InstanceBackend,
            image_id: str,
            count: int,
            user_data: Any,
            security_group_names: list[str],
            token: str,
            text: str,
            **kwargs: Any,
        ) -> Any:
            subnet_id = kwargs.get("subnet_id") or ""
            zone = backend.get_subnet(subnet_id).availability_zone if subnet_id else ""  # type: ignore[attr-defined]
            market: Literal["spot", "on-demand"] = (
                "spot" if kwargs.get("instance_market_options") else "on-demand"
            )
            instance_type = kwargs.get("instance_type", "m1.small")
            if token and token in seams._client_tokens:
                # EC2's idempotency: the same token returns the first launch's reservation.
                reservation_id, first_text = seams._client_tokens[token]
                if first_text != text:
                    raise EC2ClientError(
                        "IdempotentParameterMismatch",
                        f"The client token {token} was used with different parameters.",
                    )
                return backend.reservations[reservation_id]
            code = seams.fleet.capacity_error(LaunchRequest(instance_type, subnet_id, zone, market))
            if code is not None:
                raise EC2ClientError(
                    code,
                    f"We currently do not have sufficient {instance_type} capacity in the "
                    f"Availability Zone you requested ({zone}).",
                )
            reservation = original_run(
                backend, image_id, count, user_data, security_group_names, **kwargs
            )
            if token:
                seams._client_tokens[token] = (reservation.id, text)
            for instance in reservation.instances:
                seams.times.launched[instance.id] = _epoch(instance.launch_time)
                if seams.faults.protect_on_launch:
                    instance.disable_api_termination = True
                seams.fleet.launched(
                    LaunchedInstance(
                        instance_id=instance.id,
                        instance_type=instance.instance_type,
                        availability_zone=instance.availability_zone or zone,
                        market=market,
                        user_data=text,
                        tags={t["key"]: t["value"] for t in instance.get_tags()},
                    )
                )
            return reservation

        def terminate_instances(backend: InstanceBackend, instance_ids: list[str]) -> Any:
            refused = seams.faults.unterminable & set(instance_ids)
            if refused:
                raise EC2ClientError(
                    "OperationNotPermitted",
                    f"The instance '{sorted(refused)[0]}' may not be terminated (injected).",
                )
            result = original_terminate(backend, instance_ids)
            for instance, previous in result:
                if previous.name not in ("shutting-down", "terminated"):
                    seams.times.ended_now(instance.id)
                seams.fleet.terminated(instance.id)
            return result

        def terminated(comm: BaseExecutionWorkerCommunication) -> None:
            execution = comm.execution
            with seams._launch_lock:
                if execution.exec_arn in seams._ended:
                    return  # ended at its stop; its worker has now wound down
                seams._ended.add(execution.exec_arn)
            original_terminated(comm)
            heard = not seams.status_change_machines or (
                execution.state_machine.arn in seams.status_change_machines
            )
            if execution.exec_status in ENDS_WITHOUT_FINISH and heard and not seams.closing:
                threading.Thread(
                    target=seams.deliver_status_change,
                    args=(execution,),
                    name="eventbridge-status-change",
                    daemon=True,
                ).start()

        def stop(worker: ExecutionWorker, *args: Any, **kwargs: Any) -> None:
            # AWS ends a stopped execution at once, whatever its Task is waiting for; moto's
            # worker would end only once an in-flight Lambda returned.
            original_stop(worker, *args, **kwargs)
            communication = cast(BaseExecutionWorkerCommunication, worker._execution_communication)
            communication.terminated()
            # ... ABORTED, as AWS says; moto's parser may end a Map stopped mid-way FAILED with
            # an AttributeError of its own.
            communication.execution.exec_status = ExecutionStatus.ABORTED

        def stop_execution(response: StepFunctionResponse) -> Any:
            # moto drops StopExecution's error and cause; AWS keeps them on the execution.
            result = original_stop_execution(response)
            arn = response._get_param("executionArn")
            execution = response.stepfunction_backend.describe_execution(arn)
            execution.error = response._get_param("error") or None
            execution.cause = response._get_param("cause") or None
            return result

        def put_item(backend: DynamoDBBackend, table_name: str, *args: Any, **kwargs: Any) -> Any:
            if seams.faults.take_throttle(table_name):
                raise DynamodbException(
                    "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
                    "The level of configured provisioned throughput for the table was exceeded.",
                )
            return original_put(backend, table_name, *args, **kwargs)

        def dynamodb_action(handler: DynamoHandler) -> Any:
            with dynamodb_request:
                return original_dynamodb_action(handler)

        patches: list[tuple[object, str, Callable[..., Any]]] = [
            (LambdaBackend, "invoke", invoke),
            (SimpleSystemManagerBackend, "send_command", send_command),
            (SimpleSystemManagerBackend, "get_command_invocation", get_command_invocation),
            (
                SimpleSystemManagerResponse,
                "describe_instance_information",
                describe_instance_information,
            ),
            (ServiceQuotasBackend, "get_service_quota", get_service_quota),
            (SpotInstances, "describe_spot_price_history", describe_spot_price_history),
            (InstanceBackend, "run_instances", run_instances),
            (InstanceBackend, "terminate_instances", terminate_instances),
            (DynamoDBBackend, "put_item", put_item),
            (DynamoHandler, "call_action", dynamodb_action),
            (BaseExecutionWorkerCommunication, "terminated", terminated),
            (ExecutionWorker, "stop", stop),
            (StepFunctionResponse, "stop_execution", stop_execution),
            (AmazonStateLanguageParser, "parse", staticmethod(parse_definition)),
            (DynamoResult, "execute_result", dynamodb_result),
            (StepFunctionResponse, "get_execution_history", execution_history),
            (lambda_eval_utils, "boto_client_for", step_functions_client),
            (state_task_service_sfn, "boto_client_for", step_functions_client),
            (StateTaskServiceSfn, "_normalise_parameters", normalise_parameters),
            (StateTaskServiceSfn, "_normalise_response", normalise_response),
            (json_path, "parse", jsonpath_ext),
            (result_path, "parse", jsonpath),
            (moto_backends, "list_of_moto_modules", moto_modules),
            (Stack, "parse_template", staticmethod(parse_template)),
            (DynamoDBBackend, "transact_write_items", transact_write_items),
            (dynamodb_models, "copy", TableCopies),
            (kms_models, "generate_private_key", private_key),
        ]
        for owner, name, replacement in patches:
            self._originals.append((owner, name, owner.__dict__.get(name)))
            setattr(owner, name, replacement)

    def uninstall(self) -> None:
        for owner, name, original in reversed(self._originals):
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
        self._originals.clear()

    @staticmethod
    def _stop_execution_of(event: dict[str, Any]) -> None:
        """StopExecution on the execution whose state this event carries, as another caller
        would (on its own thread: this one is the execution's worker)."""
        from moto.stepfunctions.parser.models import stepfunctions_parser_backends

        arn = event.get("execution_arn") or (event.get("sweep") or {}).get("execution_arn")
        if not arn:
            raise ValueError("a 'stop' fault needs an event that names its execution")
        _, _, _, region, account, *_ = arn.split(":")
        backend = stepfunctions_parser_backends[account][region]
        threading.Thread(target=backend.stop_execution, args=(arn,), daemon=True).start()

    # ------------------------------------------------------------------ EC2 and EventBridge
    def vanish(self, instance_id: str, region: str = "us-east-1") -> None:
        """The instance disappears from EC2 altogether (ended by something else, its record
        gone): DescribeInstances no longer knows it."""
        backend = self._ec2(region)
        for reservation in list(backend.reservations.values()):
            for instance in list(reservation.instances):
                if instance.id == instance_id:
                    reservation.instances.remove(instance)
        self.times.ended_now(instance_id)
        self.fleet.terminated(instance_id)

    def reclaim(self, instance_id: str, region: str = "us-east-1") -> None:
        """EC2 reclaims a spot instance: it ends (the fleet's process with it) and stays
        described as terminated by the service, with the reclaim's reason and time."""
        backend = self._ec2(region)
        backend.terminate_instances([instance_id])  # the patched call: times, fleet
        instance = backend.get_instance(instance_id)
        when = datetime.fromtimestamp(self.times.ended[instance_id], UTC)
        instance._reason = f"Service initiated ({when:%Y-%m-%d %H:%M:%S} GMT)"
        instance.state_reason = StateReason(
            "Server.SpotInstanceTermination: Spot instance termination",
            "Server.SpotInstanceTermination",
        )

    @staticmethod
    def _ec2(region: str) -> Any:
        return ec2_backends[ACCOUNT_ID][region]

    def deliver_status_change(self, execution: Any) -> None:
        """What EventBridge does with "Step Functions Execution Status Change"."""
        event = {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": "Step Functions Execution Status Change",
            "source": "aws.states",
            "account": execution.account_id,
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "region": execution.region_name,
            "resources": [execution.exec_arn],
            "detail": {
                "executionArn": execution.exec_arn,
                "stateMachineArn": execution.state_machine.arn,
                "name": execution.name,
                "status": str(execution.exec_status.value),
            },
        }
        backend = lambda_backends[execution.account_id][execution.region_name]
        results = []
        for name in self.status_change_targets:
            payload = self.invoke_handler(backend, name, None, json.dumps(event), {})
            results.append(json.loads(payload))
        self.status_changes.delivered(execution.exec_arn, results)

    # ------------------------------------------------------------------ Lambda
    def invoke_handler(
        self,
        backend: LambdaBackend,
        function_name: str,
        qualifier: str | None,
        body: Any,
        response_headers: dict[str, str],
    ) -> bytes:
        """Run the function's handler in this process, as Lambda would run it."""
        fn = backend.get_function(function_name, qualifier)
        logical_id = self.logical_ids.get(fn.function_name, fn.function_name)
        timeout = self.timeout_override_s or float(fn.timeout)
        fault = self.faults.take_lambda(logical_id)
        if fault == "service":
            raise JsonRESTError(
                "ServiceException", "Lambda was unable to run the function (injected)"
            )
        if fault == "throttle":
            error = JsonRESTError("TooManyRequestsException", "Rate exceeded (injected)")
            error.code = 429
            raise error
        payload: bytes
        if fault == "timeout":
            time.sleep(self.faults.hang_s)
            payload = _error_payload(
                "Sandbox.Timedout", f"Task timed out after {timeout:.2f} seconds"
            )
            response_headers["x-amz-function-error"] = "Unhandled"
            response_headers["Content-Length"] = str(len(payload))
            return payload
        os.environ.update({k: str(v) for k, v in (fn.environment_vars or {}).items()})
        module_name, _, attr = str(fn.handler).rpartition(".")
        context = LambdaContext(
            function_name=fn.function_name,
            invoked_function_arn=fn.function_arn,
            memory_limit_in_mb=int(fn.memory_size),
            timeout_s=timeout,
        )
        event = json.loads(body) if body else {}
        outcome: dict[str, Any] = {}

        def run(outcome: dict[str, Any]) -> None:
            try:
                if fault == "raise":
                    raise RuntimeError(f"injected failure in {logical_id}")
                handler = getattr(importlib.import_module(module_name), attr)
                with self.times.invocation():
                    outcome["result"] = handler(event, context)
            except Exception as exc:
                outcome["error"] = exc
                outcome["trace"] = traceback.format_exception(exc)
            finally:
                with self._in_flight_changed:
                    self._in_flight -= 1
                    self._in_flight_changed.notify_all()

        worker = threading.Thread(target=run, args=(outcome,), name=f"lambda-{logical_id}")
        worker.daemon = True
        with self._in_flight_changed:
            self._in_flight += 1 + (fault == "duplicate")
        worker.start()
        if fault == "duplicate":  # a second invocation of the same event, while in flight
            twin = threading.Thread(target=run, args=({},), name=f"lambda-{logical_id}-twin")
            twin.daemon = True
            twin.start()
        worker.join(timeout)
        if fault == "stop" and not worker.is_alive():
            self._stop_execution_of(event)
        if fault == "after" and not worker.is_alive():
            outcome.clear()  # the side effects happened; the response is lost
        if fault == "after" or worker.is_alive():
            payload = _error_payload(
                "Sandbox.Timedout", f"Task timed out after {timeout:.2f} seconds"
            )
        elif "error" in outcome:
            exc = outcome["error"]
            payload = _error_payload(type(exc).__name__, str(exc), outcome["trace"])
        else:
            payload = json.dumps(outcome.get("result")).encode()
            response_headers["Content-Length"] = str(len(payload))
            return payload
        response_headers["x-amz-function-error"] = "Unhandled"
        response_headers["Content-Length"] = str(len(payload))
        return payload
