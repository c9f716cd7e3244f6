"""template.yaml as the CloudFormation template the emulation creates on moto.

aws-sam-translator transforms it offline (what `sam deploy` has CloudFormation do), as
`sam package` left it: the functions' code and the state machines' definitions in S3. Then
the few rewrites moto 5.2.5's CloudFormation needs, each named below with why; nothing else
of the template is read by hand.
"""

import contextlib
import functools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import moto.cloudformation.parsing as moto_parsing
import moto.stepfunctions.models as moto_sfn_models
from cfn_tools import load_yaml
from moto.stepfunctions.parser.models import stepfunctions_parser_backends
from pydantic import BaseModel, ConfigDict
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator

from rigbench.emulation.seams import ACCOUNT_ID
from rigbench.project_files import REPO_ROOT

TEMPLATE_PATH = REPO_ROOT / "template.yaml"
# Where the emulation puts a placeholder package: the handlers run in-process from the tree.
CODE_KEY = "lambda/placeholder.zip"
# moto 5.2.5's CloudFormation has no model for these (it skips them with a warning); nothing in
# the emulation reads them: the bucket policy denies plain HTTP, the alarms are CloudWatch's.
# Left out of the emulated stack: moto 5.2.5 has no CloudFormation for the last two (failed
# events' destinations, the optional AWS Budgets budget); nothing local reads any of them.
NOT_EMULATED = {
    "AWS::S3::BucketPolicy", "AWS::CloudWatch::Alarm", "AWS::Lambda::EventInvokeConfig",
    "AWS::Budgets::Budget",
}  # fmt: skip
# Physical names as the emulation has always named them, not CloudFormation's random suffix: a
# local home saves the tables, the bucket and the executions under these names and restores
# them into the next session's stack.
NAME_PROPERTY = {
    "AWS::DynamoDB::Table": "TableName",
    "AWS::S3::Bucket": "BucketName",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::StepFunctions::StateMachine": "StateMachineName",
}
_SUBSTITUTION = re.compile(r"\$\{([A-Za-z0-9_]+)\}")


class EventRule(BaseModel):
    """An EventBridge rule with an event pattern (not a schedule) and the functions it targets."""

    model_config = ConfigDict(frozen=True)

    logical_id: str
    pattern: dict[str, Any]
    targets: list[str]  # logical ids of the target functions


class CfnTemplate(BaseModel):
    """The transformed template, ready for moto's create_stack."""

    model_config = ConfigDict(frozen=True)

    body: dict[str, Any]

    def stack_parameters(self, given: dict[str, Any]) -> list[dict[str, str]]:
        """create_stack's Parameters: `given` over the template's defaults. Defaults are passed
        too: moto 5.2.5 splits a list parameter's value only when it is passed, and would join
        a CommaDelimitedList default's characters (load_parameters, cloudformation/parsing.py)."""
        declared = self.body.get("Parameters", {})
        unknown = sorted(set(given) - set(declared))
        if unknown:
            raise ValueError(f"not parameters of the template: {', '.join(unknown)}")
        values = {n: spec["Default"] for n, spec in declared.items() if "Default" in spec}
        values.update(given)
        return [
            {"ParameterKey": name, "ParameterValue": _parameter_value(value)}
            for name, value in values.items()
        ]

    def of_type(self, resource_type: str) -> list[str]:
        return [k for k, v in self.body["Resources"].items() if v["Type"] == resource_type]

    def event_rules(self) -> list[EventRule]:
        rules = []
        for logical_id, resource in self.body["Resources"].items():
            props = resource.get("Properties", {})
            if resource["Type"] == "AWS::Events::Rule" and "EventPattern" in props:
                targets = [t["Arn"]["Fn::GetAtt"][0] for t in props.get("Targets", [])]
                rules.append(
                    EventRule(logical_id=logical_id, pattern=props["EventPattern"], targets=targets)
                )
        return rules


def _parameter_value(value: Any) -> str:
    """A parameter as CloudFormation takes it (a list comma-separated)."""
    return ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)


def physical_name(stack_name: str, logical_id: str, resource_type: str) -> str:
    if resource_type == "AWS::S3::Bucket":
        return f"{stack_name}-{logical_id.lower()}-{ACCOUNT_ID}"
    return f"{stack_name}-{logical_id}"


def transform(
    stack_name: str, region: str, code_bucket: str, template_path: Path = TEMPLATE_PATH
) -> CfnTemplate:
    """The template as CloudFormation for moto (the translation is cached per process)."""
    body = json.loads(_translated(template_path, region, code_bucket))
    for logical_id, resource in list(body["Resources"].items()):
        if resource["Type"] in NOT_EMULATED:
            del body["Resources"][logical_id]
            continue
        if resource["Type"] in NAME_PROPERTY:
            name = physical_name(stack_name, logical_id, resource["Type"])
            resource["Properties"][NAME_PROPERTY[resource["Type"]]] = name
        if resource["Type"] == "AWS::Lambda::Function":
            _environment_as_strings(resource["Properties"])
    return CfnTemplate(body=body)


def _environment_as_strings(props: dict[str, Any]) -> None:
    """moto 5.2.5 keeps a Number parameter's Ref an int in a function's environment (Lambda
    holds strings: GetFunctionConfiguration's answer would not go back through
    UpdateFunctionConfiguration); a one-element Fn::Join is the value as a string."""
    variables = props.get("Environment", {}).get("Variables", {})
    for name, value in variables.items():
        variables[name] = {"Fn::Join": ["", [value]]}


@functools.cache
def _translated(template_path: Path, region: str, code_bucket: str) -> str:
    sam = load_yaml(template_path.read_text())
    sam["Globals"]["Function"]["CodeUri"] = f"s3://{code_bucket}/{CODE_KEY}"
    definitions: dict[str, str] = {}
    for logical_id, resource in sam["Resources"].items():
        if resource["Type"] == "AWS::Serverless::LayerVersion":  # as `sam package` leaves it
            resource["Properties"]["ContentUri"] = f"s3://{code_bucket}/{CODE_KEY}"
        if resource["Type"] == "AWS::Serverless::StateMachine":
            uri = resource["Properties"]["DefinitionUri"]
            definitions[logical_id] = (template_path.parent / uri).read_text()
            # Where `sam package` would put it; _inline_definition puts the text in its place.
            resource["Properties"]["DefinitionUri"] = f"s3://{code_bucket}/{uri}"
    # The template names no AWS managed policy under Policies (policy templates and statements
    # only), so the translator needs no map of them from IAM.
    translator = Translator({}, Parser(), boto_session=boto3.Session(region_name=region))
    body = translator.translate(sam, parameter_values={})
    for logical_id, text in definitions.items():
        _inline_definition(body["Resources"][logical_id]["Properties"], text)
    return json.dumps(body)


def _inline_definition(props: dict[str, Any], text: str) -> None:
    """moto 5.2.5's AWS::StepFunctions::StateMachine reads DefinitionString only: it ignores
    DefinitionS3Location and DefinitionSubstitutions (moto/stepfunctions/models.py,
    create_from_cloudformation_json). CloudFormation substitutes them into the definition;
    here an Fn::Join of the text around each `${Name}` and its substitution does. (Not Fn::Sub:
    moto's runs string.Template, which turns the context object's `$$.` into `$.`.)"""
    props.pop("DefinitionS3Location")
    substitutions = props.pop("DefinitionSubstitutions", {})
    parts: list[Any] = []
    for i, part in enumerate(_SUBSTITUTION.split(text)):
        if i % 2 == 0:
            parts.append(part)
        else:
            parts.append(substitutions.get(part, "${" + part + "}"))
    props["DefinitionString"] = {"Fn::Join": ["", parts]}


@contextlib.contextmanager
def moto_gaps_bridged() -> Iterator[None]:
    """Around create_stack, two fixes to moto 5.2.5's CloudFormation:
    - it resolves `!Ref AWS::NoValue` in a list to None and keeps it (clean_json in
      moto/cloudformation/parsing.py), so InstanceRole's `Policies: [..., !If [HasTokenSecret,
      ..., !Ref AWS::NoValue]]` breaks its IAM model; CloudFormation drops the element;
    - AWS::StepFunctions::StateMachine is created in the plain Step Functions backend, while
      with `execute_state_machine` on (the emulation runs executions) the API serves the
      parser backend (moto/stepfunctions/responses.py get_backend): the stack's state machines
      would not exist for StartExecution."""
    original_clean_json = moto_parsing.clean_json

    def clean_json(resource_json: Any, resources_map: Any) -> Any:
        cleaned = original_clean_json(resource_json, resources_map)
        if isinstance(resource_json, list):
            return [item for item in cleaned if item is not None]
        return cleaned

    original_backends = moto_sfn_models.stepfunctions_backends
    moto_parsing.clean_json = clean_json
    moto_sfn_models.stepfunctions_backends = stepfunctions_parser_backends  # type: ignore[assignment]
    try:
        yield
    finally:
        moto_parsing.clean_json = original_clean_json
        moto_sfn_models.stepfunctions_backends = original_backends
