"""The emulation's shortcuts past moto's costs (rigbench/emulation/speedups.py) answer what
moto answers."""

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.dynamodb.responses import DynamoResult

from rigbench.emulation import speedups

NESTED = {
    "M": {
        f"k{i}": {
            "L": [{"N": str(j / 2)} for j in range(8)]
            + [{"S": "é" * 3}, {"NULL": True}, {"BOOL": False}, {"B": b"\x00\xff"}, {"L": []}]
        }
        for i in range(4)
    }
}


def _reads(ddb: Any) -> dict[str, Any]:
    key = {"KeyConditionExpression": "p = :p", "ExpressionAttributeValues": {":p": {"S": "a"}}}
    answers = {
        "query": ddb.query(TableName="t", ReturnConsumedCapacity="TOTAL", **key),
        "page": ddb.query(TableName="t", Limit=2, **key),
        "count": ddb.query(TableName="t", Select="COUNT", **key),
        "scan": ddb.scan(TableName="t", ReturnConsumedCapacity="INDEXES"),
        "get": ddb.get_item(TableName="t", Key={"p": {"S": "a"}, "s": {"S": "001"}}),
    }
    for answer in answers.values():
        answer.pop("ResponseMetadata")
    return answers


def test_queries_and_scans_read_back_as_moto_serializes_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        ddb.create_table(
            TableName="t",
            KeySchema=[
                {"AttributeName": "p", "KeyType": "HASH"},
                {"AttributeName": "s", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "p", "AttributeType": "S"},
                {"AttributeName": "s", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        for i in range(5):
            item = {"p": {"S": "a"}, "s": {"S": f"{i:03d}"}, "nested": NESTED, "n": {"N": "1.25"}}
            item |= {"ss": {"SS": ["a", "b"]}, "ns": {"NS": ["1", "2"]}, "bs": {"BS": [b"\x01"]}}
            ddb.put_item(TableName="t", Item=item)
        by_moto = _reads(ddb)
        monkeypatch.setattr(DynamoResult, "execute_result", speedups.dynamodb_result)
        assert _reads(ddb) == by_moto
    assert by_moto["page"]["LastEvaluatedKey"] == {"p": {"S": "a"}, "s": {"S": "001"}}
    assert by_moto["query"]["Items"][0]["nested"]["M"]["k0"]["L"][11] == {"B": b"\x00\xff"}


def test_each_parse_builds_its_own_program_from_one_syntax_tree() -> None:
    definition = json.dumps(json.loads(Path("statemachine/bake.asl.json").read_text()))
    first, tree = speedups.parse_definition(definition)
    second, same_tree = speedups.parse_definition(definition)
    assert same_tree is tree
    assert second is not first
    assert type(second) is type(first)
