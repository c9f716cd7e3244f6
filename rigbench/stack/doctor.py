"""`rigbench doctor`: what a first sweep on an account needs, each piece checked read-only, in
order, each with its fix. A piece that cannot be checked because an earlier one failed says
so ("skipped") rather than failing twice.

    credentials  STS answers, and a region is set
    stack        the CloudFormation stack exists, is complete, and carries the CLI's version
    quota        the G/VT vCPU quota of the market has room for one instance of the type
    spot price   the type has a spot price in the zones of the stack's subnets
    token        the Hugging Face token secret is readable and a plaintext string
    bundle       the rig + harness bundle is uploaded
    images       every rig that needs a baked image on the type has one (a warning: only
                 sweeps with that rig need it)
"""

import json
from collections.abc import Callable
from typing import Any, Literal

import boto3
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError
from pydantic import BaseModel

from functions.boot_plan import plan_for
from functions.budget import spot_price, subnet_zones
from functions.errors import InvalidInput, OverBudget, error_code
from functions.execution_input import SweepInput
from functions.quota import SPOT_G_VT_QUOTA, instance_vcpus, running_g_vcpus
from functions.settings import Clients, Settings
from functions.validate import read_bundle
from hardware.instance_types import UnknownInstanceType, get_instance_type
from rigbench.stack.deployed_plan import VALIDATE_STATE, deployed_settings
from rigbench.stack_refs import StackRefs
from rigs.contract import RigDefinitionError

VERSION_OUTPUT = "RigbenchVersion"
Status = Literal["ok", "warn", "fail", "skipped"]


class Check(BaseModel):
    """One line of `rigbench doctor`: what was checked, what was found, and the fix."""

    name: str
    status: Status
    detail: str
    fix: str = ""


class Diagnosis(BaseModel):
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)


class _Failed(Exception):
    """`blocks`: the checks that need this one cannot run (else they still can)."""

    def __init__(self, detail: str, fix: str, blocks: bool = True) -> None:
        super().__init__(detail)
        self.detail, self.fix, self.blocks = detail, fix, blocks


class _Warned(_Failed):
    """Not a failure: only some sweeps need what is missing."""


def _message(exc: ClientError) -> str:
    return f"{error_code(exc)}: {exc.response.get('Error', {}).get('Message', '')}".rstrip(": ")


def diagnose(
    session: boto3.session.Session,
    stack_name: str,
    cli_version: str,
    instance_type: str = "g5g.2xlarge",
) -> Diagnosis:
    """Every check against the account `session` reaches; nothing is written."""
    found: dict[str, Any] = {}
    checks: list[Check] = []
    steps: list[tuple[str, Callable[[], str], tuple[str, ...]]] = [
        ("credentials", lambda: _credentials(session, found), ()),
        ("stack", lambda: _stack(session, stack_name, cli_version, found), ("credentials",)),
        ("quota", lambda: _quota(found, instance_type), ("stack",)),
        ("spot price", lambda: _spot_price(found, instance_type), ("stack",)),
        ("token", lambda: _token(found), ("stack",)),
        ("bundle", lambda: _bundle(found), ("stack",)),
        ("images", lambda: _images(found, instance_type), ("bundle",)),
    ]
    failed: set[str] = set()
    for name, step, needs in steps:
        missing = [n for n in needs if n in failed]
        if missing:
            failed.add(name)
            checks.append(Check(name=name, status="skipped", detail=f"needs {missing[0]}"))
            continue
        try:
            detail = step()
        except _Warned as exc:
            checks.append(Check(name=name, status="warn", detail=exc.detail, fix=exc.fix))
            continue
        except _Failed as exc:
            if exc.blocks:
                failed.add(name)
            checks.append(Check(name=name, status="fail", detail=exc.detail, fix=exc.fix))
            continue
        except ClientError as exc:
            failed.add(name)
            checks.append(
                Check(
                    name=name, status="fail", detail=_message(exc),
                    fix="give these credentials read access to it",
                )
            )  # fmt: skip
            continue
        except BotoCoreError as exc:
            failed.add(name)
            checks.append(
                Check(name=name, status="fail", detail=f"cannot reach AWS: {exc}",
                      fix="check the network and the region's endpoints")
            )  # fmt: skip
            continue
        checks.append(Check(name=name, status="ok", detail=detail))
    return Diagnosis(checks=checks)


def _credentials(session: boto3.session.Session, found: dict[str, Any]) -> str:
    region = session.region_name
    if not region:
        raise _Failed(
            "no region configured",
            "set one: `aws configure set region us-east-1` or export AWS_REGION",
        )
    try:
        identity = session.client("sts").get_caller_identity()
    except (NoCredentialsError, BotoCoreError, ClientError) as exc:
        raise _Failed(
            f"no usable AWS credentials ({exc})",
            "`aws configure` (or `aws sso login`, or export AWS_PROFILE)",
        ) from exc
    found["clients"] = Clients(session)
    found["session"] = session
    found["region"] = region
    return f"account {identity['Account']} as {identity['Arn']}, region {region}"


def _stack(
    session: boto3.session.Session, stack_name: str, cli_version: str, found: dict[str, Any]
) -> str:
    deploy = f"`rigbench deploy --stack {stack_name}`"
    cfn = session.client("cloudformation")
    try:
        stack = cfn.describe_stacks(StackName=stack_name)["Stacks"][0]
    except ClientError as exc:
        raise _Failed(
            f"no stack {stack_name!r} in {found['region']}", f"{deploy} (docs/aws.md)"
        ) from exc
    status = stack["StackStatus"]
    if not status.endswith("_COMPLETE") or "ROLLBACK" in status or "DELETE" in status:
        raise _Failed(
            f"stack {stack_name!r} is {status}: {stack.get('StackStatusReason', '')}".rstrip(": "),
            f"read its events (`aws cloudformation describe-stack-events --stack-name "
            f"{stack_name}`), fix the cause, then {deploy}",
        )
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    try:
        refs = StackRefs(
            stack_name=stack_name,
            state_machine_arn=outputs["StateMachineArn"],
            results_table=outputs["ResultsTableName"],
            ledger_table=outputs["LedgerTableName"],
            bucket=outputs["BucketName"],
        )
    except KeyError as exc:
        raise _Failed(
            f"stack {stack_name!r} has no output {exc}: not a rigbench stack", deploy
        ) from None
    clients: Clients = found["clients"]
    settings = deployed_settings(clients, session.client("lambda"), refs, found["region"])
    found["refs"], found["settings"] = refs, settings[VALIDATE_STATE]
    deployed = outputs.get(VERSION_OUTPUT, "")
    if deployed != cli_version:
        raise _Failed(
            f"stack {stack_name!r} ({status}) runs rigbench {deployed or 'of an unknown version'}"
            f", this CLI is {cli_version}",
            f"{deploy} from this checkout",
            blocks=False,  # the stack's other pieces can still be checked
        )
    return f"{stack_name} {status}, rigbench {deployed}"


def _quota(found: dict[str, Any], instance_type: str) -> str:
    clients: Clients = found["clients"]
    value = float(
        clients.service_quotas.get_service_quota(ServiceCode="ec2", QuotaCode=SPOT_G_VT_QUOTA)[
            "Quota"
        ]["Value"]
    )
    need = instance_vcpus(clients.ec2, [instance_type])[instance_type]
    used = running_g_vcpus(clients.ec2, "spot")
    room = value - used
    what = f"spot G/VT vCPU quota {SPOT_G_VT_QUOTA} is {value:g} with {used} in use"
    if room < need:
        raise _Failed(
            f"{what}: {instance_type} needs {need}",
            "ask for more (a few days; new accounts start at 0): `aws service-quotas "
            f"request-service-quota-increase --service-code ec2 --quota-code {SPOT_G_VT_QUOTA} "
            f"--desired-value {max(need, 16)}` (on-demand: L-DB2E81BA)",
        )
    return f"{what}: room for {int(room // need)} x {instance_type}"


def _spot_price(found: dict[str, Any], instance_type: str) -> str:
    clients: Clients = found["clients"]
    settings: Settings = found["settings"]
    if not settings.subnet_ids:
        raise _Failed("the stack has no subnets", "`rigbench deploy` (it finds the default VPC's)")
    zones = sorted(set(subnet_zones(clients.ec2, settings.subnet_ids).values()))
    try:
        price = spot_price(clients.ec2, instance_type, zones)
    except OverBudget as exc:
        raise _Failed(
            str(exc),
            "deploy with subnets in zones that offer it (`rigbench deploy --subnets ...`), or "
            'run with "market": "on-demand"',
        ) from exc
    return f"{instance_type} ${price:.4f}/h at most in {', '.join(zones)}"


def _token(found: dict[str, Any]) -> str:
    settings: Settings = found["settings"]
    arn = settings.token_secret_arn
    put = "`aws secretsmanager put-secret-value --secret-id {} --secret-string hf_...`"
    if not arn:
        raise _Warned(
            "no Hugging Face token secret: only models that need no licence click-through load "
            "(random:*, open checkpoints)",
            "create one (`aws secretsmanager create-secret --name rigbench/hf-token "
            "--secret-string hf_...`) and `rigbench deploy --parameter TokenSecretArn=ARN`",
        )
    sm = found["session"].client("secretsmanager")
    try:
        secret = sm.get_secret_value(SecretId=arn)
    except ClientError as exc:
        raise _Failed(
            f"token secret {arn}: {_message(exc)}",
            "create it, as a plaintext string: `aws secretsmanager create-secret --name "
            "rigbench/hf-token --secret-string hf_...`, and deploy with its ARN",
        ) from exc
    text = secret.get("SecretString")
    if not text or not text.strip():
        raise _Failed(f"token secret {arn} holds no string", put.format(arn))
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        raise _Failed(
            f"token secret {arn} is JSON key/value ({', '.join(sorted(parsed))}), not the token "
            "itself: an instance would send it as the token and the download would fail",
            f"store the token alone, as plaintext: {put.format(arn)}",
        )
    return f"{arn} is a plaintext string of {len(text.strip())} characters"


def _bundle(found: dict[str, Any]) -> str:
    clients: Clients = found["clients"]
    settings: Settings = found["settings"]
    try:
        bundle = read_bundle(clients.s3, settings.bucket, settings.bundle_manifest_key)
    except InvalidInput as exc:
        raise _Failed(str(exc), "`rigbench deploy --bundle-only`") from exc
    found["bundle"] = bundle
    return f"{bundle.sha256[:12]} with rigs {', '.join(bundle.rigs)}"


def _images(found: dict[str, Any], instance_type: str) -> str:
    clients: Clients = found["clients"]
    settings: Settings = found["settings"]
    try:
        itype = get_instance_type(instance_type)
    except UnknownInstanceType as exc:
        raise _Failed(str(exc), "name a type of hardware/instance_types.py") from exc
    # A default sweep: only the image and the rig's own settings are read from its plan.
    sweep = SweepInput.model_validate({"rigs": ["torch"], "model": "random:tiny", "budget_usd": 1})
    missing, baked = [], []
    for rig in found["bundle"].rigs:
        try:
            plan = plan_for(sweep, rig, itype, settings.ami_parameter)
        except (InvalidInput, RigDefinitionError):
            continue  # the rig does not run there at all: not an image's business
        if plan.image_source != "baked":
            continue
        try:
            clients.ssm.get_parameter(Name=plan.image)
            baked.append(rig)
        except ClientError as exc:
            if error_code(exc) != "ParameterNotFound":
                raise
            missing.append((rig, plan.arch))
    if missing:
        raise _Warned(
            f"no baked image of {', '.join(r for r, _ in missing)} for {instance_type}: "
            "sweeps of it on this type are refused before launch",
            "; ".join(f"`rigbench bake {r} --arch {a}`" for r, a in missing)
            + (
                ", or an x86_64 type whose stock wheels serve the same GPU (g4dn.xlarge: a T4)"
                if itype.arch == "aarch64"
                else ""
            ),
        )
    return (
        f"baked images present for {', '.join(baked)}"
        if baked
        else f"no rig needs a baked image on {instance_type}"
    )
