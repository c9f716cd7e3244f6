"""An embedded AWS account running the stack template.yaml declares, in this process.

    with Emulation(fleet=LocalFleet(...)) as emu:  # any rigbench.emulation.Fleet
        arn = emu.start_execution({"rigs": ["torch"], "model": "random:tiny", "budget_usd": 1})
        emu.wait(arn)

A moto server (Step Functions execution enabled) on a free loopback port; the stack created by
moto's CloudFormation from template.yaml as aws-sam-translator transforms it (cfn_template.py);
Lambda invocations run the handlers named by each function's Handler in this process; what
moto cannot emulate is asked of the fleet (seams.py).
"""

import io
import json
import socket
import threading
import time
import uuid
import zipfile
from functools import cache
from pathlib import Path
from types import TracebackType
from typing import Any

import boto3
import httpx
from moto.server import ThreadedMotoServer

from functions.settings import EMULATED_AMI_PARAMETER
from harness.version import harness_version
from rigbench.bundle import REPO_ROOT, build_bundle, upload_bundle
from rigbench.emulation.cfn_template import (
    CODE_KEY,
    TEMPLATE_PATH,
    CfnTemplate,
    moto_gaps_bridged,
    transform,
)
from rigbench.emulation.environ import EnvironOverride
from rigbench.emulation.fleet import Fleet
from rigbench.emulation.seams import ACCOUNT_ID, Faults, Seams
from rigbench.emulation.transport import InProcessTransport
from rigbench.stack_refs import StackRefs


def baked_image_parameters() -> list[str]:
    from rigs.registry import discover

    names = {p for rig in discover().values() for p in rig.install.prebuilt_ami.values()}
    return sorted(p for p in names if not p.startswith("ami-"))


DONE = {"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"}
# moto loads its catalogue of 1,400 public AMIs into every new EC2 account (75 ms at every
# deploy, 0.4 s the first time); the stack launches only the image deploy registers, and
# describes no other.
_MOTO_ENV = {"MOTO_EC2_LOAD_DEFAULT_AMIS": "false"}
# What a Lambda function's environment gets from the emulated "runtime".
# Metrics would go to CloudWatch as EMF on stdout; here they would only clutter the terminal.
_LAMBDA_RUNTIME_ENV = {
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_METRICS_DISABLED": "true",
    "POWERTOOLS_DEV": "false",
}


def _placeholder_package() -> bytes:
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("README", "handlers run in-process from the working tree")
    return code.getvalue()


@cache
def _session_for(region: str) -> boto3.session.Session:
    """One session per region for every emulation this process runs: a session's loader keeps
    botocore's service models, which each new session would read and parse again."""
    return boto3.session.Session(
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        aws_session_token="testing",
        region_name=region,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Emulation:
    """One at a time per process: moto's backends are process-wide."""

    _running: "Emulation | None" = None

    def __init__(
        self,
        fleet: Fleet,
        *,
        stack_name: str = "rigbench",
        region: str = "us-east-1",
        parameters: dict[str, Any] | None = None,
        template_path: Path = TEMPLATE_PATH,
        bundle_root: Path = REPO_ROOT,
        faults: Faults | None = None,
        function_timeout_s: float | None = None,
        baked_images: bool = True,
    ) -> None:
        self.baked_images = baked_images
        self.fleet = fleet
        self.stack_name = stack_name
        self.region = region
        self.parameters = dict(parameters or {})
        self.template_path = template_path
        self.template = CfnTemplate(body={"Resources": {}})  # the deployed one, once started
        self.outputs: dict[str, str] = {}
        self.bundle_root = bundle_root
        self.faults = faults or Faults()
        self.function_timeout_s = function_timeout_s
        self.port = 0
        self._server: ThreadedMotoServer | None = None
        self._seams: Seams | None = None
        self._transport: InProcessTransport | None = None
        self._moto_api: httpx.Client | None = None
        self._environ = EnvironOverride()
        self.physical: dict[str, str] = {}  # logical id -> name / id / ARN (Ref)
        self.state_machine_arn = ""
        self.bundle: dict[str, Any] = {}
        self._session: boto3.session.Session | None = None
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle
    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def aws_env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
        }

    def __enter__(self) -> "Emulation":
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        if Emulation._running is not None:
            raise RuntimeError("an emulation is already running in this process; stop it first")
        Emulation._running = self
        self.port = free_port()
        self._environ.set(
            {**self.aws_env(), "MOTO_PORT": str(self.port), **_MOTO_ENV, **_LAMBDA_RUNTIME_ENV}
        )
        self._clients.clear()
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        self._transport = InProcessTransport(self.port)
        self._transport.install()
        # moto's own API, answered by the same app in this process (no socket, no TLS context)
        self._moto_api = httpx.Client(
            base_url=self.endpoint_url, transport=httpx.WSGITransport(app=self._transport.app)
        )
        self._moto_api.post("/moto-api/reset")
        self._moto_api.post(
            "/moto-api/config", json={"stepfunctions": {"execute_state_machine": True}}
        ).raise_for_status()
        self._seams = Seams(self.fleet, self.faults, {}, self.function_timeout_s)
        self._seams.install()
        self.fleet.bind(self.aws_env())
        try:
            self.deploy()
        except Exception:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop executions and the server; whatever fails on the way, the seams come out, the
        environment is restored and another emulation may start."""
        try:
            if self._server is not None:
                try:
                    if self._seams is not None:
                        self._seams.closing = True  # no status-change cleanup while tearing down
                    self._stop_executions()
                    if self._moto_api is not None:
                        self._moto_api.post("/moto-api/reset")
                finally:
                    if self._moto_api is not None:
                        self._moto_api.close()
                        self._moto_api = None
                    self._server.stop()
                    self._server = None
        finally:
            if self._transport is not None:
                self._transport.uninstall()
                self._transport = None
            if self._seams is not None:
                self._seams.uninstall()
                self._seams = None
            self._environ.restore()
            if Emulation._running is self:
                Emulation._running = None

    def _stop_executions(self) -> list[str]:
        """StopExecution on every running execution, sweeps' and boots'; the ARNs it stopped."""
        if not self.state_machine_arn:
            return []
        sfn = self.client("stepfunctions")
        machines = [self.state_machine_arn]
        if "BootStateMachine" in self.physical:
            machines.append(self.physical["BootStateMachine"])
        running = [
            e["executionArn"]
            for machine in machines
            for e in sfn.list_executions(stateMachineArn=machine, statusFilter="RUNNING")[
                "executions"
            ]
        ]
        for arn in running:
            sfn.stop_execution(executionArn=arn, error="EmulationStopped")
        return running

    def stop_executions(self, settle_s: float = 10.0) -> list[str]:
        """Stop every running execution and wait (at most `settle_s`) until each has ended, so
        its history is complete; the ARNs it stopped."""
        stopped = self._stop_executions()
        sfn = self.client("stepfunctions")
        deadline = time.monotonic() + settle_s
        for arn in stopped:
            while (
                sfn.describe_execution(executionArn=arn)["status"] == "RUNNING"
                and time.monotonic() < deadline
            ):
                time.sleep(0.1)
        return stopped

    # ------------------------------------------------------------------ clients
    def session(self) -> boto3.session.Session:
        if self._session is None:
            self._session = _session_for(self.region)
        return self._session

    def client(self, name: str) -> Any:
        """A client on the emulated account (cached; clients are thread-safe, sessions not)."""
        with self._lock:
            if name not in self._clients:
                self._clients[name] = self.session().client(name, endpoint_url=self.endpoint_url)  # type: ignore[call-overload]
            return self._clients[name]

    # ------------------------------------------------------------------ deploy
    def deploy(self) -> None:
        """Create the stack from template.yaml with moto's CloudFormation, as `sam deploy` would:
        the translator's template, parameters as a deployer gives them, then the bundle."""
        ec2 = self.client("ec2")
        vpc = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"][0]
        subnets = sorted(
            ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc["VpcId"]]}])["Subnets"],
            key=lambda s: s["AvailabilityZone"],
        )[:3]
        # A registered image, so that Launch finds its root device as on AWS.
        ami = ec2.register_image(
            Name="rigbench-emulated-dlami",
            RootDeviceName="/dev/sda1",
            BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 100}}],
        )
        self.client("ssm").put_parameter(
            Name=EMULATED_AMI_PARAMETER, Value=ami["ImageId"], Type="String"
        )
        if self.baked_images:
            # Local instances are processes: the account "has" every rig's baked image.
            for parameter in baked_image_parameters():
                self.client("ssm").put_parameter(
                    Name=parameter, Value=ami["ImageId"], Type="String", Overwrite=True
                )
        parameters = {
            "VpcId": vpc["VpcId"],
            "SubnetIds": [s["SubnetId"] for s in subnets],
            "AmiParameter": EMULATED_AMI_PARAMETER,
            "RigbenchVersion": harness_version(),  # as `rigbench deploy` stamps it
            **self.parameters,
        }
        self.template = self._create_stack(parameters)
        self._read_stack()
        self.bundle = upload_bundle(
            self.client("s3"), self.stack_refs().bucket, build_bundle(self.bundle_root)
        )

    def _create_stack(self, parameters: dict[str, Any]) -> CfnTemplate:
        # What `sam package` uploads: here a placeholder package, the handlers run in-process.
        code_bucket = f"{self.stack_name}-emulated-artifacts-{ACCOUNT_ID}"
        s3 = self.client("s3")
        s3.create_bucket(Bucket=code_bucket)
        s3.put_object(Bucket=code_bucket, Key=CODE_KEY, Body=_placeholder_package())
        template = transform(self.stack_name, self.region, code_bucket, self.template_path)
        cfn = self.client("cloudformation")
        with moto_gaps_bridged():
            cfn.create_stack(
                StackName=self.stack_name,
                TemplateBody=json.dumps(template.body),
                Parameters=template.stack_parameters(parameters),
                Capabilities=["CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"],
            )
        # Lambda copied the package at creation; the bucket goes, as no stack resource of ours.
        s3.delete_object(Bucket=code_bucket, Key=CODE_KEY)
        s3.delete_bucket(Bucket=code_bucket)
        stack = cfn.describe_stacks(StackName=self.stack_name)["Stacks"][0]
        if stack["StackStatus"] != "CREATE_COMPLETE":
            raise RuntimeError(
                f"the emulated stack is {stack['StackStatus']}: {stack.get('StackStatusReason')}"
            )
        return template

    def _read_stack(self) -> None:
        """Physical ids from the stack; which function is which, and who hears an execution
        end (EventBridge's part, which moto does not play: seams.py)."""
        cfn = self.client("cloudformation")
        pages = cfn.get_paginator("list_stack_resources").paginate(StackName=self.stack_name)
        for page in pages:
            for resource in page["StackResourceSummaries"]:
                self.physical[resource["LogicalResourceId"]] = resource["PhysicalResourceId"]
        outputs = {
            o["OutputKey"]: o["OutputValue"]
            for o in cfn.describe_stacks(StackName=self.stack_name)["Stacks"][0]["Outputs"]
        }
        self.outputs = outputs
        self.state_machine_arn = outputs["StateMachineArn"]
        assert self._seams is not None
        self._seams.logical_ids.update(
            {self.physical[f]: f for f in self.template.of_type("AWS::Lambda::Function")}
        )
        heard = [
            r for r in self.template.event_rules() if "aws.states" in r.pattern.get("source", [])
        ]
        self._seams.status_change_targets = [self.physical[t] for r in heard for t in r.targets]
        self._seams.status_change_machines = {
            self.physical[machine["Ref"]]
            for rule in heard
            for machine in rule.pattern.get("detail", {}).get("stateMachineArn", [])
        }

    # ------------------------------------------------------------------ use
    def stack_refs(self) -> StackRefs:
        """The stack outputs the stack client works on, for this emulated stack."""
        return StackRefs(
            stack_name=self.stack_name,
            state_machine_arn=self.outputs["StateMachineArn"],
            results_table=self.outputs["ResultsTableName"],
            ledger_table=self.outputs["LedgerTableName"],
            bucket=self.outputs["BucketName"],
        )

    @property
    def seams(self) -> Seams:
        """The running seams: fault injection, instance times, status-change deliveries."""
        assert self._seams is not None, "the emulation is not started"
        return self._seams

    def table(self, logical_id: str) -> str:
        return self.physical[logical_id]

    def start_execution(
        self, execution_input: dict[str, Any] | str, name: str | None = None
    ) -> str:
        body = execution_input if isinstance(execution_input, str) else json.dumps(execution_input)
        return str(
            self.client("stepfunctions").start_execution(
                stateMachineArn=self.state_machine_arn,
                input=body,
                name=name or f"sweep-{uuid.uuid4().hex[:12]}",
            )["executionArn"]
        )

    def wait(self, execution_arn: str, timeout_s: float = 120.0) -> dict[str, Any]:
        sfn = self.client("stepfunctions")
        deadline = time.monotonic() + timeout_s
        while True:
            described = sfn.describe_execution(executionArn=execution_arn)
            if described["status"] in DONE:
                return dict(described)
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{execution_arn} still {described['status']} after {timeout_s} s"
                )
            time.sleep(0.1)

    def deliver_event(self, detail_type: str, source: str, detail: dict[str, Any]) -> list[Any]:
        """Deliver an EventBridge event to the functions whose rule matches it."""
        event = {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": detail_type,
            "source": source,
            "account": ACCOUNT_ID,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "region": self.region,
            "resources": [],
            "detail": detail,
        }
        lam = self.client("lambda")
        results = []
        for rule in self.template.event_rules():
            pattern = rule.pattern
            if source in pattern.get("source", [source]) and detail_type in pattern.get(
                "detail-type", [detail_type]
            ):
                for target in rule.targets:
                    response = lam.invoke(
                        FunctionName=self.physical[target], Payload=json.dumps(event).encode()
                    )
                    results.append(json.loads(response["Payload"].read()))
        return results

    def interrupt_spot(self, instance_id: str) -> list[Any]:
        """What AWS does two minutes before reclaiming a spot instance."""
        return self.deliver_event(
            "EC2 Spot Instance Interruption Warning",
            "aws.ec2",
            {"instance-id": instance_id, "instance-action": "terminate"},
        )

    def reclaim_spot(self, instance_id: str) -> None:
        """EC2 reclaims the spot instance (its process, in local mode, ends with it)."""
        self.seams.reclaim(instance_id, self.region)

    def run_scheduled(self, logical_id: str) -> Any:
        response = self.client("lambda").invoke(
            FunctionName=self.physical[logical_id], Payload=b"{}"
        )
        return json.loads(response["Payload"].read())

    def running_instances(self) -> list[str]:
        ec2 = self.client("ec2")
        found: list[str] = []
        for reservation in ec2.describe_instances(
            Filters=[
                {
                    "Name": "instance-state-name",
                    "Values": ["pending", "running", "stopping", "stopped"],
                }
            ]
        )["Reservations"]:
            found.extend(i["InstanceId"] for i in reservation["Instances"])
        return found
