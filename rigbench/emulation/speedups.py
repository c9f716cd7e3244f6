"""Two of moto's costs the emulation does without, each giving what moto gives.

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
"""

from functools import lru_cache
from typing import Any

from antlr4 import ParserRuleContext
from moto.dynamodb.models.utilities import dynamo_json_dump
from moto.dynamodb.responses import DynamoResult
from moto.stepfunctions.parser.asl.component.eval_component import EvalComponent
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser
from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor

_moto_parse = AmazonStateLanguageParser.parse
_moto_result = DynamoResult.execute_result
_PLAIN_JSON_READS = frozenset({"Query", "Scan"})


@lru_cache(maxsize=16)
def _tree(definition: str) -> ParserRuleContext:
    _, tree = _moto_parse(definition)  # raises on a syntax error, which is not kept
    return tree


def parse_definition(definition: str) -> tuple[EvalComponent, ParserRuleContext]:
    """What `AmazonStateLanguageParser.parse` returns, the syntax tree built once."""
    tree = _tree(definition)
    return Preprocessor().visit(tree), tree


def dynamodb_result(result: DynamoResult, context: Any) -> Any:
    """`DynamoResult.execute_result`, a Query or Scan dumped as plain JSON."""
    if context.operation_model.name not in _PLAIN_JSON_READS:
        return _moto_result(result, context)
    return 200, {"Content-Type": "application/x-amz-json-1.0"}, dynamo_json_dump(result.result)
