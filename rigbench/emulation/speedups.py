"""moto's costs the emulation does without, each giving what moto gives.

- moto parses a state machine's definition with its ANTLR grammar at every execution start
  (and create and update); a sweep starts one execution, the tests hundreds, and the parse of
  the sweep's definition costs more CPU than most of the steps it then runs (16% of
  tests/orchestrator/test_fault_matrix.py's CPU). The syntax tree is read-only once built, so
  it is kept by definition text; the evaluation components are built anew from it for every
  caller, as moto builds them, so no execution shares another's state.
- moto serializes a DynamoDB Query or Scan by walking botocore's shape of every attribute
  value: 0.6 CPU-s for one Query of a sweep's 12 result rows (each carries its boot's
  agreement probe). Those answers are plain JSON, as moto wrote them before its generic
  serializer (its `dynamo_json_dump`): the same response, about 8x faster; binary values,
  sets, nulls, pages and consumed capacity read back identically through boto3.
- moto serializes a Step Functions execution's history the same way, parsing every event's
  timestamp back from text: 23% of a local sweep's own CPU, whose progress is read from its
  history every two seconds. The events are plain JSON too, their times in epoch seconds.
- moto's Step Functions builds a new boto3 client for every Lambda task (a fresh client loads
  botocore's service model and opens a new connection: 5% of the fault matrix's CPU) and
  builds a JSONPath parser for every path it reads or writes (4%). Clients are thread-safe
  and a parsed path is only read, so both are kept: clients by region, service and the
  emulation's port, paths by their text.
- moto's CloudFormation reads a template body with PyYAML's pure-Python loader, 0.5 CPU-s for
  the stack's JSON template at every deploy (every emulation, every `--local` command); a
  JSON body is read as JSON, which gives the same document; any other body as moto reads it.
- moto's DynamoDB backs up every table a transaction names, deep-copied once per item, to
  roll back to; the ledger's transactions cost more with every sweep a module ran (4% of the
  fault matrix). The backup is the tables' item layout with copies of the written items.
- moto's server lists its own package folder on every request to match a host name (1%);
  the folder does not change while the process runs.
- moto gives every KMS key an RSA-2048 private key, generated at creation (20-90 ms), which
  only an asymmetric key's Sign, Verify and GetPublicKey read. Every deploy creates two
  symmetric keys (the stack's and DynamoDB's default); those share one, generated once.
"""

import contextlib
import copy
import json
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from functools import cache, lru_cache
from typing import Any

import jsonpath_ng
import jsonpath_ng.ext
from antlr4 import ParserRuleContext
from botocore.client import BaseClient
from moto.backends import list_of_moto_modules
from moto.cloudformation.models import Stack
from moto.core.responses import ActionResult
from moto.core.serialize import TimestampSerializer
from moto.dynamodb.exceptions import (
    MockValidationException,
    MultipleTransactionsException,
    TransactionCanceledException,
)
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
from moto.dynamodb.models.utilities import dynamo_json_dump
from moto.dynamodb.responses import DynamoResult
from moto.kms.models import generate_private_key as _moto_private_key
from moto.kms.utils import AbstractPrivateKey, KeySpec
from moto.settings import moto_server_port
from moto.stepfunctions.parser.asl.component.eval_component import EvalComponent
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor
from moto.stepfunctions.parser.asl.utils.boto_client import boto_client_for
from moto.stepfunctions.responses import StepFunctionResponse

_moto_parse = AmazonStateLanguageParser.parse
_moto_result = DynamoResult.execute_result
_PLAIN_JSON_READS = frozenset({"Query", "Scan"})
_moto_template = Stack.parse_template
_moto_transact = DynamoDBBackend.transact_write_items


@lru_cache(maxsize=16)
def _tree(definition: str) -> ParserRuleContext:
    _, tree = _moto_parse(definition)  # raises on a syntax error, which is not kept
    return tree


def parse_definition(definition: str) -> tuple[EvalComponent, ParserRuleContext]:
    """What `AmazonStateLanguageParser.parse` returns, the syntax tree built once."""
    tree = _tree(definition)
    return Preprocessor().visit(tree), tree


def private_key(key_spec: str) -> AbstractPrivateKey:
    """moto's `generate_private_key`; a symmetric key gets the one kept for all of them."""
    if key_spec == KeySpec.SYMMETRIC_DEFAULT:
        return _symmetric_keys_private_key()
    return _moto_private_key(key_spec)


@cache
def _symmetric_keys_private_key() -> AbstractPrivateKey:
    return _moto_private_key(KeySpec.SYMMETRIC_DEFAULT)


def dynamodb_result(result: DynamoResult, context: Any) -> Any:
    """`DynamoResult.execute_result`, a Query or Scan dumped as plain JSON."""
    if context.operation_model.name not in _PLAIN_JSON_READS:
        return _moto_result(result, context)
    return _json_answer(dynamo_json_dump(result.result))


def _json_answer(body: str) -> tuple[int, dict[str, str], str]:
    """A JSON-protocol answer as moto's serializer writes one (status, headers, body)."""
    return 200, {"Content-Type": "application/x-amz-json-1.0"}, body


class _PlainJsonResult(ActionResult):
    def execute_result(self, context: Any) -> Any:
        return _json_answer(json.dumps(self.result))


def _without_nulls(value: Any) -> Any:
    """As moto's serializer leaves out a member that is None."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _epoch_seconds(iso: str) -> float:
    """An event's time as moto keeps it (ISO 8601, in milliseconds) as the API sends it."""
    return TimestampSerializer._timestamp_unixtimestamp(datetime.fromisoformat(iso))


def execution_history(response: StepFunctionResponse) -> ActionResult:
    """`StepFunctionResponse.get_execution_history`, its events dumped as plain JSON."""
    arn = response._get_param("executionArn")
    history = response.stepfunction_backend.get_execution_history(arn)
    events = [{**e, "timestamp": _epoch_seconds(e["timestamp"])} for e in history["events"]]
    return _PlainJsonResult(_without_nulls({**history, "events": events}))


def step_functions_client(region: str, service: str, state_credentials: Any = None) -> BaseClient:
    """moto's `boto_client_for`, one client per region, service and server port (moto ignores
    the state's credentials)."""
    return _client(region, service, moto_server_port())


@cache
def _client(region: str, service: str, port: str) -> BaseClient:
    return boto_client_for(region, service)  # reads the port from MOTO_PORT itself


jsonpath = lru_cache(maxsize=1024)(jsonpath_ng.parse)
jsonpath_ext = lru_cache(maxsize=1024)(jsonpath_ng.ext.parse)


@cache
def moto_modules() -> Iterable[str]:
    """moto's `list_of_moto_modules`, listed once."""
    return tuple(list_of_moto_modules())


def parse_template(template: str) -> dict[str, Any]:
    """moto's `Stack.parse_template`, a JSON body read as JSON."""
    try:
        document = json.loads(template)
    except ValueError:
        return _moto_template(template)
    return document if isinstance(document, dict) else _moto_template(template)


class TableCopies:
    """What `moto.dynamodb.models` sees as its `copy` module: a table is "copied" as itself
    (its transactions back up only the items they write, `transact_write_items` below); any
    other value, and a table with a stream (whose records moto's rollback also restores), is
    deep-copied as before."""

    @staticmethod
    def deepcopy(value: Any, memo: dict[int, Any] | None = None) -> Any:
        if isinstance(value, Table) and value.stream_shard is None:
            return value
        return copy.deepcopy(value, memo)


def transact_write_items(backend: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
    """moto's `transact_write_items`, which deep-copies every table a transaction names, once
    per item, to roll back to: ledger transactions grew dearer with every sweep a test module
    ran. Here a table is backed up as its items' layout (shallow) with deep copies of just
    the items the transaction writes, which only they can change; the same rollback."""
    backups = _backups(backend, transact_items)
    try:
        _moto_transact(backend, transact_items)
    except (MultipleTransactionsException, MockValidationException, TransactionCanceledException):
        for table, items in backups.values():  # where moto rolls back
            table.items = items
        raise


def _backups(
    backend: DynamoDBBackend, transact_items: list[dict[str, Any]]
) -> dict[str, tuple[Table, Any]]:
    backups: dict[str, tuple[Table, Any]] = {}
    for entry in transact_items:
        for kind, op in entry.items():
            name = str(op.get("TableName") or "")
            table = backend.tables.get(name)
            if table is None or table.stream_shard is not None:
                continue
            if name not in backups:
                backups[name] = (table, _layout(table))
            with contextlib.suppress(KeyError, TypeError, ValueError):
                attrs = op["Item"] if kind == "Put" else op["Key"]
                hash_key = DynamoType(attrs[table.hash_key_attr])
                range_key = DynamoType(attrs[table.range_key_attr]) if table.has_range_key else None
                _keep(backups[name][1], table, hash_key, range_key)
    return backups


def _layout(table: Table) -> Any:
    items = defaultdict(dict, table.items)
    if table.has_range_key:
        for hash_key, by_range in items.items():
            items[hash_key] = dict(by_range)
    return items


def _keep(items: Any, table: Table, hash_key: DynamoType, range_key: DynamoType | None) -> None:
    """The item as it is now, deep-copied into the backup (update_item changes it in place)."""
    item = table.get_item(hash_key, range_key)
    if item is None:
        return
    if range_key is None:
        items[hash_key] = copy.deepcopy(item)
    else:
        items[hash_key][range_key] = copy.deepcopy(item)
