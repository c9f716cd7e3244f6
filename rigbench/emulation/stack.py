"""An embedded AWS account running the stack template.yaml declares, in this process.

    with Emulation(fleet=LocalFleet(...)) as emu:  # any rigbench.emulation.Fleet
        arn = emu.start_execution({"rigs": ["torch"], "model": "random:tiny", "budget_usd": 1})
        emu.wait(arn)

A moto server (Step Functions execution enabled) on a free loopback port; resources created
by reading template.yaml (tables, bucket, roles, security group, functions with their handler
and environment, the state machine with its substitutions resolved); Lambda invocations run
the handlers in this process; what moto cannot emulate is asked of the fleet (seams.py).
"""

import io
import json
import socket
import threading
import time
import uuid
import zipfile
from pathlib import Path
from types import TracebackType
from typing import Any

import boto3
import httpx
from moto.server import ThreadedMotoServer

from functions.settings import EMULATED_AMI_PARAMETER
from rigbench.bundle import REPO_ROOT, build_bundle, upload_bundle
from rigbench.emulation.environ import EnvironOverride
from rigbench.emulation.fleet import Fleet
from rigbench.emulation.seams import ACCOUNT_ID, Faults, Seams
from rigbench.emulation.template import TEMPLATE_PATH, Resolver, Template
from rigbench.stack_refs import StackRefs


def baked_image_parameters() -> list[str]:
    from rigs.registry import discover

    names = {p for rig in discover().values() for p in rig.install.prebuilt_ami.values()}
    return sorted(p for p in names if not p.startswith("ami-"))


DONE = {"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"}
RUNTIME_PROPERTIES = {
    "Handler", "Runtime", "Timeout", "MemorySize", "Architectures", "Environment",
}  # fmt: skip
# What a Lambda function's environment gets from the emulated "runtime".
# Metrics would go to CloudWatch as EMF on stdout; here they would only clutter the terminal.
_LAMBDA_RUNTIME_ENV = {
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_METRICS_DISABLED": "true",
    "POWERTOOLS_DEV": "false",
}


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
        self.template = Template.load(template_path)
        self.bundle_root = bundle_root
        self.faults = faults or Faults()
        self.function_timeout_s = function_timeout_s
        self.port = 0
        self._server: ThreadedMotoServer | None = None
        self._seams: Seams | None = None
        self._environ = EnvironOverride()
        self.physical: dict[str, str] = {}  # logical id -> name / id / ARN (Ref)
        self.state_machine_arn = ""
        self.bundle: dict[str, Any] = {}
        self.resolver: Resolver | None = None
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
        self._environ.set({**self.aws_env(), "MOTO_PORT": str(self.port), **_LAMBDA_RUNTIME_ENV})
        self._clients.clear()
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        httpx.post(f"{self.endpoint_url}/moto-api/reset", timeout=60)
        httpx.post(
            f"{self.endpoint_url}/moto-api/config",
            json={"stepfunctions": {"execute_state_machine": True}},
            timeout=60,
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
                    httpx.post(f"{self.endpoint_url}/moto-api/reset", timeout=60)
                finally:
                    self._server.stop()
                    self._server = None
        finally:
            if self._seams is not None:
                self._seams.uninstall()
                self._seams = None
            self._environ.restore()
            if Emulation._running is self:
                Emulation._running = None

    def _stop_executions(self) -> list[str]:
        """StopExecution on every running execution; the ARNs it stopped."""
        if not self.state_machine_arn:
            return []
        sfn = self.client("stepfunctions")
        running = [
            e["executionArn"]
            for e in sfn.list_executions(
                stateMachineArn=self.state_machine_arn, statusFilter="RUNNING"
            )["executions"]
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
            self._session = boto3.session.Session(
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
                aws_session_token="testing",
                region_name=self.region,
            )
        return self._session

    def client(self, name: str) -> Any:
        """A client on the emulated account (cached; clients are thread-safe, sessions not)."""
        with self._lock:
            if name not in self._clients:
                self._clients[name] = self.session().client(name, endpoint_url=self.endpoint_url)  # type: ignore[call-overload]
            return self._clients[name]

    # ------------------------------------------------------------------ deploy
    def _name(self, logical_id: str) -> str:
        return f"{self.stack_name}-{logical_id}"

    def deploy(self) -> None:
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
            **self.parameters,
        }
        resolver = Resolver(
            self.template,
            parameters,
            pseudo={
                "AWS::Region": self.region,
                "AWS::AccountId": ACCOUNT_ID,
                "AWS::StackName": self.stack_name,
                "AWS::Partition": "aws",
                "AWS::URLSuffix": "amazonaws.com",
            },
        )
        self.resolver = resolver
        self._create_tables(resolver)
        self._create_buckets(resolver)
        self._create_topics(resolver)
        self._create_iam(resolver)
        self._create_security_groups(resolver)
        self._create_functions(resolver)
        self._create_state_machines(resolver)
        bucket = self.physical[next(iter(self.template.of_type("AWS::S3::Bucket")))]
        self.bundle = upload_bundle(self.client("s3"), bucket, build_bundle(self.bundle_root))

    def _ref(self, resolver: Resolver, logical_id: str, ref: str, **attrs: str) -> None:
        self.physical[logical_id] = ref
        resolver.refs[logical_id] = ref
        for attr, value in attrs.items():
            resolver.attrs[(logical_id, attr)] = value

    def _create_tables(self, resolver: Resolver) -> None:
        ddb = self.client("dynamodb")
        for logical_id, resource in self.template.of_type("AWS::DynamoDB::Table").items():
            props = resolver.resolve(resource["Properties"])
            name = self._name(logical_id)
            kwargs: dict[str, Any] = {
                "TableName": name,
                "KeySchema": props["KeySchema"],
                "AttributeDefinitions": props["AttributeDefinitions"],
                "BillingMode": props.get("BillingMode", "PAY_PER_REQUEST"),
            }
            if props.get("GlobalSecondaryIndexes"):
                kwargs["GlobalSecondaryIndexes"] = props["GlobalSecondaryIndexes"]
            ddb.create_table(**kwargs)
            arn = f"arn:aws:dynamodb:{self.region}:{ACCOUNT_ID}:table/{name}"
            self._ref(resolver, logical_id, name, Arn=arn)

    def _create_buckets(self, resolver: Resolver) -> None:
        s3 = self.client("s3")
        for logical_id in self.template.of_type("AWS::S3::Bucket"):
            name = f"{self.stack_name}-{logical_id.lower()}-{ACCOUNT_ID}"
            s3.create_bucket(Bucket=name)
            self._ref(resolver, logical_id, name, Arn=f"arn:aws:s3:::{name}")

    def _create_topics(self, resolver: Resolver) -> None:
        """SNS topics (the alarm topic Summarize publishes regression alerts to); their
        subscriptions and encryption are not emulated: a test subscribes a queue to read."""
        sns = self.client("sns")
        for logical_id in self.template.of_type("AWS::SNS::Topic"):
            name = self._name(logical_id)
            arn = sns.create_topic(Name=name)["TopicArn"]
            self._ref(resolver, logical_id, arn, TopicName=name, TopicArn=arn)

    def _create_iam(self, resolver: Resolver) -> None:
        iam = self.client("iam")
        for logical_id, resource in self.template.of_type("AWS::IAM::Role").items():
            props = resolver.resolve(resource["Properties"])
            role = iam.create_role(
                RoleName=self._name(logical_id),
                AssumeRolePolicyDocument=json.dumps(props["AssumeRolePolicyDocument"]),
            )["Role"]
            for policy in props.get("Policies", []):
                iam.put_role_policy(
                    RoleName=role["RoleName"],
                    PolicyName=policy["PolicyName"],
                    PolicyDocument=json.dumps(policy["PolicyDocument"]),
                )
            self._ref(resolver, logical_id, role["RoleName"], Arn=role["Arn"])
        for logical_id, resource in self.template.of_type("AWS::IAM::InstanceProfile").items():
            props = resolver.resolve(resource["Properties"])
            profile = iam.create_instance_profile(InstanceProfileName=self._name(logical_id))[
                "InstanceProfile"
            ]
            for role in props.get("Roles", []):
                iam.add_role_to_instance_profile(
                    InstanceProfileName=profile["InstanceProfileName"], RoleName=role
                )
            self._ref(resolver, logical_id, profile["InstanceProfileName"], Arn=profile["Arn"])
        self._lambda_role = self._service_role(iam, "LambdaRole", "lambda.amazonaws.com")
        self._states_role = self._service_role(iam, "StatesRole", "states.amazonaws.com")

    def _service_role(self, iam: Any, logical_id: str, service: str) -> str:
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}
            ],
        }
        role = iam.create_role(
            RoleName=self._name(logical_id), AssumeRolePolicyDocument=json.dumps(trust)
        )
        return str(role["Role"]["Arn"])

    def _create_security_groups(self, resolver: Resolver) -> None:
        ec2 = self.client("ec2")
        for logical_id, resource in self.template.of_type("AWS::EC2::SecurityGroup").items():
            props = resolver.resolve(resource["Properties"])
            group = ec2.create_security_group(
                GroupName=self._name(logical_id),
                Description=props["GroupDescription"],
                VpcId=props["VpcId"],
            )
            self._ref(resolver, logical_id, group["GroupId"], GroupId=group["GroupId"])

    def _create_functions(self, resolver: Resolver) -> None:
        lam = self.client("lambda")
        defaults = resolver.resolve(
            {k: v for k, v in self.template.function_globals.items() if k in RUNTIME_PROPERTIES}
        )
        code = io.BytesIO()
        with zipfile.ZipFile(code, "w") as archive:
            archive.writestr("README", "handlers run in-process from the working tree")
        logical_ids: dict[str, str] = {}
        for logical_id, resource in self.template.of_type("AWS::Serverless::Function").items():
            # What the runtime needs; Policies and Events are IAM and triggers, not emulated.
            runtime = {k: v for k, v in resource["Properties"].items() if k in RUNTIME_PROPERTIES}
            props = {**defaults, **resolver.resolve(runtime)}
            env = {
                **defaults.get("Environment", {}).get("Variables", {}),
                **props.get("Environment", {}).get("Variables", {}),
            }
            name = self._name(logical_id)
            fn = lam.create_function(
                FunctionName=name,
                Runtime=props["Runtime"],
                Role=self._lambda_role,
                Handler=props["Handler"],
                Code={"ZipFile": code.getvalue()},
                Timeout=int(props.get("Timeout", 3)),
                MemorySize=int(props.get("MemorySize", 128)),
                Architectures=props.get("Architectures", ["x86_64"]),
                Environment={"Variables": {k: str(v) for k, v in env.items()}},
            )
            logical_ids[name] = logical_id
            self._ref(resolver, logical_id, name, Arn=fn["FunctionArn"])
        assert self._seams is not None
        self._seams.logical_ids.update(logical_ids)
        # EventBridge's part, which moto does not play: who hears an execution end (seams.py).
        self._seams.status_change_targets = [
            self.physical[logical_id]
            for logical_id, props in self.function_events("EventBridgeRule").items()
            if "aws.states" in props["Pattern"].get("source", [])
        ]

    def _create_state_machines(self, resolver: Resolver) -> None:
        sfn = self.client("stepfunctions")
        machines: list[str] = []
        for logical_id, resource in self.template.of_type("AWS::Serverless::StateMachine").items():
            props = resource["Properties"]
            definition = (self.template.path.parent / props["DefinitionUri"]).read_text()
            for key, value in resolver.resolve(props.get("DefinitionSubstitutions", {})).items():
                definition = definition.replace("${" + key + "}", str(value))
            arn = sfn.create_state_machine(
                name=self._name(logical_id),
                definition=definition,
                roleArn=self._states_role,
            )["stateMachineArn"]
            self._ref(resolver, logical_id, arn)
            if logical_id == "SweepStateMachine" or not machines:
                self.state_machine_arn = arn  # the sweep's (the bake's is in physical)
            machines.append(arn)

    # ------------------------------------------------------------------ use
    def stack_refs(self) -> StackRefs:
        """The stack outputs the stack client works on, for this emulated stack."""
        return StackRefs(
            stack_name=self.stack_name,
            state_machine_arn=self.state_machine_arn,
            results_table=self.physical["ResultsTable"],
            ledger_table=self.physical["LedgerTable"],
            bucket=self.physical["ArtifactBucket"],
        )

    @property
    def seams(self) -> Seams:
        """The running seams: fault injection, instance times, status-change deliveries."""
        assert self._seams is not None, "the emulation is not started"
        return self._seams

    def table(self, logical_id: str) -> str:
        return self.physical[logical_id]

    def function_events(self, event_type: str) -> dict[str, dict[str, Any]]:
        """Logical id -> event properties, for the functions' events of one type."""
        found = {}
        for logical_id, resource in self.template.of_type("AWS::Serverless::Function").items():
            for event in resource["Properties"].get("Events", {}).values():
                if event["Type"] == event_type:
                    found[logical_id] = event["Properties"]
        return found

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
        for logical_id, props in self.function_events("EventBridgeRule").items():
            pattern = props["Pattern"]
            if source in pattern.get("source", [source]) and detail_type in pattern.get(
                "detail-type", [detail_type]
            ):
                response = lam.invoke(
                    FunctionName=self.physical[logical_id], Payload=json.dumps(event).encode()
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
