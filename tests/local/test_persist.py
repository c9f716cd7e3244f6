"""Emulated tables and buckets survive a save and a restore into a fresh emulation."""

from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from rigbench.local import persist


def _clients() -> tuple[Any, Any]:
    return (
        boto3.client("dynamodb", region_name="us-east-1"),
        boto3.client("s3", region_name="us-east-1"),
    )


def _make_results_table(ddb: Any) -> None:
    ddb.create_table(
        TableName="results",
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
            {"AttributeName": "rig", "AttributeType": "S"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by-rig",
                "KeySchema": [
                    {"AttributeName": "rig", "KeyType": "HASH"},
                    {"AttributeName": "sk", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
    )


@pytest.mark.slow
def test_round_trip_into_a_fresh_emulation(tmp_path: Path) -> None:
    dest = tmp_path / "data"
    items = [
        {
            "pk": {"S": f"sweep#{i % 3}"},
            "sk": {"S": f"row#{i:03d}"},
            "rig": {"S": "torch"},
            "tps": {"N": str(i * 1.5)},
            "blob": {"B": bytes([i, 0, 255])},
            "tags": {"SS": ["a", "b"]},
        }
        for i in range(60)
    ]
    with mock_aws():
        ddb, s3 = _clients()
        _make_results_table(ddb)
        for item in items:
            ddb.put_item(TableName="results", Item=item)
        s3.create_bucket(Bucket="raw")
        s3.put_object(Bucket="raw", Key="sweep/1/torch/boot-0/report.json", Body=b'{"x": 1}')
        saved = persist.save(ddb, s3, dest)
    assert saved.tables == {"results": 60}
    assert saved.objects == {"raw": 1}
    assert persist.describe(dest) == saved

    with mock_aws():  # a new, empty emulation: the table is recreated from the snapshot
        ddb, s3 = _clients()
        restored = persist.restore(ddb, s3, dest)
        assert restored == saved
        rows = ddb.query(
            TableName="results",
            IndexName="by-rig",
            KeyConditionExpression="rig = :r",
            ExpressionAttributeValues={":r": {"S": "torch"}},
        )["Items"]
        assert sorted(rows, key=lambda r: r["sk"]["S"]) == items
        body = s3.get_object(Bucket="raw", Key="sweep/1/torch/boot-0/report.json")["Body"].read()
        assert body == b'{"x": 1}'


@pytest.mark.slow
def test_restore_into_existing_tables_keeps_their_definition(tmp_path: Path) -> None:
    dest = tmp_path / "data"
    with mock_aws():
        ddb, s3 = _clients()
        _make_results_table(ddb)
        ddb.put_item(
            TableName="results", Item={"pk": {"S": "a"}, "sk": {"S": "b"}, "rig": {"S": "jax"}}
        )
        persist.save(ddb, s3, dest)
    with mock_aws():
        ddb, s3 = _clients()
        _make_results_table(ddb)
        persist.restore(ddb, s3, dest)
        assert ddb.scan(TableName="results")["Count"] == 1


@pytest.mark.slow
def test_a_failed_save_keeps_the_previous_snapshot(tmp_path: Path) -> None:
    dest = tmp_path / "data"
    with mock_aws():
        ddb, s3 = _clients()
        _make_results_table(ddb)
        ddb.put_item(
            TableName="results", Item={"pk": {"S": "a"}, "sk": {"S": "b"}, "rig": {"S": "x"}}
        )
        first = persist.save(ddb, s3, dest)

        class Broken:
            meta = s3.meta

            def list_buckets(self) -> dict[str, object]:
                raise RuntimeError("emulation went away")

        with pytest.raises(RuntimeError, match="went away"):
            persist.save(ddb, Broken(), dest)
    assert persist.describe(dest) == first
    assert not list(tmp_path.glob(".data.*"))  # no half-written snapshot left behind


def test_restore_of_nothing_is_empty(tmp_path: Path) -> None:
    with mock_aws():
        ddb, s3 = _clients()
        assert persist.restore(ddb, s3, tmp_path / "absent").tables == {}
    assert persist.describe(tmp_path / "absent") is None
