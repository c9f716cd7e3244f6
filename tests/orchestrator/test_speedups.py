"""The emulation's shortcuts past moto's costs (rigbench/emulation/speedups.py) answer what
moto answers."""

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.dynamodb.responses import DynamoResult
from moto.kms import models as kms_models
from moto.stepfunctions.responses import StepFunctionResponse

from rigbench.emulation import Emulation, speedups
from rigbench.stack.history import boot_executions
from tests.orchestrator.conftest import sweep_input

# moto's own, kept before any emulation in this process installs the seams
MOTO_HISTORY = StepFunctionResponse.get_execution_history

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


def _tables(ddb: Any) -> None:
    for name, keys in (("ranged", ("p", "s")), ("hashed", ("p",))):
        ddb.create_table(
            TableName=name,
            KeySchema=[
                {"AttributeName": k, "KeyType": t}
                for k, t in zip(keys, ("HASH", "RANGE"), strict=False)
            ],
            AttributeDefinitions=[{"AttributeName": k, "AttributeType": "S"} for k in keys],
            BillingMode="PAY_PER_REQUEST",
        )
        for i in range(4):
            key = {"p": {"S": f"p{i % 2}"}, "s": {"S": f"{i:03d}"}} if name == "ranged" else {}
            ddb.put_item(TableName=name, Item={"p": {"S": f"p{i}"}, **key, "n": {"N": str(i)}})


def _transactions(ddb: Any) -> list[Any]:
    """Scans after a transaction that fails at its last item, then after one that lands."""
    writes: list[dict[str, Any]] = [
        {
            "Update": {
                "TableName": "ranged",
                "Key": {"p": {"S": "p0"}, "s": {"S": "000"}},
                "UpdateExpression": "ADD n :one",
                "ExpressionAttributeValues": {":one": {"N": "1"}},
            }
        },
        {"Put": {"TableName": "ranged", "Item": {"p": {"S": "p9"}, "s": {"S": "9"}}}},
        {"Delete": {"TableName": "hashed", "Key": {"p": {"S": "p1"}}}},
        {"Put": {"TableName": "hashed", "Item": {"p": {"S": "p2"}, "n": {"N": "7"}}}},
    ]
    failing = {
        "ConditionCheck": {
            "TableName": "hashed",
            "Key": {"p": {"S": "p3"}},
            "ConditionExpression": "attribute_not_exists(p)",
        }
    }
    scans = []
    with pytest.raises(ddb.exceptions.TransactionCanceledException):
        ddb.transact_write_items(TransactItems=[*writes, failing])
    scans.append([ddb.scan(TableName=t)["Items"] for t in ("ranged", "hashed")])
    ddb.transact_write_items(TransactItems=writes)
    scans.append([ddb.scan(TableName=t)["Items"] for t in ("ranged", "hashed")])
    return scans


def test_a_transaction_rolls_back_and_lands_as_moto_s_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from moto.dynamodb import models
    from moto.dynamodb.models import DynamoDBBackend, dynamodb_backends

    runs = []
    for kept in (False, True):
        with mock_aws():
            ddb = boto3.client("dynamodb", region_name="us-east-1")
            _tables(ddb)
            before = [ddb.scan(TableName=t)["Items"] for t in ("ranged", "hashed")]
            if kept:
                monkeypatch.setattr(
                    DynamoDBBackend, "transact_write_items", speedups.transact_write_items
                )
                monkeypatch.setattr(models, "copy", speedups.TableCopies)
            table = dynamodb_backends["123456789012"]["us-east-1"].tables["ranged"]
            runs.append((before, *_transactions(ddb)))
            # moto's rollback puts a copy of the table in its place; this one restores items
            assert (
                dynamodb_backends["123456789012"]["us-east-1"].tables["ranged"] is table
            ) == kept
    (before, rolled_back, landed), theirs = runs[1], runs[0]
    assert runs[1] == theirs
    assert rolled_back == before
    assert landed != before


def test_each_parse_builds_its_own_program_from_one_syntax_tree() -> None:
    definition = json.dumps(json.loads(Path("statemachine/bake.asl.json").read_text()))
    first, tree = speedups.parse_definition(definition)
    second, same_tree = speedups.parse_definition(definition)
    assert same_tree is tree
    assert second is not first
    assert type(second) is type(first)


def test_symmetric_keys_share_a_private_key_and_each_keeps_its_own_material(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sign and verify, the only readers of a key's private key, work as with moto's own."""
    monkeypatch.setattr(kms_models, "generate_private_key", speedups.private_key)
    with mock_aws():
        kms = boto3.client("kms", region_name="us-east-1")
        symmetric = [kms.create_key()["KeyMetadata"]["KeyId"] for _ in range(2)]
        backend = kms_models.kms_backends["123456789012"]["us-east-1"]
        first, second = (backend.keys[k] for k in symmetric)
        assert first.private_key is second.private_key
        assert first.key_material != second.key_material
        sealed = kms.encrypt(KeyId=symmetric[0], Plaintext=b"boot 1")["CiphertextBlob"]
        assert kms.decrypt(CiphertextBlob=sealed)["KeyId"].endswith(symmetric[0])
        with pytest.raises(kms.exceptions.ClientError):
            kms.decrypt(CiphertextBlob=sealed, KeyId=symmetric[1])
        signing = [
            kms.create_key(KeyUsage="SIGN_VERIFY", KeySpec=spec)["KeyMetadata"]["KeyId"]
            for spec in ("RSA_2048", "RSA_2048", "ECC_NIST_P256")
        ]
        assert len({kms.get_public_key(KeyId=k)["PublicKey"] for k in signing}) == 3
        algorithms = ("RSASSA_PSS_SHA_256", "RSASSA_PSS_SHA_256", "ECDSA_SHA_256")
        for key_id, algorithm in zip(signing, algorithms, strict=True):
            signed = kms.sign(KeyId=key_id, Message=b"m", SigningAlgorithm=algorithm)
            verified = kms.verify(
                KeyId=key_id, Message=b"m", Signature=signed["Signature"],
                SigningAlgorithm=algorithm,
            )  # fmt: skip
            assert verified["SignatureValid"] is True


def test_step_functions_keeps_one_client_per_service_and_server_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MOTO_PORT", "5101")
    lambda_client = speedups.step_functions_client("us-east-1", "lambda")
    assert speedups.step_functions_client("us-east-1", "lambda") is lambda_client
    assert lambda_client.meta.endpoint_url == "http://localhost:5101"
    assert speedups.step_functions_client("us-east-1", "sqs") is not lambda_client
    monkeypatch.setenv("MOTO_PORT", "5102")
    moved = speedups.step_functions_client("us-east-1", "lambda")
    assert moved is not lambda_client
    assert moved.meta.endpoint_url == "http://localhost:5102"


@pytest.mark.parametrize("path", ["$.sweep.boots[0].rig", "$.plan..boot", "$.cells[?(@.c > 1)]"])
def test_a_kept_json_path_finds_what_a_new_one_finds(path: str) -> None:
    from jsonpath_ng.ext import parse

    data = {"sweep": {"boots": [{"rig": "torch"}]}, "plan": {"a": {"boot": 1}, "b": {"boot": 2}}}
    data |= {"cells": [{"c": 1}, {"c": 2}, {"c": 4}]}
    kept = speedups.jsonpath_ext(path)
    assert speedups.jsonpath_ext(path) is kept
    for _ in range(2):  # a find leaves the kept path as it was
        assert [m.value for m in kept.find(data)] == [m.value for m in parse(path).find(data)]
    assert [m.value for m in kept.find(data)]


def test_results_written_through_a_kept_path_land_where_a_new_one_puts_them() -> None:
    from jsonpath_ng import parse

    kept = speedups.jsonpath("$.result.rows")
    for i in range(2):
        mine, theirs = {"result": {"n": i}}, {"result": {"n": i}}
        kept.update_or_create(mine, [i])
        parse("$.result.rows").update_or_create(theirs, [i])
        assert mine == theirs == {"result": {"n": i, "rows": [i]}}


def test_the_stack_s_json_template_reads_as_moto_reads_it() -> None:
    from moto.cloudformation.models import Stack

    from rigbench.emulation.cfn_template import TEMPLATE_PATH, transform

    assert Stack.parse_template is not speedups.parse_template  # moto's own, not installed
    body = json.dumps(transform("rigbench", "us-east-1", "code", TEMPLATE_PATH).body)
    assert speedups.parse_template(body) == Stack.parse_template(body)
    yaml_body = (
        "Resources:\n  Topic:\n    Type: AWS::SNS::Topic\n    Properties: {TopicName: !Ref N}\n"
    )
    assert speedups.parse_template(yaml_body) == Stack.parse_template(yaml_body)


@pytest.mark.slow
def test_an_execution_history_reads_back_as_moto_serializes_it(
    emu: Emulation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed sweep's histories (the sweep's: Lambda tasks, a Map, the boots' executions, its
    Fail; each boot's: its failure caught) read through boto3 with the emulation's answer and
    with moto's own."""
    emu.faults.fail_lambda("StoreFunction", "raise")
    arn = emu.start_execution(sweep_input(boots_per_rig=2))
    assert emu.wait(arn, 90)["status"] == "FAILED"
    sfn = emu.client("stepfunctions")
    sweep = sfn.get_execution_history(executionArn=arn)["events"]
    arns = [arn, *boot_executions(sweep)]
    assert len(arns) == 3
    ours = [sfn.get_execution_history(executionArn=a)["events"] for a in arns]
    monkeypatch.setattr(StepFunctionResponse, "get_execution_history", MOTO_HISTORY)
    assert [sfn.get_execution_history(executionArn=a)["events"] for a in arns] == ours
    kinds = {e["type"] for events in ours for e in events}
    assert {"MapIterationStarted", "TaskSubmitted", "TaskFailed", "FailStateEntered"} <= kinds
    assert sum(len(events) for events in ours) > 100
    assert all(isinstance(e["timestamp"], datetime) for events in ours for e in events)
