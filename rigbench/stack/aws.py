"""The deployed stack: found by its CloudFormation outputs (`--stack`, default `rigbench`)."""

import boto3

from rigbench.stack.boto import BotoStack, aws_errors
from rigbench.stack.client import StackError
from rigbench.stack_refs import StackRefs

OUTPUTS = {
    "state_machine_arn": "StateMachineArn",
    "results_table": "ResultsTableName",
    "ledger_table": "LedgerTableName",
    "bucket": "BucketName",
}


def has_aws_credentials() -> bool:
    """Whether boto3 finds credentials (environment, profile, SSO, instance role...)."""
    try:
        return boto3.session.Session().get_credentials() is not None
    except Exception:  # a broken profile is as good as none for this question
        return False


def stack_refs(session: boto3.session.Session, stack_name: str) -> StackRefs:
    """The stack's outputs from CloudFormation; a StackError says what is missing."""
    with aws_errors(
        f"no stack {stack_name!r} in {session.region_name}: run `rigbench deploy` first"
    ):
        stacks = session.client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    missing = [key for key in OUTPUTS.values() if key not in outputs]
    if missing:
        raise StackError(
            f"stack {stack_name!r} has no output {', '.join(missing)}: is it a rigbench stack?"
        )
    return StackRefs(
        stack_name=stack_name, **{field: outputs[key] for field, key in OUTPUTS.items()}
    )


class AwsStack(BotoStack):
    """The deployed stack in the account boto3's credentials reach."""

    kind = "aws"

    @classmethod
    def connect(cls, stack_name: str, session: boto3.session.Session | None = None) -> "AwsStack":
        session = session or boto3.session.Session()
        return cls(session, stack_refs(session, stack_name))
