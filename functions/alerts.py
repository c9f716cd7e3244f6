"""Regression alerts of a finished sweep: found (functions/regressions.py), published to the
stack's SNS topic, kept in the ledger table by month (functions/tables/ledger.py) and listed
back by Query (`rigbench regressions`, MCP `regressions`).

Publishing is at least once: a retried Summarize publishes again; the stored item of a
regression is keyed by sweep, rig, cell and metric, so storing twice keeps one."""

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from functions.regressions import Regression, RegressionCheck, find_regressions, history_since
from functions.tables import ledger
from functions.tables.results import months_between, query_rows

SUBJECT_LIMIT = 100  # SNS caps a subject at 100 characters
PUBLISH_BATCH = 10  # SNS PublishBatch takes at most 10 messages


def check_sweep(
    ddb: Any,
    results_table: str,
    *,
    sweep_id: str,
    started_at: str,
    model: str,
    instance_type: str,
    regression_ratio: float,
    report: str = "",
) -> RegressionCheck:
    """The sweep's rows against each of its rigs' history, by Query only (the sweep on the
    base table, each rig on `by_config`)."""
    now = datetime.now(UTC)
    rows = query_rows(ddb, results_table, since=now, until=now, sweep=sweep_id)
    since = history_since(started_at)
    history = {}
    for rig in sorted({r["rig"] for r in rows}):
        history[rig] = query_rows(
            ddb, results_table, since=since, until=now,
            rig=rig, model=model, instance_type=instance_type,
        )  # fmt: skip
    check = find_regressions(
        rows, history, sweep_id=sweep_id, started_at=started_at, regression_ratio=regression_ratio
    )
    found = [r.model_copy(update={"report": report}) for r in check.regressions]
    return check.model_copy(update={"regressions": found})


def report_uri(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}" if key else ""


def console_link(uri: str, region: str) -> str:
    """The S3 console page of an s3:// object: a link that does not expire, unlike a
    presigned URL signed by a Lambda role's short-lived credentials."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return (
        f"https://{region}.console.aws.amazon.com/s3/object/{bucket}"
        f"?region={region}&prefix={quote(key)}"
    )


def message(found: Regression, region: str) -> tuple[str, str]:
    """The alert's subject and body."""
    subject = f"rigbench regression: {found.rig} {found.cell_label} {found.metric}"
    report = (
        f"report: {found.report}\n  {console_link(found.report, region)}\n"
        if found.report
        else "report: none was written (see the sweep's execution output)\n"
    )
    body = (
        f"{found.headline}\n\n"
        f"sweep {found.sweep_id} (started {found.sweep_started_at}): {found.rig} serving "
        f"{found.model} on {found.instance_type}, cell {found.cell_label}\n"
        f"{found.metric}: {found.now:.4g} now, {found.history:.4g} in its history "
        f"(geometric means of the boots), {found.worse_by:.3f}x worse; alert threshold "
        f"{found.threshold:g}x\n"
        f"rests on: {found.basis}\n"
        f"earlier sweeps: {', '.join(found.history_sweeps)}\n"
        f"{report}"
        f"list them: rigbench regressions --since {found.sweep_started_at[:10]}\n"
    )
    return subject[:SUBJECT_LIMIT], body


def publish(sns: Any, topic_arn: str, regressions: list[Regression], region: str) -> int:
    """One message per regression, ten to a PublishBatch call (IAM: sns:Publish)."""
    for start in range(0, len(regressions), PUBLISH_BATCH):
        entries = []
        for n, found in enumerate(regressions[start : start + PUBLISH_BATCH]):
            subject, body = message(found, region)
            entries.append({"Id": f"r{start + n}", "Subject": subject, "Message": body})
        answer = sns.publish_batch(TopicArn=topic_arn, PublishBatchRequestEntries=entries)
        if answer.get("Failed"):
            failed = answer["Failed"][0]
            raise RuntimeError(
                f"SNS refused {len(answer['Failed'])} alert(s): {failed.get('Code')}: "
                f"{failed.get('Message')}"
            )
    return len(regressions)


def _sk(found: Regression) -> str:
    return f"{found.sweep_started_at}#{found.sweep_id}#{found.rig}#{found.cell}#{found.metric}"


def store(ddb: Any, table: str, regressions: list[Regression]) -> None:
    for found in regressions:
        item = ledger.key(
            ledger.regressions_pk(ledger.month_of(found.sweep_started_at)), _sk(found)
        )
        item |= {
            "sweep_id": {"S": found.sweep_id},
            "regression": {"S": found.model_dump_json()},
        }
        ddb.put_item(TableName=table, Item=item)


def list_regressions(
    ddb: Any, table: str, *, since: datetime, until: datetime, sweep: str | None = None
) -> list[Regression]:
    """Stored alerts of sweeps started since `since`, oldest first: one Query per month."""
    after = since.astimezone(UTC).isoformat(timespec="seconds")
    found: list[Regression] = []
    for month in months_between(since, until):
        pages = ddb.get_paginator("query").paginate(
            TableName=table,
            KeyConditionExpression="pk = :p AND sk >= :t",
            ExpressionAttributeValues={
                ":p": {"S": ledger.regressions_pk(month)}, ":t": {"S": after},
            },
        )  # fmt: skip
        for page in pages:
            for item in page["Items"]:
                found.append(Regression.model_validate(json.loads(item["regression"]["S"])))
    return [r for r in found if sweep is None or r.sweep_id == sweep]
