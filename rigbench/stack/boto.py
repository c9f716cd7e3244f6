"""The stack client over boto3: everything both stacks do the same way, given a boto3 session
and the stack's outputs. `AwsStack` finds them in CloudFormation; `LocalStack` in its
emulation. Reading AWS answers into `rigbench.stack.models` happens here and nowhere else."""

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from functions.cleanup import terminate
from functions.errors import error_code
from functions.execution_input import SweepInput, execution_input
from functions.quota import instance_vcpus, quota_code, running_g_vcpus
from functions.reaper import overdue_instances, project_instances, reap
from functions.report_keys import LOG_NAMES, REPORTS_PREFIX, parse_key
from functions.settings import (
    BOOT_TAG,
    DEADLINE_TAG,
    PROJECT_TAG,
    RIG_TAG,
    SWEEP_TAG,
    Clients,
    sweep_report_key,
)
from functions.tables import results as results_table
from functions.tables.ledger import boot_instances
from rigbench.bundle import REPO_ROOT, build_bundle
from rigbench.bundle import upload_bundle as put_bundle
from rigbench.stack.client import REPORT_URL_EXPIRES_S, STOPPED_BY_USER, StackError
from rigbench.stack.deployed_plan import VALIDATE_STATE, deployed_settings, plan_deployed
from rigbench.stack.history import boot_executions_in_flight, fold
from rigbench.stack.models import (
    BootLog,
    BundleManifest,
    QuotaCheck,
    ReapReport,
    ResultRow,
    ResultsQuery,
    StackInstance,
    SweepPlan,
    SweepProgress,
    SweepStarted,
    SweepSummary,
)
from rigbench.stack_refs import StackRefs

if TYPE_CHECKING:
    from functions.regressions import Regression

FOLLOW_POLL_S = 2.0
RESULTS_DEFAULT_DAYS = 30


def aws_errors(what: str) -> "_AwsErrors":
    """Translate botocore errors inside the block into a StackError naming `what`."""
    return _AwsErrors(what)


class _AwsErrors:
    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(exc, ClientError):
            message = exc.response.get("Error", {}).get("Message", str(exc))
            raise StackError(f"{self.what}: {error_code(exc)}: {message}") from exc
        if isinstance(exc, BotoCoreError):
            raise StackError(f"{self.what}: cannot reach AWS: {exc}") from exc


def stop_cause(by: str) -> str:
    """What a stopped sweep's status says (its instances are ended by its status-change
    handler, which bills each boot to when its instance ended)."""
    return (
        f"stopped by {by} at {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC (rigbench stop): its "
        "instances were terminated and each boot billed to when its instance ended"
    )


def sweep_name(sweep: SweepInput, name: str | None) -> str:
    return name or sweep.sweep_id or f"sweep-{datetime.now(UTC):%Y%m%d-%H%M%S}"


def _instance(entry: dict[str, Any], now: float) -> StackInstance:
    instance, tags = entry["instance"], entry["tags"]
    deadline = float(tags.get(DEADLINE_TAG, "0") or 0)
    boot = tags.get(BOOT_TAG)
    return StackInstance(
        instance_id=instance["InstanceId"],
        state=instance["State"]["Name"],
        instance_type=instance["InstanceType"],
        launched_at=instance.get("LaunchTime"),
        sweep_id=tags.get(SWEEP_TAG),
        rig=tags.get(RIG_TAG),
        boot=int(boot) if boot and boot.isdigit() else None,
        deadline=datetime.fromtimestamp(deadline, UTC) if deadline else None,
        overdue=deadline <= now,
        tags=tags,
    )


class BotoStack:
    """A `StackClient` on a boto3 session and the stack's outputs (see subclasses)."""

    kind = "aws"

    def __init__(self, session: boto3.session.Session, refs: StackRefs) -> None:
        self._session = session
        self._refs = refs
        self._clients: dict[str, Any] = {}
        self.follow_poll_s = FOLLOW_POLL_S

    @property
    def refs(self) -> StackRefs:
        return self._refs

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self._session.client(service)  # type: ignore[call-overload]
        return self._clients[service]

    def __enter__(self) -> "BotoStack":
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    # -- sweeps ------------------------------------------------------------------------------
    def start_sweep(self, sweep: SweepInput, name: str | None = None) -> SweepStarted:
        name = sweep_name(sweep, name)
        with aws_errors(f"starting sweep {name!r}"):
            arn = self.client("stepfunctions").start_execution(
                stateMachineArn=self.refs.state_machine_arn, name=name,
                input=json.dumps(execution_input(sweep)),
            )["executionArn"]  # fmt: skip
        return SweepStarted(execution_arn=str(arn), sweep_id=name)

    def history(self, execution_arn: str) -> list[dict[str, Any]]:
        """The execution's history events, as GetExecutionHistory returns them."""
        events: list[dict[str, Any]] = []
        pages = self.client("stepfunctions").get_paginator("get_execution_history")
        for page in pages.paginate(executionArn=execution_arn):
            events.extend(page["events"])
        return events

    def describe_sweep(self, execution: str) -> SweepProgress:
        arn = self.refs.execution_arn(execution)
        with aws_errors(f"sweep {execution!r}"):
            described = self.client("stepfunctions").describe_execution(executionArn=arn)
            events = self.history(arn)
            boots = {boot: self.history(boot) for boot in boot_executions_in_flight(events)}
            return fold(events, execution_arn=arn, described=described, boot_events=boots)

    def follow_sweep(
        self,
        execution: str,
        on_update: Callable[[SweepProgress], None] | None = None,
        poll_s: float | None = None,
    ) -> SweepProgress:
        while True:
            progress = self.describe_sweep(execution)
            if progress.done:  # read once more: the last events land with the status
                progress = self.describe_sweep(execution)
            if on_update is not None:
                on_update(progress)
            if progress.done:
                return progress
            time.sleep(self.follow_poll_s if poll_s is None else poll_s)

    def stop_sweep(self, execution: str, by: str) -> SweepProgress:
        arn = self.refs.execution_arn(execution)
        sfn = self.client("stepfunctions")
        with aws_errors(f"stopping sweep {execution!r}"):
            status = sfn.describe_execution(executionArn=arn)["status"]
            if status != "RUNNING":
                raise StackError(f"sweep {execution!r} is not running: it ended {status}")
            sfn.stop_execution(executionArn=arn, error=STOPPED_BY_USER, cause=stop_cause(by))
        return self.describe_sweep(execution)

    def list_sweeps(self, limit: int = 20) -> list[SweepSummary]:
        with aws_errors("listing sweeps"):
            listed = self.client("stepfunctions").list_executions(
                stateMachineArn=self.refs.state_machine_arn, maxResults=limit
            )["executions"]
        return [
            SweepSummary(
                sweep_id=e["name"],
                execution_arn=e["executionArn"],
                status=e["status"],
                started_at=e["startDate"],
                stopped_at=e.get("stopDate"),
            )
            for e in listed
        ]

    def plan(self, sweep: SweepInput) -> SweepPlan:
        """A dry run against the deployed stack, read-only (`rigbench.stack.deployed_plan`)."""
        return self.check_plan(sweep)

    def check_plan(self, sweep: SweepInput) -> SweepPlan:
        with aws_errors(f"planning against stack {self.refs.stack_name!r}"):
            return plan_deployed(
                self._handler_clients(), self.client("lambda"), self.refs, execution_input(sweep),
                datetime.now(UTC),
            )  # fmt: skip

    def allowed_instance_types(self) -> list[str]:
        region = self.client("ec2").meta.region_name
        with aws_errors(f"reading stack {self.refs.stack_name!r}'s settings"):
            settings = deployed_settings(
                self._handler_clients(), self.client("lambda"), self.refs, region
            )
        return list(settings[VALIDATE_STATE].allowed_instance_types)

    # -- results -----------------------------------------------------------------------------
    def results(self, query: ResultsQuery) -> list[ResultRow]:
        now = datetime.now(UTC)
        since = query.since or now - timedelta(days=RESULTS_DEFAULT_DAYS)
        with aws_errors("reading results"):
            rows = results_table.query_rows(
                self.client("dynamodb"), self.refs.results_table, since=since, until=now,
                sweep=query.sweep, rig=query.rig, model=query.model,
                instance_type=query.instance_type,
            )  # fmt: skip
        rows.sort(key=lambda r: (r.get("started_at", ""), r["sweep_id"], r["row_key"]))
        return [ResultRow.model_validate(r) for r in rows]

    def regressions(
        self, since: datetime | None = None, sweep: str | None = None
    ) -> "list[Regression]":
        from functions.alerts import list_regressions  # the statistics load only here

        now = datetime.now(UTC)
        with aws_errors("reading regression alerts"):
            return list_regressions(
                self.client("dynamodb"), self.refs.ledger_table,
                since=since or now - timedelta(days=RESULTS_DEFAULT_DAYS), until=now, sweep=sweep,
            )  # fmt: skip

    # -- instances and spend -----------------------------------------------------------------
    def _handler_clients(self) -> Clients:
        return Clients(self._session)

    def instances(self) -> list[StackInstance]:
        now = time.time()
        with aws_errors("listing instances"):
            found = project_instances(self.client("ec2"), self.refs.stack_name)
        return [_instance(entry, now) for entry in found]

    def terminate_instance(self, instance_id: str) -> StackInstance:
        mine = {i.instance_id: i for i in self.instances()}
        if instance_id not in mine:
            raise StackError(
                f"{instance_id} is not a live instance of stack {self.refs.stack_name!r} "
                f"(no {PROJECT_TAG}={self.refs.stack_name} tag): not terminated"
            )
        with aws_errors(f"terminating {instance_id}"):
            terminate(self.client("ec2"), instance_id)
        return mine[instance_id].model_copy(update={"state": "shutting-down"})

    def reap(self, dry_run: bool = False) -> ReapReport:
        with aws_errors("reaping"):
            if dry_run:
                overdue = overdue_instances(self.client("ec2"), self.refs.stack_name, time.time())
                ids = [e["instance"]["InstanceId"] for e in overdue]
                return ReapReport(dry_run=True, instances=ids)
            reaped = reap(
                self._handler_clients(), self.refs.stack_name, self.refs.ledger_table,
                region=self.client("ec2").meta.region_name,
            )  # fmt: skip
        return ReapReport(
            dry_run=False, instances=reaped.instances, released_sweeps=reaped.released_sweeps
        )

    def check_quota(self, instance_type: str, market: str = "spot") -> QuotaCheck:
        code = quota_code(market)
        with aws_errors(f"quota {code}"):
            quota = self.client("service-quotas").get_service_quota(
                ServiceCode="ec2", QuotaCode=code
            )["Quota"]["Value"]
            need = instance_vcpus(self.client("ec2"), [instance_type])[instance_type]
            used = running_g_vcpus(self.client("ec2"), market)
        room = float(quota) - used
        return QuotaCheck(
            market=market, instance_type=instance_type, quota_code=code,
            quota_vcpus=float(quota), used_vcpus=used, room_vcpus=room, instance_vcpus=need,
            fits=int(room // need) if room > 0 else 0,
        )  # fmt: skip

    # -- reports -----------------------------------------------------------------------------
    def _report_object(self, sweep_id: str, call: str) -> dict[str, Any]:
        """S3's `call` (get_object, head_object) on the sweep's report; a missing one is a
        StackError that says what may have happened."""
        key = sweep_report_key(sweep_id)
        with aws_errors(f"reading s3://{self.refs.bucket}/{key}"):
            try:
                found: dict[str, Any] = getattr(self.client("s3"), call)(
                    Bucket=self.refs.bucket, Key=key
                )
                return found
            except ClientError as exc:
                if error_code(exc) not in ("NoSuchKey", "404", "NotFound"):
                    raise
        raise StackError(
            f"no report for sweep {sweep_id!r} in s3://{self.refs.bucket}: no such sweep, it is "
            "still running, or its report failed (its output's report_missing says why); "
            f"`rigbench report {sweep_id}` makes one from what it stored"
        )

    def sweep_report(self, sweep_id: str) -> str:
        return bytes(self._report_object(sweep_id, "get_object")["Body"].read()).decode()

    def report_location(self, sweep_id: str, expires_s: int = REPORT_URL_EXPIRES_S) -> str:
        self._report_object(sweep_id, "head_object")
        # SigV4: buckets made since 2020 refuse the SigV2 URLs boto3 may otherwise sign.
        signer = self._session.client("s3", config=Config(signature_version="s3v4"))
        url: str = signer.generate_presigned_url(
            "get_object",
            Params={"Bucket": self.refs.bucket, "Key": sweep_report_key(sweep_id)},
            ExpiresIn=expires_s,
        )
        return url

    # -- logs --------------------------------------------------------------------------------
    def _recorded(
        self, sweep_id: str, rig: str | None, boot: int | None
    ) -> dict[tuple[str, int], list[str]]:
        with aws_errors(f"reading sweep {sweep_id!r}'s ledger"):
            recorded = boot_instances(self.client("dynamodb"), self.refs.ledger_table, sweep_id)
        if not recorded:
            raise StackError(
                f"no sweep {sweep_id!r} with a launched boot in this stack's ledger "
                "(`rigbench status` lists the sweeps)"
            )
        return {
            key: ids
            for key, ids in sorted(recorded.items())
            if (rig is None or key[0] == rig) and (boot is None or key[1] == boot)
        }

    def boot_logs(
        self, sweep_id: str, rig: str | None = None, boot: int | None = None
    ) -> list[BootLog]:
        recorded = self._recorded(sweep_id, rig, boot)
        s3, bucket = self.client("s3"), self.refs.bucket
        keys: dict[tuple[str, int, str], dict[str, str]] = {}
        with aws_errors(f"listing s3://{bucket}/{REPORTS_PREFIX}{sweep_id}/"):
            pages = s3.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=f"{REPORTS_PREFIX}{sweep_id}/"
            )
            for obj in (o for page in pages for o in page.get("Contents", [])):
                found = parse_key(sweep_id, obj["Key"])
                if found is not None and found.name in LOG_NAMES:
                    where = (found.rig, found.boot, found.instance_id)
                    keys.setdefault(where, {})[found.name] = obj["Key"]
        logs = []
        for (boot_rig, boot_n), instances in recorded.items():
            for instance_id in instances:  # an instance the ledger did not record: never read
                for name in LOG_NAMES:
                    key = keys.get((boot_rig, boot_n, instance_id), {}).get(name)
                    if key is None:
                        continue
                    with aws_errors(f"reading s3://{bucket}/{key}"):
                        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
                    logs.append(
                        BootLog(
                            rig=boot_rig, boot=boot_n, instance_id=instance_id, name=name,
                            location=f"s3://{bucket}/{key}",
                            text=body.decode("utf-8", errors="replace"),
                        )
                    )  # fmt: skip
        return logs

    # -- bundle ------------------------------------------------------------------------------
    def upload_bundle(self, root: Path | None = None) -> BundleManifest:
        bundle = build_bundle(root or REPO_ROOT)
        with aws_errors(f"uploading the bundle to s3://{self.refs.bucket}"):
            return BundleManifest.model_validate(
                put_bundle(self.client("s3"), self.refs.bucket, bundle)
            )
