"""`rigbench doctor` on a deployed stack (an emulation stands in for the AWS account): it
passes on a good stack and names each broken piece with its fix."""

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import typer
from typer.testing import CliRunner

from functions.quota import SPOT_G_VT_QUOTA
from harness.version import harness_version
from rigbench.commands.doctor import doctor_command
from rigbench.emulation import Emulation
from rigbench.stack.deployed_plan import VALIDATE_STATE, state_function
from rigbench.stack.doctor import Diagnosis, diagnose
from tests.orchestrator.conftest import fleet_of

pytestmark = pytest.mark.slow

TOKEN = "hf_" + "x" * 34  # the shape of a Hugging Face token; never printed


def validate_function(emu: Emulation) -> str:
    sfn = emu.client("stepfunctions")
    definition = json.loads(
        sfn.describe_state_machine(stateMachineArn=emu.state_machine_arn)["definition"]
    )
    return state_function(definition, VALIDATE_STATE)


def deploy_token_secret(emu: Emulation, arn: str) -> None:
    """As `rigbench deploy --parameter TokenSecretArn=ARN` sets it in the functions."""
    lam = emu.client("lambda")
    name = validate_function(emu)
    env = lam.get_function_configuration(FunctionName=name)["Environment"]["Variables"]
    lam.update_function_configuration(
        FunctionName=name, Environment={"Variables": {**env, "TOKEN_SECRET_ARN": arn}}
    )


@pytest.fixture
def good(emu: Emulation) -> Iterator[Emulation]:
    """The module's stack with a plaintext token secret; what a test breaks is put back."""
    sm = emu.client("secretsmanager")
    arn = sm.create_secret(Name="rigbench/hf-token-doctor", SecretString=TOKEN)["ARN"]
    deploy_token_secret(emu, arn)
    refs = emu.stack_refs()
    s3 = emu.client("s3")
    manifest = s3.get_object(Bucket=refs.bucket, Key="bundle/current.json")["Body"].read()
    try:
        yield emu
    finally:
        s3.put_object(Bucket=refs.bucket, Key="bundle/current.json", Body=manifest)
        sm.delete_secret(SecretId=arn, ForceDeleteWithoutRecovery=True)
        deploy_token_secret(emu, "")


def run(emu: Emulation, version: str | None = None) -> Diagnosis:
    return diagnose(boto3.session.Session(), emu.stack_name, version or harness_version())


def by_name(diagnosis: Diagnosis) -> dict[str, Any]:
    return {c.name: c for c in diagnosis.checks}


def test_a_good_stack_passes_every_check(good: Emulation) -> None:
    diagnosis = run(good)
    checks = by_name(diagnosis)
    assert diagnosis.ok, diagnosis
    assert list(checks) == [
        "credentials", "stack", "quota", "spot price", "token", "bundle", "images",
    ]  # fmt: skip
    for name in ("credentials", "stack", "quota", "spot price", "token", "bundle"):
        assert checks[name].status == "ok", checks[name]
    assert "region us-east-1" in checks["credentials"].detail
    assert "room for 8 x g5g.2xlarge" in checks["quota"].detail  # 64 vCPU / 8
    assert "plaintext string of 37 characters" in checks["token"].detail
    assert TOKEN not in str(diagnosis)
    assert checks["images"].status == "ok"
    assert "baked images present for vllm" in checks["images"].detail


def test_a_missing_baked_image_is_a_warning_naming_the_bake(good: Emulation) -> None:
    ssm = good.client("ssm")
    name = "/rigbench/ami/vllm-0.34.0-sm75"  # rigs/vllm/rig.toml's prebuilt_ami for aarch64
    image = ssm.get_parameter(Name=name)["Parameter"]["Value"]
    ssm.delete_parameter(Name=name)
    try:
        diagnosis = run(good)
    finally:
        ssm.put_parameter(Name=name, Value=image, Type="String")
    images = by_name(diagnosis)["images"]
    # vLLM on the T4G's aarch64 needs `rigbench bake vllm`: only sweeps with it are refused
    assert diagnosis.ok, [c for c in diagnosis.checks if c.status == "fail"]
    assert images.status == "warn"
    assert "no baked image of vllm for g5g.2xlarge" in images.detail
    assert "`rigbench bake vllm --arch aarch64`" in images.fix
    assert "g4dn.xlarge" in images.fix


def test_on_g4dn_no_rig_needs_a_baked_image(good: Emulation) -> None:
    diagnosis = diagnose(boto3.session.Session(), good.stack_name, harness_version(), "g4dn.xlarge")
    images = by_name(diagnosis)["images"]
    assert images.status == "ok"
    assert images.detail == "no rig needs a baked image on g4dn.xlarge"


def test_a_missing_secret_is_named_with_how_to_create_it(good: Emulation) -> None:
    arn = good.client("secretsmanager").describe_secret(SecretId="rigbench/hf-token-doctor")["ARN"]
    deploy_token_secret(good, arn.replace("hf-token-doctor", "hf-token-gone"))
    diagnosis = run(good)
    token = by_name(diagnosis)["token"]
    assert not diagnosis.ok
    assert token.status == "fail"
    assert "ResourceNotFoundException" in token.detail
    assert "create-secret" in token.fix
    assert "plaintext" in token.fix


def test_a_json_secret_is_refused_naming_its_keys_not_its_value(good: Emulation) -> None:
    sm = good.client("secretsmanager")
    sm.put_secret_value(
        SecretId="rigbench/hf-token-doctor", SecretString=json.dumps({"HF_TOKEN": TOKEN})
    )
    diagnosis = run(good)
    token = by_name(diagnosis)["token"]
    assert token.status == "fail"
    assert "JSON key/value (HF_TOKEN)" in token.detail
    assert "put-secret-value" in token.fix
    assert TOKEN not in str(diagnosis)


def test_no_quota_is_named_with_the_quota_code_to_ask_for(good: Emulation) -> None:
    fleet_of(good).quotas[SPOT_G_VT_QUOTA] = 0
    diagnosis = run(good)
    quota = by_name(diagnosis)["quota"]
    assert quota.status == "fail"
    assert "L-3819A6DF is 0" in quota.detail
    assert "g5g.2xlarge needs 8" in quota.detail
    assert "request-service-quota-increase" in quota.fix
    assert "--quota-code L-3819A6DF" in quota.fix


def test_no_bundle_is_named_and_the_images_check_skipped(good: Emulation) -> None:
    good.client("s3").delete_object(Bucket=good.stack_refs().bucket, Key="bundle/current.json")
    diagnosis = run(good)
    checks = by_name(diagnosis)
    assert checks["bundle"].status == "fail"
    assert "no rig bundle" in checks["bundle"].detail
    assert checks["bundle"].fix == "`rigbench deploy --bundle-only`"
    assert checks["images"].status == "skipped"
    assert checks["token"].status == "ok"  # the others are still checked


def test_a_stack_of_another_version_and_a_missing_stack(good: Emulation) -> None:
    stale = by_name(run(good, version="0.0.1+old"))
    assert stale["stack"].status == "fail"
    assert "this CLI is 0.0.1+old" in stale["stack"].detail
    assert stale["quota"].status == "ok", "the stack's other pieces are still checked"
    missing = diagnose(boto3.session.Session(), "no-such-stack", harness_version())
    checks = by_name(missing)
    assert checks["stack"].status == "fail"
    assert "rigbench deploy --stack no-such-stack" in checks["stack"].fix
    assert {c.status for n, c in checks.items() if n not in ("credentials", "stack")} == {"skipped"}


def test_the_command_prints_a_line_per_check_and_exits_1_on_a_failure(good: Emulation) -> None:
    app = typer.Typer()
    app.command()(doctor_command)
    runner = CliRunner()
    passed = runner.invoke(app, ["--stack", good.stack_name], catch_exceptions=False)
    assert passed.exit_code == 0, passed.output
    assert "ready" in passed.output
    fleet_of(good).quotas[SPOT_G_VT_QUOTA] = 0
    failed = runner.invoke(app, ["--stack", good.stack_name], catch_exceptions=False)
    assert failed.exit_code == 1, failed.output
    assert "FAIL quota" in failed.output
    assert "1 check(s) failed: quota" in failed.output
