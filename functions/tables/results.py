"""The results table: one row per load cell of one boot (template.yaml `ResultsTable`).

Keys: pk `sweep_id`, sk `row_key` = rig#boot#cell (a sweep is one Query).
GSI `by_config`: `config_key` = rig#model#instance_type, `started_at` (one rig/model/type
over time is one Query). GSI `by_month`: `month`, `started_at` (recent rows without a full
key). Rows are read by Query only, never Scan.
"""

import json
from datetime import datetime
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from harness.schemas import CellReport

BY_CONFIG = "by_config"
BY_MONTH = "by_month"
_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def config_key(rig: str, model: str, instance_type: str) -> str:
    return f"{rig}#{model}#{instance_type}"


def cell_key(cell: CellReport) -> str:
    """A cell in a row's sort key: `c00008` for a concurrency, `r000002.5000` for a rate (fixed
    width, so a boot's rows sort by their load)."""
    if cell.concurrency is not None:
        return f"c{cell.concurrency:05d}"
    if cell.rate is not None:
        return f"r{cell.rate:011.4f}"
    raise ValueError("a cell has neither concurrency nor rate")


def row_key(rig: str, boot: int, cell: str) -> str:
    return f"{rig}#{boot:02d}#{cell}"


def to_item(row: dict[str, Any]) -> dict[str, Any]:
    """A row (plain JSON values) as a DynamoDB item; floats become Decimals, None is dropped."""
    as_decimals = json.loads(json.dumps(row), parse_float=Decimal)
    return {k: _serializer.serialize(v) for k, v in as_decimals.items() if v is not None}


def _number(value: Any) -> Any:
    """DynamoDB numbers come back as Decimal: integral ones as int, others as float."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return str(value)


def from_item(item: dict[str, Any]) -> dict[str, Any]:
    """A DynamoDB item back as the row's plain JSON values."""
    value = {k: _deserializer.deserialize(v) for k, v in item.items()}
    loaded: dict[str, Any] = json.loads(json.dumps(value, default=_number))
    return loaded


def _query_all(ddb: Any, **kwargs: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for page in ddb.get_paginator("query").paginate(**kwargs):
        rows.extend(from_item(i) for i in page["Items"])
    return rows


def months_between(since: datetime, until: datetime) -> list[str]:
    months, year, month = [], since.year, since.month
    while (year, month) <= (until.year, until.month):
        months.append(f"{year:04d}-{month:02d}")
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return months


def query_rows(
    ddb: Any,
    table: str,
    *,
    since: datetime,
    until: datetime,
    sweep: str | None = None,
    rig: str | None = None,
    model: str | None = None,
    instance_type: str | None = None,
    consistent: bool = False,
) -> list[dict[str, Any]]:
    """Rows by Query only: a sweep (base table; `consistent`: every row already written),
    one rig/model/type since `since` (GSI by_config), or else each month from `since` to
    `until` (GSI by_month), filtered."""
    after = since.isoformat(timespec="seconds")
    filters = {"rig": rig, "model": model, "instance_type": instance_type}
    given = {k: v for k, v in filters.items() if v is not None}
    if sweep is not None:
        rows = _query_all(
            ddb, TableName=table, KeyConditionExpression="sweep_id = :s",
            ExpressionAttributeValues={":s": {"S": sweep}}, ConsistentRead=consistent,
        )  # fmt: skip
        return [r for r in rows if all(r.get(k) == v for k, v in given.items())]
    if rig is not None and model is not None and instance_type is not None:
        return _query_all(
            ddb, TableName=table, IndexName=BY_CONFIG,
            KeyConditionExpression="config_key = :k AND started_at >= :t",
            ExpressionAttributeValues={
                ":k": {"S": config_key(rig, model, instance_type)}, ":t": {"S": after},
            },
        )  # fmt: skip
    rows = []
    for month in months_between(since, until):
        kwargs: dict[str, Any] = {
            "TableName": table, "IndexName": BY_MONTH,
            "KeyConditionExpression": "#m = :m AND started_at >= :t",
            "ExpressionAttributeNames": {"#m": "month"},
            "ExpressionAttributeValues": {":m": {"S": month}, ":t": {"S": after}},
        }  # fmt: skip
        if given:
            kwargs["FilterExpression"] = " AND ".join(f"#{k} = :{k}" for k in given)
            kwargs["ExpressionAttributeNames"].update({f"#{k}": k for k in given})
            kwargs["ExpressionAttributeValues"].update(
                {f":{k}": {"S": v} for k, v in given.items()}
            )
        rows.extend(_query_all(ddb, **kwargs))
    return rows
