"""On a schedule (every minute): the backstop behind Finish, the status-change handler and the
instance's dead-man timer. It ends every project instance past its deadline tag, whose sweep's
execution is no longer running, or whose boot Finish gave up on (marked FINISH_FAILED by the
state machine), reconciles those boots from their real run time, and releases the
reservations of sweeps whose execution ended without summarizing (stopping their boot
executions still running first).

Each instance and each ledger item is handled on its own: one that cannot be (termination
protection, a throttle, a malformed tag or item) is logged, counted and skipped, and the others
are still ended. The run then fails (so the Lambda Errors alarm fires) and the `ReaperFailures`
and `OverdueInstances` metrics feed their own alarms. An instance with no deadline tag is ended
only when its tags say the stack launched it, and only `UNTAGGED_GRACE_S` after its launch. A
project instance of no sweep or bake (a stray) is billed to the month at the on-demand price.
"""

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import ClientError

from functions import clock
from functions.boot_executions import stop_boot_executions
from functions.budget import boot_items, close_sweep, open_sweeps, write_with_month
from functions.cleanup import LIVE, end_boot, tagged_instances, terminate
from functions.errors import error_code
from functions.observability import instrumented, logger, metrics
from functions.settings import (
    BAKE_TAG,
    BOOT_TAG,
    DEADLINE_TAG,
    PROJECT_TAG,
    RIG_TAG,
    SWEEP_TAG,
    Clients,
    Settings,
)
from functions.tables import ledger
from functions.tables.ledger import month_of, to_micro, usd
from hardware.instance_types import UnknownInstanceType, get_instance_type


class ReaperFailed(Exception):
    """Some instances or ledger items could not be handled; the others were."""


class MalformedItem(ValueError):
    """An instance's tags or a ledger item the reaper cannot read: it is reported, not acted on."""


# An instance the stack launched carries its deadline tag from RunInstances on; one without it
# (a tag removed by hand, a launch tagged afterwards) is ended only this long after its launch.
UNTAGGED_GRACE_S = 900.0


@dataclass
class Reaped:
    instances: list[str] = field(default_factory=list)
    released_sweeps: list[str] = field(default_factory=list)
    overdue: list[str] = field(default_factory=list)
    finish_failed: list[str] = field(default_factory=list)  # instances of boots Finish gave up
    strays_billed: dict[str, float] = field(default_factory=dict)  # instance -> USD to the month
    failures: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TaggedInstance:
    """A project instance as the reaper reads it: its tags parsed once, refused by name."""

    instance_id: str
    instance_type: str
    launched_at: float
    deadline_at: float | None
    sweep: str | None
    rig: str | None
    boot: int | None
    bake: bool

    @classmethod
    def of(cls, instance: dict[str, Any]) -> "TaggedInstance":
        instance_id = str(instance["InstanceId"])
        tags = {t["Key"]: t["Value"] for t in instance.get("Tags", [])}
        return cls(
            instance_id=instance_id,
            instance_type=str(instance.get("InstanceType", "")),
            launched_at=instance["LaunchTime"].timestamp(),
            deadline_at=_number_tag(instance_id, tags, DEADLINE_TAG),
            sweep=tags.get(SWEEP_TAG),
            rig=tags.get(RIG_TAG),
            boot=_boot_tag(instance_id, tags),
            bake=BAKE_TAG in tags,
        )

    @property
    def boot_key(self) -> tuple[str, str, int] | None:
        """(sweep, rig, boot) when the instance is a sweep's boot."""
        if self.sweep is None or self.rig is None or self.boot is None:
            return None
        return self.sweep, self.rig, self.boot

    @property
    def launched_by_stack(self) -> bool:
        return self.boot_key is not None or (self.bake and self.sweep is not None)

    def overdue(self, now: float) -> bool:
        if self.deadline_at is not None:
            return self.deadline_at <= now
        return self.launched_by_stack and self.launched_at + UNTAGGED_GRACE_S <= now


def _number_tag(instance_id: str, tags: dict[str, str], name: str) -> float | None:
    if name not in tags:
        return None
    try:
        return float(tags[name])
    except ValueError:
        raise MalformedItem(
            f"instance {instance_id}: tag {name} is {tags[name][:40]!r}, not a number"
        ) from None


def _boot_tag(instance_id: str, tags: dict[str, str]) -> int | None:
    number = _number_tag(instance_id, tags, BOOT_TAG)
    if number is not None and not number.is_integer():
        raise MalformedItem(f"instance {instance_id}: tag {BOOT_TAG} is {number}, not a boot")
    return None if number is None else int(number)


def project_instances(ec2: Any, project: str) -> list[dict[str, Any]]:
    """The project's live instances: {"instance": as EC2 describes it, "tags": its tags}."""
    return [
        {"instance": i, "tags": {t["Key"]: t["Value"] for t in i.get("Tags", [])}}
        for i in tagged_instances(ec2, {PROJECT_TAG: project})
        if i["State"]["Name"] in LIVE
    ]


def overdue_instances(ec2: Any, project: str, now: float) -> list[dict[str, Any]]:
    """Project instances past their deadline tag, or launched by the stack without one and past
    the grace period; an instance whose tags cannot be read is left out (the reaper reports
    it)."""
    found = []
    for entry in project_instances(ec2, project):
        try:
            if TaggedInstance.of(entry["instance"]).overdue(now):
                found.append(entry)
        except MalformedItem:
            continue
    return found


class ExecutionStatus:
    """Whether a sweep's execution still runs, looked up once per sweep via the ledger."""

    def __init__(self, ddb: Any, sfn: Any, ledger_table: str) -> None:
        self._ddb, self._sfn, self._table = ddb, sfn, ledger_table
        self._cache: dict[str, bool] = {}

    def running(self, sweep_id: str) -> bool:
        if sweep_id not in self._cache:
            item = self._ddb.get_item(
                TableName=self._table, Key=ledger.sweep_owner(sweep_id), ConsistentRead=True
            ).get("Item", {})
            arn = item.get("execution_arn", {}).get("S", "")
            self._cache[sweep_id] = self._status(arn) == "RUNNING" if arn else True
        return self._cache[sweep_id]

    def _status(self, arn: str) -> str:
        try:
            return str(self._sfn.describe_execution(executionArn=arn)["status"])
        except ClientError as exc:
            if error_code(exc) == "ExecutionDoesNotExist":
                return "GONE"
            raise


def finish_gave_up(ddb: Any, ledger_table: str, boot_key: tuple[str, str, int]) -> bool:
    """Finish failed every retry for this boot (MarkFinishFailed in the ASL)."""
    key = ledger.finish_failed(*boot_key)
    return "Item" in ddb.get_item(TableName=ledger_table, Key=key, ConsistentRead=True)


def bill_stray(
    ddb: Any, ledger_table: str, region: str, tagged: TaggedInstance, ended_at: float
) -> float:
    """A project instance that belongs to no sweep or bake (nothing reserved for it): its run,
    priced at the type's on-demand list price (spot never costs more), is added to the month's
    committed total, once per instance. Returns the USD added (0.0 when billed before)."""
    try:
        price = get_instance_type(tagged.instance_type).price(region)
    except UnknownInstanceType as exc:
        raise MalformedItem(f"instance {tagged.instance_id}: cannot price its run: {exc}") from None
    seconds = max(0.0, ended_at - tagged.launched_at)
    spent = to_micro(price * seconds / 3600)
    month = month_of(datetime.fromtimestamp(ended_at, UTC))
    stray = {
        "TableName": ledger_table,
        "Key": ledger.stray(tagged.instance_id),
        "UpdateExpression": "SET spent = :spent, seconds = :secs, #m = :month",
        "ConditionExpression": "attribute_not_exists(pk)",
        "ExpressionAttributeNames": {"#m": "month"},
        "ExpressionAttributeValues": {
            ":spent": {"N": str(spent)},
            ":secs": {"N": f"{seconds:.3f}"},
            ":month": {"S": month},
        },
    }
    if not write_with_month(ddb, ledger_table, [{"Update": stray}], month, spent):
        return 0.0  # billed by an earlier pass
    return usd(spent)


class Reaper:
    """One pass: every instance and every ledger item on its own; a failure is recorded and
    the pass goes on."""

    def __init__(
        self, clients: Clients, project: str, ledger_table: str, region: str, now: float,
        sfn: Any = None, boot_state_machine_arn: str = "",
    ) -> None:  # fmt: skip
        self.clients, self.project, self.table, self.region = clients, project, ledger_table, region
        self.now = now
        self.sfn = sfn or clients.stepfunctions
        self.boot_state_machine_arn = boot_state_machine_arn
        self.executions = ExecutionStatus(clients.dynamodb, self.sfn, ledger_table)
        self.reaped = Reaped()

    def _failed(self, what: str, exc: Exception) -> None:
        reason = error_code(exc) if isinstance(exc, ClientError) else type(exc).__name__
        self.reaped.failures.append(f"{what}: {reason}: {exc}"[:500])
        logger.exception("the reaper could not handle an item", extra={"item": what})

    def instance(self, instance: dict[str, Any]) -> None:
        tagged = TaggedInstance.of(instance)
        ddb, table = self.clients.dynamodb, self.table
        overdue = tagged.overdue(self.now)
        orphaned = tagged.sweep is not None and not self.executions.running(tagged.sweep)
        boot_key = tagged.boot_key
        gave_up = (
            not (overdue or orphaned)
            and boot_key is not None
            and finish_gave_up(ddb, table, boot_key)
        )
        if tagged.deadline_at is None and not tagged.launched_by_stack:
            logger.warning(
                "a project instance with no deadline tag that the stack did not launch: left",
                extra={"instance": tagged.instance_id},
            )
        if not (overdue or orphaned or gave_up):
            return
        if boot_key is not None:
            end_boot(self.clients.ec2, ddb, table, self.project, *boot_key)
        terminate(self.clients.ec2, tagged.instance_id)  # a stray, a bake, a late duplicate
        self.reaped.instances.append(tagged.instance_id)
        if overdue:
            self.reaped.overdue.append(tagged.instance_id)
        if gave_up:
            self.reaped.finish_failed.append(tagged.instance_id)
        logger.warning(
            "reaped an instance",
            extra={
                "instance": tagged.instance_id, "overdue": overdue, "orphaned": orphaned,
                "finish_gave_up": gave_up,
            },
        )  # fmt: skip
        if boot_key is None and not tagged.bake:  # nothing was reserved for it: bill the month
            billed = bill_stray(ddb, table, self.region, tagged, clock.now())
            self.reaped.strays_billed[tagged.instance_id] = billed

    def sweep(self, item: dict[str, Any]) -> None:
        """An open sweep whose execution ended: end and bill each open boot, then close it."""
        pk = item.get("pk", {}).get("S", "")
        if not pk.startswith(ledger.SWEEP_PREFIX):
            raise MalformedItem(f"open sweep item {pk!r}: its key is not SWEEP#<id>")
        sweep = ledger.sweep_of_pk(pk)
        if self.executions.running(sweep):
            return
        settled = True
        boots, open_boots = [], []
        for record in boot_items(self.clients.dynamodb, self.table, sweep):
            sk = record.get("sk", {}).get("S", "")
            try:
                boots.append(ledger.rig_boot_of_sk(sk))
            except ValueError:
                settled = False
                self._failed(f"sweep {sweep} item {sk!r}", MalformedItem("not BOOT#<rig>#<n>"))
                continue
            if record.get("status", {}).get("S") == "reserved":
                open_boots.append(boots[-1])
        if self.boot_state_machine_arn:  # those of boots ended above (orphaned) too
            try:
                stop_boot_executions(self.sfn, self.boot_state_machine_arn, sweep, boots)
            except Exception as exc:  # the boots are ended all the same
                settled = False
                self._failed(f"sweep {sweep} boot executions", exc)
        for rig, boot in open_boots:
            try:
                end_boot(
                    self.clients.ec2, self.clients.dynamodb, self.table,
                    self.project, sweep, rig, boot,
                )  # fmt: skip
            except Exception as exc:  # one boot must not stop the others
                settled = False
                self._failed(f"sweep {sweep} {rig} boot {boot}", exc)
        if settled:
            close_sweep(self.clients.dynamodb, self.table, sweep)
            self.reaped.released_sweeps.append(sweep)

    def run(self) -> Reaped:
        for entry in project_instances(self.clients.ec2, self.project):
            try:
                self.instance(entry["instance"])
            except Exception as exc:  # one instance must not stop the pass
                self._failed(str(entry["instance"].get("InstanceId", "an instance")), exc)
        for item in open_sweeps(self.clients.dynamodb, self.table):
            try:
                self.sweep(item)
            except Exception as exc:  # one sweep must not stop the pass
                self._failed(f"sweep item {item.get('pk', {}).get('S', '?')!r}", exc)
        reaped = self.reaped
        for name, value in (
            ("InstancesReaped", len(reaped.instances)),
            ("OverdueInstances", len(reaped.overdue)),
            ("FinishGaveUpInstances", len(reaped.finish_failed)),
            ("StrayInstancesBilled", len(reaped.strays_billed)),
            ("ReaperFailures", len(reaped.failures)),
        ):
            metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
        return reaped


def reap(
    clients: Clients, project: str, ledger_table: str, now: float | None = None, sfn: Any = None,
    *, region: str, boot_state_machine_arn: str = "",
) -> Reaped:  # fmt: skip
    """One pass of the reaper; `region` prices strays."""
    now = clock.now() if now is None else now
    return Reaper(clients, project, ledger_table, region, now, sfn, boot_state_machine_arn).run()


@instrumented
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = Settings.from_env()
    reaped = reap(
        Clients(), settings.project, settings.ledger_table, clock.now(), region=settings.region,
        boot_state_machine_arn=settings.boot_state_machine_arn,
    )  # fmt: skip
    if reaped.failures:
        raise ReaperFailed(
            f"{len(reaped.failures)} failures (the rest were reaped: {reaped.instances}): "
            + "; ".join(reaped.failures)[:2000]
        )
    return {"reaped": reaped.instances, "released_sweeps": reaped.released_sweeps}
