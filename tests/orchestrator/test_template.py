"""template.yaml: the SAM tools accept it, every handler imports, IAM is least privilege."""

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cfn_tools import load_yaml

from rigbench.lambda_package import package_files

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = load_yaml((ROOT / "template.yaml").read_text())
RESOURCES: dict[str, Any] = TEMPLATE["Resources"]
FUNCTIONS = {k: v for k, v in RESOURCES.items() if v["Type"] == "AWS::Serverless::Function"}
PROJECT_TAG_CONDITIONS = {"ec2:ResourceTag/rigbench:project", "aws:ResourceTag/rigbench:project"}


def tool(name: str) -> str:
    found = shutil.which(
        name, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )
    assert found, f"{name} is not installed (pip install -e '.[dev]')"
    return found


def run_tool(*args: str, cwd: Path = ROOT, path: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SAM_CLI_TELEMETRY": "0"}
    if path:
        env["PATH"] = f"{path}{os.pathsep}{env['PATH']}"
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_sam_validate_lint() -> None:
    done = run_tool(tool("sam"), "validate", "--lint", "--template", "template.yaml")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_cfn_lint() -> None:
    done = run_tool(tool("cfn-lint"), "template.yaml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_lambda_package_holds_only_what_the_handlers_import_and_read() -> None:
    files = {str(p) for p in package_files()}
    assert {f.split("/")[0] for f in files} == {"functions", "rigs"}
    for logical_id, resource in FUNCTIONS.items():
        module = resource["Properties"]["Handler"].rsplit(".", 1)[0]
        assert f"{module.replace('.', '/')}.py" in files, logical_id
    rig_files = {f for f in files if f.startswith("rigs/")}
    allowed = {"rigs/__init__.py", "rigs/contract.py", "rigs/registry.py"}
    extra = {
        f for f in rig_files
        if f not in allowed and not f.startswith("rigs/bootstrap/")
        and not f.endswith(("/rig.toml", "/install.sh.j2"))
    }  # fmt: skip
    assert extra == set(), "rig server code does not belong in the Lambda package"
    assert "rigs/bootstrap/user_data.sh.j2" in files  # read when rendering user data
    assert "rigs/torch/rig.toml" in files
    assert "rigs/torch/install.sh.j2" in files


@pytest.mark.slow
def test_sam_build_after_a_local_sweep(tmp_path: Path) -> None:
    # What a local sweep leaves: an instance workspace whose bundle links the repository.
    workspace = ROOT / ".rigbench" / "instances" / f"i-test-{os.getpid()}"
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "bundle").symlink_to(ROOT)
    build = tmp_path / "build"
    try:
        done = run_tool(
            tool("sam"), "build", "--template", "template.yaml", "--build-dir", str(build),
            path=str(Path(sys.executable).parent),
        )  # fmt: skip
    finally:
        (workspace / "bundle").unlink()
        workspace.rmdir()
    assert done.returncode == 0, done.stdout + done.stderr
    expected = {str(p) for p in package_files()}
    for logical_id in FUNCTIONS:
        package = build / logical_id
        found = {str(p.relative_to(package)) for p in package.rglob("*") if p.is_file()}
        ours = {f for f in found if f.split("/")[0] in ("functions", "rigs")}
        assert ours == expected, logical_id
        others = {f.split("/")[0] for f in found - ours}
        # requirements.txt, resolved for the runtime (arm64), and nothing else
        assert {"jinja2", "markupsafe"} <= others, others
        assert all(o.startswith(("jinja2", "markupsafe")) for o in others), others
    assert (build / "template.yaml").is_file()


@pytest.mark.parametrize("logical_id", sorted(FUNCTIONS))
def test_every_handler_imports(logical_id: str) -> None:
    module_name, _, attr = FUNCTIONS[logical_id]["Properties"]["Handler"].rpartition(".")
    handler = getattr(importlib.import_module(module_name), attr)
    assert callable(handler)


def statements() -> list[tuple[str, dict[str, Any]]]:
    """Every IAM statement in the template, with the resource it belongs to."""
    found: list[tuple[str, dict[str, Any]]] = []

    def walk(owner: str, node: Any) -> None:
        if isinstance(node, dict):
            if "Effect" in node and "Action" in node:
                found.append((owner, node))
            for value in node.values():
                walk(owner, value)
        elif isinstance(node, list):
            for value in node:
                walk(owner, value)

    for logical_id, resource in RESOURCES.items():
        walk(logical_id, resource.get("Properties", {}))
    return found


def actions(statement: dict[str, Any]) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else list(action)


def allows(statement: dict[str, Any], wanted: str) -> bool:
    service = wanted.split(":")[0]
    return statement["Effect"] == "Allow" and any(
        a in (wanted, "*", f"{service}:*") or (a.endswith("*") and wanted.startswith(a[:-1]))
        for a in actions(statement)
    )


def test_termination_always_requires_the_project_tag() -> None:
    terminating = [(o, s) for o, s in statements() if allows(s, "ec2:TerminateInstances")]
    assert terminating, "something must be allowed to terminate"
    for owner, statement in terminating:
        conditions = statement.get("Condition", {}).get("StringEquals", {})
        assert PROJECT_TAG_CONDITIONS & set(conditions), f"{owner}: {json.dumps(statement)}"
        assert conditions[next(iter(PROJECT_TAG_CONDITIONS & set(conditions)))] == {
            "Ref": "AWS::StackName"
        }


def test_pass_role_only_for_the_instance_role() -> None:
    passing = [(o, s) for o, s in statements() if allows(s, "iam:PassRole")]
    assert passing
    for owner, statement in passing:
        assert statement["Resource"] == {"Fn::GetAtt": ["InstanceRole", "Arn"]}, owner


def test_no_statement_grants_everything() -> None:
    for owner, statement in statements():
        assert "*" not in actions(statement), owner
        assert not any(a.endswith(":*") for a in actions(statement)), owner


def test_launch_requires_the_project_tag_on_the_instance() -> None:
    launching = [(o, s) for o, s in statements() if allows(s, "ec2:RunInstances")]
    instance_statements = [s for _, s in launching if "instance/*" in json.dumps(s["Resource"])]
    assert instance_statements
    for statement in instance_statements:
        assert "aws:RequestTag/rigbench:project" in statement["Condition"]["StringEquals"]


def test_security_group_has_no_inbound_rule() -> None:
    groups = [r for r in RESOURCES.values() if r["Type"] == "AWS::EC2::SecurityGroup"]
    assert groups
    for group in groups:
        assert "SecurityGroupIngress" not in group["Properties"]
    assert not [r for r in RESOURCES.values() if r["Type"] == "AWS::EC2::SecurityGroupIngress"]


def test_instance_role_is_ssm_core_plus_its_own_prefixes() -> None:
    role = RESOURCES["InstanceRole"]["Properties"]
    assert role["ManagedPolicyArns"] == [
        {"Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"}
    ]
    s3 = [s for o, s in statements() if o == "InstanceRole" and actions(s)[0].startswith("s3:")]
    assert {(actions(s)[0], s["Resource"]["Fn::Sub"]) for s in s3} == {
        ("s3:GetObject", "${ArtifactBucket.Arn}/bundle/*"),
        ("s3:PutObject", "${ArtifactBucket.Arn}/reports/*"),
    }


def test_every_definition_placeholder_is_substituted() -> None:
    machine = RESOURCES["SweepStateMachine"]["Properties"]
    definition = (ROOT / machine["DefinitionUri"]).read_text()
    import re

    placeholders = set(re.findall(r"\$\{(\w+)\}", definition))
    assert placeholders == set(machine["DefinitionSubstitutions"])
    for value in machine["DefinitionSubstitutions"].values():
        assert value["Fn::GetAtt"][1] == "Arn"
        assert value["Fn::GetAtt"][0] in FUNCTIONS


def test_template_declares_what_the_issue_asks_for() -> None:
    params = TEMPLATE["Parameters"]
    for name in (
        "SweepBudgetUsd",
        "MonthlyCapUsd",
        "SubnetIds",
        "AmiParameter",
        "AllowedInstanceTypes",
        "TokenSecretArn",
        "ScheduleExpression",
        "ScheduleInput",
    ):
        assert name in params
    assert params["AmiParameter"]["Default"] == (
        "/aws/service/deeplearning/ami/arm64/oss-nvidia-driver-gpu-pytorch-2.7-ubuntu-22.04/latest/ami-id"
    )
    events = RESOURCES["SpotInterruptionFunction"]["Properties"]["Events"]
    pattern = next(iter(events.values()))["Properties"]["Pattern"]
    assert pattern["detail-type"] == ["EC2 Spot Instance Interruption Warning"]
    assert (
        next(iter(RESOURCES["ReaperFunction"]["Properties"]["Events"].values()))["Type"]
        == "Schedule"
    )
    schedule = RESOURCES["SweepStateMachine"]["Properties"]["Events"]["RecurringSweep"][
        "Properties"
    ]
    assert schedule["Schedule"] == {"Ref": "ScheduleExpression"}
    assert schedule["Input"] == {"Ref": "ScheduleInput"}
    assert TEMPLATE["Globals"]["Function"]["Runtime"] == "python3.12"
