"""Everything a sweep report shows, gathered from where the sweep left it.

- results table: one row per rig, boot and cell, with provenance (a Query on the sweep id);
- spend ledger: the price each boot paid, its instance-seconds and cost (a Query on the
  sweep's partition);
- bucket: each boot's harness report, its per-request records and provenance;
- the Step Functions execution, when it still exists: status, wall time, input, and why a
  boot failed. A local sweep's execution lives only as long as the run that started it.

`gather` works on AWS and on the local emulation alike: it takes clients and table names.
"""

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from botocore.exceptions import ClientError
from pydantic import BaseModel

from functions.errors import error_code
from functions.events import HeadlineComparison, Round
from functions.report_keys import LOG_NAMES, PROVENANCE, RECORDS, REPORT, REPORTS_PREFIX, parse_key
from functions.tables import ledger
from harness.boot_phases import BootTiming
from rigbench.report.errors import ReportError
from rigbench.stack.history import fold

__all__ = ["BootData", "ReportError", "Store", "SweepData", "gather"]


@dataclass(frozen=True)
class Store:
    """Where a stack keeps a sweep's traces, and clients to read them."""

    dynamodb: Any
    s3: Any
    stepfunctions: Any | None
    results_table: str
    ledger_table: str
    bucket: str
    state_machine_arn: str | None


class BootData(BaseModel):
    rig: str
    boot: int
    report: dict[str, Any] | None = None  # the harness report (report.schema.json)
    records: list[dict[str, Any]] | None = None  # per-request records (RequestRecord)
    provenance: dict[str, Any] = {}
    price_usd_per_hour: float | None = None  # from the ledger: what this boot paid
    instance_seconds: float | None = None
    cost_usd: float | None = None
    ledger_status: str | None = None  # "reserved" (still running, or not reconciled) / ...
    outcome: str | None = None  # "succeeded" / "failed" from the execution; None: unknown
    error: str = ""
    logs: list[str] = []  # links to the logs its instances uploaded (bootstrap.log, rig.log)
    timing: BootTiming | None = None  # its phases and start (results rows); None: none stored

    @property
    def price_paid(self) -> float | None:
        """What the instance was charged per hour (its spot price history, stored with its
        rows), else the ledger's price (the reservation's bound)."""
        paid = self.timing.price_usd_per_hour if self.timing else None
        return paid if paid is not None else self.price_usd_per_hour


class SweepData(BaseModel):
    sweep_id: str
    status: str | None = None  # the execution's status; None when the execution is gone
    error: str = ""  # why it failed: the execution's error name (RoundDecisionFailed, ...)
    cause: str = ""
    started_at: datetime | None = None
    stopped_at: datetime | None = None
    sweep_input: dict[str, Any] | None = None
    rigs: list[str]
    model: str | None = None
    instance_type: str | None = None
    boots: list[BootData]
    budget_usd: float | None = None
    spent_usd: float | None = None
    reserved_usd: float | None = None  # still held: boots not reconciled yet
    rounds: list[Round] = []  # an adaptive sweep's looks (functions/rounds.py)
    headline: list[HeadlineComparison] = []  # its headline comparisons after the last look

    def reports_by_rig(self) -> dict[str, list[dict[str, Any]]]:
        """Each rig's harness reports in boot order (boots without one left out), rigs in
        name order as `LocalSession.reports` gives them, so the first rig (the comparison's
        baseline) is the one the terminal table uses."""
        found: dict[str, list[dict[str, Any]]] = {}
        for boot in sorted(self.boots, key=lambda b: (b.rig, b.boot)):
            if boot.report is not None:
                found.setdefault(boot.rig, []).append(boot.report)
        return found

    @property
    def instance_hours(self) -> float | None:
        seconds = [b.instance_seconds for b in self.boots if b.instance_seconds is not None]
        return sum(seconds) / 3600 if seconds else None

    @property
    def wall_s(self) -> float | None:
        if self.started_at is None:
            return None
        if self.stopped_at is not None:
            return (self.stopped_at - self.started_at).total_seconds()
        return None


def _micro(item: dict[str, Any], name: str) -> float | None:
    value = item.get(name, {}).get("N")
    return None if value is None else ledger.usd(int(value))


def _ledger(store: Store, sweep_id: str) -> tuple[dict[str, Any], dict[tuple[str, int], Any]]:
    total: dict[str, Any] = {}
    boots: dict[tuple[str, int], Any] = {}
    pages = store.dynamodb.get_paginator("query").paginate(
        TableName=store.ledger_table,
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": ledger.sweep_pk(sweep_id)}},
    )
    for page in pages:
        for item in page["Items"]:
            sk = item["sk"]["S"]
            if sk == ledger.TOTAL:
                total = item
            elif sk.startswith(ledger.BOOT_PREFIX) and item["status"]["S"] != ledger.RELEASED:
                boots[ledger.rig_boot_of_sk(sk)] = item  # a released boot never ran
    return total, boots


def _recorded_instances(boot_item: dict[str, Any]) -> list[str]:
    """The instances Launch recorded for a boot (its ledger item), the last launched last."""
    ids = boot_item.get("instance_ids", {}).get("SS", [])
    return sorted(ids, key=lambda i: float(boot_item.get(f"launched_at:{i}", {}).get("N", "0")))


def _bucket_objects(
    store: Store,
    sweep_id: str,
    ledger_boots: dict[tuple[str, int], Any],
    stored_by: dict[tuple[str, int], str],
) -> tuple[dict[tuple[str, int], dict[str, bytes]], dict[tuple[str, int], list[str]]]:
    """{(rig, boot): {file name: body}} of each boot's instance (functions.report_keys): the
    one its results rows name, else the last the ledger recorded for the boot that left a
    report; and {(rig, boot): [log key]} of every instance the ledger recorded for it. Files
    under any other instance's prefix are never read."""
    listed: dict[tuple[str, int], dict[str, dict[str, str]]] = {}
    for page in store.s3.get_paginator("list_objects_v2").paginate(
        Bucket=store.bucket, Prefix=f"{REPORTS_PREFIX}{sweep_id}/"
    ):
        for obj in page.get("Contents", []):
            found = parse_key(sweep_id, obj["Key"])
            if found is not None:
                files = listed.setdefault((found.rig, found.boot), {})
                files.setdefault(found.instance_id, {})[found.name] = obj["Key"]
    objects: dict[tuple[str, int], dict[str, bytes]] = {}
    log_keys: dict[tuple[str, int], list[str]] = {}
    for boot, by_instance in listed.items():
        recorded = _recorded_instances(ledger_boots.get(boot, {}))
        logs = [
            by_instance[i][name]
            for i in recorded
            if i in by_instance
            for name in LOG_NAMES
            if name in by_instance[i]
        ]
        if logs:
            log_keys[boot] = logs
        candidates = [i for i in recorded if i in by_instance]
        with_report = [i for i in candidates if REPORT in by_instance[i]]
        if not candidates:
            continue
        stored = stored_by.get(boot, "")
        chosen = stored if stored in candidates else (with_report or candidates)[-1]
        objects[boot] = {
            name: store.s3.get_object(Bucket=store.bucket, Key=key)["Body"].read()
            for name, key in by_instance[chosen].items()
            if name not in LOG_NAMES  # named by key only: `rigbench logs` prints them
        }
    return objects, log_keys


def log_link(store: Store, key: str) -> str:
    """Where a person reads a log the report names: the S3 console's page of the object."""
    region = store.s3.meta.region_name
    return (
        f"https://{region}.console.aws.amazon.com/s3/object/{store.bucket}"
        f"?region={region}&prefix={quote(key)}"
    )


def _execution(store: Store, sweep_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    if store.stepfunctions is None or store.state_machine_arn is None:
        return None
    prefix = store.state_machine_arn.replace(":stateMachine:", ":execution:")
    arn = f"{prefix}:{sweep_id}"
    sfn = store.stepfunctions
    try:
        described = dict(sfn.describe_execution(executionArn=arn))
    except ClientError as exc:
        if error_code(exc) in ("ExecutionDoesNotExist", "ResourceNotFound"):
            return None
        raise
    events: list[dict[str, Any]] = []
    for page in sfn.get_paginator("get_execution_history").paginate(executionArn=arn):
        events.extend(page["events"])
    return described, events


def _query_rows(store: Store, sweep_id: str) -> list[dict[str, Any]]:
    from functions.tables.results import query_rows  # the one reader of the results table

    now = datetime.now(UTC)
    return query_rows(store.dynamodb, store.results_table, since=now, until=now, sweep=sweep_id)


def gather(store: Store, sweep_id: str) -> SweepData:
    """Read a sweep's results, spend, reports and execution; ReportError if none exists."""
    rows = _query_rows(store, sweep_id)
    total, ledger_boots = _ledger(store, sweep_id)
    stored_by = {
        (r["rig"], int(r["boot"])): str(r.get("provenance", {}).get("instance_id", ""))
        for r in rows
    }
    objects, log_keys = _bucket_objects(store, sweep_id, ledger_boots, stored_by)
    execution = _execution(store, sweep_id)
    if not (rows or total or objects or execution):
        raise ReportError(
            f"no sweep {sweep_id!r}: no results rows, spend ledger entry, reports or execution "
            "by that id (list recent sweeps with `rigbench results`, or `rigbench status`)"
        )

    sweep_input: dict[str, Any] | None = None
    status = started = stopped = None
    error = cause = ""
    progress = {}
    rounds: list[Round] = []
    headline: list[HeadlineComparison] = []
    if execution is not None:
        described, events = execution
        status = described["status"]
        started, stopped = described.get("startDate"), described.get("stopDate")
        try:
            parsed = json.loads(described.get("input") or "null")
            sweep_input = parsed if isinstance(parsed, dict) else None
        except ValueError:
            sweep_input = None
        folded = fold(events, execution_arn=described["executionArn"])
        progress = {(b.rig, b.boot): b for b in folded.boots if b.boot is not None}
        rounds, headline = folded.rounds, folded.headline
        error, cause = folded.error, folded.cause

    keys = set(ledger_boots) | set(objects) | set(progress)
    keys |= {(r["rig"], int(r["boot"])) for r in rows}
    provenance = {(r["rig"], int(r["boot"])): r.get("provenance", {}) for r in rows}
    timings = {(r["rig"], int(r["boot"])): BootTiming.of_row(r) for r in rows if r.get("phases")}
    boots = []
    for rig, boot in sorted(keys):
        files = objects.get((rig, boot), {})
        boot_item = ledger_boots.get((rig, boot), {})
        found = progress.get((rig, boot))
        seconds = boot_item.get("seconds", {}).get("N")
        boots.append(
            BootData(
                rig=rig,
                boot=boot,
                report=json.loads(files[REPORT]) if REPORT in files else None,
                records=_records(files.get(RECORDS)),
                provenance=provenance.get((rig, boot))
                or (json.loads(files[PROVENANCE]) if PROVENANCE in files else {}),
                price_usd_per_hour=_micro(boot_item, "price"),
                instance_seconds=None if seconds is None else float(seconds),
                cost_usd=_micro(boot_item, "spent"),
                ledger_status=boot_item.get("status", {}).get("S"),
                outcome=(found.outcome or None) if found else None,
                error=(f"{found.error}: {found.cause}" if found.error else "") if found else "",
                logs=[log_link(store, k) for k in log_keys.get((rig, boot), [])],
                timing=_terminated(
                    timings.get((rig, boot)),
                    None if seconds is None else float(seconds),
                    provenance.get((rig, boot), {}),
                ),
            )
        )

    rigs = list((sweep_input or {}).get("rigs") or [])
    rigs += sorted({b.rig for b in boots} - set(rigs))
    model = (sweep_input or {}).get("model") or next((r["model"] for r in rows), None)
    instance_type = (sweep_input or {}).get("instance_type") or next(
        (r["instance_type"] for r in rows), None
    )
    if sweep_input is not None and instance_type is None:
        instance_type = "g5g.2xlarge"  # the input's default (functions.execution_input)
    return SweepData(
        sweep_id=sweep_id,
        status=status,
        error=error,
        cause=cause,
        started_at=started,
        stopped_at=stopped,
        sweep_input=sweep_input,
        rigs=rigs,
        model=model,
        instance_type=instance_type,
        boots=boots,
        budget_usd=_micro(total, "budget"),
        spent_usd=_micro(total, "spent"),
        reserved_usd=_micro(total, "reserved"),
        rounds=rounds,
        headline=headline,
    )


def _terminated(
    timing: BootTiming | None, seconds: float | None, provenance: dict[str, Any]
) -> BootTiming | None:
    """The boot's phases with `terminated`: its instance's billed seconds from launch, where
    one instance ran it (a relaunched boot's seconds are several instances')."""
    if timing is None or seconds is None or provenance.get("interruptions"):
        return timing
    return timing.model_copy(update={"phases": {**timing.phases, "terminated": seconds}})


def _records(body: bytes | None) -> list[dict[str, Any]] | None:
    if body is None:
        return None
    return [json.loads(line) for line in body.decode().splitlines() if line.strip()]
