"""Emulated DynamoDB tables and S3 buckets saved to, and restored from, a directory.

A snapshot is written whole to a temporary directory and then swapped in, so a crash while
saving leaves the previous snapshot intact, never a half-written one. Items are kept in
DynamoDB's typed JSON (binary values base64-encoded), so a restore puts back exactly what
was scanned, and queries in a new process run the same code as on AWS.
"""

import base64
import json
import os
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from pydantic import BaseModel

TABLES_DIR = "dynamodb"
BUCKETS_DIR = "s3"
_TABLE_KEYS = ("KeySchema", "AttributeDefinitions")


class SavedTable(BaseModel):
    """A table's keys and indexes (to recreate it if absent) and its items in typed JSON."""

    name: str
    definition: dict[str, Any]
    items: list[dict[str, Any]]


class SnapshotSummary(BaseModel):
    tables: dict[str, int]  # table name -> item count
    objects: dict[str, int]  # bucket name -> object count


def _encode(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return {"__b64__": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__b64__"}:
            return base64.b64decode(value["__b64__"])
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _table_definition(description: dict[str, Any]) -> dict[str, Any]:
    definition: dict[str, Any] = {k: description[k] for k in _TABLE_KEYS}
    for kind in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
        indexes = description.get(kind)
        if indexes:
            definition[kind] = [
                {k: ix[k] for k in ("IndexName", "KeySchema", "Projection")} for ix in indexes
            ]
    return definition


def save(
    dynamodb: Any, s3: Any, dest: Path, *, skip_prefixes: tuple[str, ...] = ()
) -> SnapshotSummary:
    """Write every table and bucket of the emulation under `dest`, replacing what was there."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        summary = _write_snapshot(dynamodb, s3, tmp, skip_prefixes)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = dest.with_name(f".{dest.name}.{os.getpid()}.old")
    if dest.exists():
        os.replace(dest, old)
    os.replace(tmp, dest)
    shutil.rmtree(old, ignore_errors=True)
    return summary


def _write_snapshot(
    dynamodb: Any, s3: Any, tmp: Path, skip_prefixes: tuple[str, ...]
) -> SnapshotSummary:
    (tmp / TABLES_DIR).mkdir(parents=True)
    (tmp / BUCKETS_DIR).mkdir(parents=True)
    summary = SnapshotSummary(tables={}, objects={})

    for page in dynamodb.get_paginator("list_tables").paginate():
        for name in page["TableNames"]:
            description = dynamodb.describe_table(TableName=name)["Table"]
            items: list[dict[str, Any]] = []
            for scan in dynamodb.get_paginator("scan").paginate(TableName=name):
                items.extend(scan["Items"])
            saved = SavedTable(
                name=name, definition=_table_definition(description), items=_encode(items)
            )
            (tmp / TABLES_DIR / f"{quote(name, safe='')}.json").write_text(saved.model_dump_json())
            summary.tables[name] = len(items)

    for bucket in s3.list_buckets().get("Buckets", []):
        name = bucket["Name"]
        root = tmp / BUCKETS_DIR / quote(name, safe="")
        root.mkdir()
        count = 0
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
            for obj in page.get("Contents", []):
                if obj["Key"].startswith(skip_prefixes):
                    continue
                body = s3.get_object(Bucket=name, Key=obj["Key"])["Body"].read()
                (root / quote(obj["Key"], safe="")).write_bytes(body)
                count += 1
        summary.objects[name] = count

    (tmp / "summary.json").write_text(summary.model_dump_json(indent=2))
    return summary


def restore(
    dynamodb: Any, s3: Any, src: Path, *, skip_tables: tuple[str, ...] = ()
) -> SnapshotSummary:
    """Put a saved snapshot back into the emulation; tables missing there are created.

    Tables whose name ends with one of `skip_tables` are left out."""
    summary = SnapshotSummary(tables={}, objects={})
    if not src.is_dir():
        return summary
    existing: set[str] = set()
    for page in dynamodb.get_paginator("list_tables").paginate():
        existing.update(page["TableNames"])

    for path in sorted((src / TABLES_DIR).glob("*.json")):
        saved = SavedTable.model_validate_json(path.read_text())
        if saved.name.endswith(skip_tables):
            continue
        if saved.name not in existing:
            dynamodb.create_table(
                TableName=saved.name, BillingMode="PAY_PER_REQUEST", **saved.definition
            )
        items = _decode(saved.items)
        for start in range(0, len(items), 25):
            requests = [{"PutRequest": {"Item": item}} for item in items[start : start + 25]]
            pending: dict[str, Any] = {saved.name: requests}
            while pending:
                pending = dynamodb.batch_write_item(RequestItems=pending).get(
                    "UnprocessedItems", {}
                )
        summary.tables[saved.name] = len(items)

    buckets_root = src / BUCKETS_DIR
    present = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    for root in sorted(p for p in buckets_root.glob("*") if p.is_dir()):
        name = unquote(root.name)
        if name not in present:
            _create_bucket(s3, name)
        count = 0
        for path in sorted(root.iterdir()):
            s3.put_object(Bucket=name, Key=unquote(path.name), Body=path.read_bytes())
            count += 1
        summary.objects[name] = count
    return summary


def describe(src: Path) -> SnapshotSummary | None:
    """What a snapshot holds, without restoring it (None if there is none)."""
    path = src / "summary.json"
    if not path.is_file():
        return None
    return SnapshotSummary.model_validate(json.loads(path.read_text()))


def _create_bucket(s3: Any, name: str) -> None:
    region = s3.meta.region_name
    if region == "us-east-1":
        s3.create_bucket(Bucket=name)
    else:
        s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": region})
