"""The stack's configuration as the handlers see it: environment variables set by template.yaml."""

import os
import threading
from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, Literal

import boto3
from botocore.config import Config
from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_scheduler import EventBridgeSchedulerClient
    from mypy_boto3_service_quotas import ServiceQuotasClient
    from mypy_boto3_ssm import SSMClient
    from mypy_boto3_stepfunctions import SFNClient

# Tags every launched instance carries; the IAM policies key on PROJECT_TAG.
PROJECT_TAG = "rigbench:project"
SWEEP_TAG = "rigbench:sweep"
RIG_TAG = "rigbench:rig"
BOOT_TAG = "rigbench:boot"
DEADLINE_TAG = "rigbench:deadline"
BAKE_TAG = "rigbench:bake"  # a bake's builder instance (its SWEEP_TAG is the bake id)


SWEEP_REPORTS_PREFIX = "sweep-reports/"
# The AMI parameter the embedded emulation deploys the stack with: a stack that has it is the
# local one (its reports tell how to rerun with `--local`).
EMULATED_AMI_PARAMETER = "/rigbench/emulated/ami-id"


def sweep_report_key(sweep_id: str) -> str:
    """Where WriteReport puts a sweep's HTML report: outside reports/, which instances may write."""
    return f"{SWEEP_REPORTS_PREFIX}{sweep_id}/report.html"


# Standard retry mode: bounded client retries; the state machine owns the longer retries.
CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 3})


def _csv(env: Mapping[str, str], name: str) -> list[str]:
    return [part.strip() for part in env.get(name, "").split(",") if part.strip()]


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    project: str
    results_table: str
    ledger_table: str
    idempotency_table: str
    bucket: str
    bundle_manifest_key: str
    subnet_ids: list[str]
    security_group_id: str
    instance_profile_arn: str
    ami_parameter: str
    # template.yaml's InstanceHost (hardware.local_host.InstanceHost; not imported: the
    # Summarize package carries no hardware/)
    instance_host: Literal["ec2", "local"] = "ec2"
    allowed_instance_types: list[str]
    sweep_budget_usd: float
    monthly_cap_usd: float
    token_secret_arn: str
    region: str
    min_poll_s: int = 1
    deadline_role_arn: str = ""  # the Scheduler role that may terminate project instances
    # arn:<partition>:ec2:<region>:<account>:instance/ - an instance's ARN is this + its id.
    instance_arn_prefix: str = ""
    alert_topic_arn: str = ""  # where Summarize publishes regression alerts (SNS)
    # the boot state machine (statemachine/boot.asl.json): the end handler and the reaper stop
    # the boot executions of an ended sweep (functions/boot_executions.py)
    boot_state_machine_arn: str = ""

    @classmethod
    def from_env(cls) -> "Settings":
        return cls.from_mapping(os.environ)

    @classmethod
    def from_mapping(cls, env: Mapping[str, str]) -> "Settings":
        """From a function's environment (this process's, or a deployed function's)."""
        return cls(
            project=env["PROJECT"],
            results_table=env["RESULTS_TABLE"],
            ledger_table=env["LEDGER_TABLE"],
            idempotency_table=env["IDEMPOTENCY_TABLE"],
            bucket=env["BUCKET"],
            bundle_manifest_key=env.get("BUNDLE_MANIFEST_KEY", "bundle/current.json"),
            subnet_ids=_csv(env, "SUBNET_IDS"),
            security_group_id=env.get("SECURITY_GROUP_ID", ""),
            instance_profile_arn=env.get("INSTANCE_PROFILE_ARN", ""),
            ami_parameter=env.get("AMI_PARAMETER", ""),
            instance_host=env.get("INSTANCE_HOST", "ec2"),
            allowed_instance_types=_csv(env, "ALLOWED_INSTANCE_TYPES"),
            sweep_budget_usd=float(env.get("SWEEP_BUDGET_USD", "0")),
            monthly_cap_usd=float(env.get("MONTHLY_CAP_USD", "0")),
            token_secret_arn=env.get("TOKEN_SECRET_ARN", ""),
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
            min_poll_s=int(env.get("MIN_POLL_S", "1")),
            deadline_role_arn=env.get("DEADLINE_ROLE_ARN", ""),
            instance_arn_prefix=env.get("INSTANCE_ARN_PREFIX", ""),
            alert_topic_arn=env.get("ALERT_TOPIC_ARN", ""),
            boot_state_machine_arn=env.get("BOOT_STATE_MACHINE_ARN", ""),
        )


# One session per process, as Lambda reuses it across warm invocations: loading the service
# models is the slow part of making a client. Sessions are not thread-safe: hence the lock.
_SESSION_LOCK = threading.Lock()
_SESSION: boto3.session.Session | None = None


def shared_session() -> boto3.session.Session:
    global _SESSION
    with _SESSION_LOCK:
        if _SESSION is None:
            _SESSION = boto3.session.Session()
        return _SESSION


class Clients:
    """boto3 clients built on first use, from the environment at call time (not import time).

    `Clients()` hands back one instance per AWS endpoint, so that warm invocations reuse their
    clients as Lambda's guidance asks; pass a session for a private set (tests, the CLI).
    """

    _shared: dict[str, "Clients"] = {}  # noqa: RUF012 - a per-process cache

    def __new__(cls, session: boto3.session.Session | None = None) -> "Clients":
        if session is not None:
            return super().__new__(cls)
        endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
        with _SESSION_LOCK:
            if endpoint not in cls._shared:
                cls._shared[endpoint] = super().__new__(cls)
            return cls._shared[endpoint]

    def __init__(self, session: boto3.session.Session | None = None) -> None:
        if getattr(self, "_session", None) is not None and session is None:
            return  # a shared instance, already set up
        self._session = session or shared_session()

    @cached_property
    def ec2(self) -> "EC2Client":
        with _SESSION_LOCK:
            return self._session.client("ec2", config=CLIENT_CONFIG)

    @cached_property
    def ssm(self) -> "SSMClient":
        with _SESSION_LOCK:
            return self._session.client("ssm", config=CLIENT_CONFIG)

    @cached_property
    def dynamodb(self) -> "DynamoDBClient":
        with _SESSION_LOCK:
            return self._session.client("dynamodb", config=CLIENT_CONFIG)

    @cached_property
    def s3(self) -> "S3Client":
        with _SESSION_LOCK:
            return self._session.client("s3", config=CLIENT_CONFIG)

    @cached_property
    def stepfunctions(self) -> "SFNClient":
        with _SESSION_LOCK:
            return self._session.client("stepfunctions", config=CLIENT_CONFIG)

    @cached_property
    def scheduler(self) -> "EventBridgeSchedulerClient":
        with _SESSION_LOCK:
            return self._session.client("scheduler", config=CLIENT_CONFIG)

    @cached_property
    def sns(self) -> Any:  # no mypy-boto3-sns stubs installed
        with _SESSION_LOCK:
            return self._session.client("sns", config=CLIENT_CONFIG)

    @cached_property
    def service_quotas(self) -> "ServiceQuotasClient":
        with _SESSION_LOCK:
            return self._session.client("service-quotas", config=CLIENT_CONFIG)
