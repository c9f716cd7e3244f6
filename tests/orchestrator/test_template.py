"""template.yaml: the SAM tools accept it, every handler imports, IAM is least privilege."""

import importlib
import json
import os
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from cfn_tools import load_yaml

from functions.events import CellsConfig
from functions.execution_input import LoadCells
from functions.instance_commands import bench_commands, report_uri_of
from functions.report_keys import PROVENANCE, RECORDS, REPORT, instance_arn
from functions.settings import sweep_report_key
from rigbench import lambda_package
from rigbench.lambda_package import (
    LAMBDA_UNZIPPED_LIMIT,
    LAYER_ALLOWANCE,
    LAYERS,
    OWN_PACKAGES,
    SHARED,
    PackageError,
    build,
    handler_modules,
    layers_of,
    package_bytes,
    package_files,
    package_of,
)

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = load_yaml((ROOT / "template.yaml").read_text())
RESOURCES: dict[str, Any] = TEMPLATE["Resources"]
FUNCTIONS = {k: v for k, v in RESOURCES.items() if v["Type"] == "AWS::Serverless::Function"}
REPOSITORY_TOP_LEVEL = (
    "functions", "hardware", "rigs", "rigbench", "harness", "analysis", "pyproject.toml"
)  # fmt: skip
PROJECT_TAG_CONDITIONS = {"ec2:ResourceTag/rigbench:project", "aws:ResourceTag/rigbench:project"}


@cache
def files_of(package: str) -> frozenset[str]:
    """The package's files; found once per run (a fresh interpreter imports its handlers)."""
    return frozenset(str(p) for p in package_files(package=package))


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


@pytest.mark.slow
def test_the_lambda_package_holds_only_what_the_handlers_import_and_read() -> None:
    files = set(files_of(SHARED))
    assert {f.split("/")[0] for f in files} == {"functions", "hardware", "rigs", "harness"}
    # Store reads the harness report with the harness's schema (and its workload models: the
    # input's too), and nothing else of it: not the numpy that draws the requests; and it turns
    # each boot's records into its phases (harness.boot_phases, pydantic alone).
    assert {f for f in files if f.startswith("harness/")} == {
        "harness/__init__.py", "harness/schemas.py", "harness/agreement.py", "harness/workload.py",
        "harness/boot_phases.py",
    }  # fmt: skip
    for logical_id, resource in FUNCTIONS.items():
        module = resource["Properties"]["Handler"].rsplit(".", 1)[0]
        if package_of(logical_id) == SHARED:
            assert f"{module.replace('.', '/')}.py" in files, logical_id
    rig_files = {f for f in files if f.startswith("rigs/")}
    # the rig definitions with their settings, and the hub lookup that pins a model's revision
    allowed = {
        "rigs/__init__.py", "rigs/contract.py", "rigs/registry.py", "rigs/settings.py",
        "rigs/sources.py",
    }  # fmt: skip
    extra = {
        f for f in rig_files
        if f not in allowed and not f.startswith("rigs/bootstrap/")
        and not f.endswith(("/rig.toml", "/install.sh.j2"))
    }  # fmt: skip
    assert extra == set(), "rig server code does not belong in the Lambda package"
    assert "rigs/bootstrap/user_data.sh.j2" in files  # read when rendering user data
    assert "rigs/torch/rig.toml" in files
    assert "rigs/torch/install.sh.j2" in files


LIBRARIES_NOT_IN_THE_SHARED_PACKAGE = ("numpy", "scipy", "torch", "httpx", "plotly")


def libraries_loaded_by(modules: list[str]) -> set[str]:
    probe = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        f"print(json.dumps([m for m in {list(LIBRARIES_NOT_IN_THE_SHARED_PACKAGE)!r} "
        "if m in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
def test_the_shared_package_s_handlers_load_no_library_it_does_not_hold() -> None:
    # requirements.txt (jinja2) is all the shared package installs beside the layer.
    assert libraries_loaded_by(handler_modules(TEMPLATE, SHARED)) == set()
    assert libraries_loaded_by(["harness.runner"]) >= {"httpx", "numpy"}  # the probe can fail


@pytest.mark.slow
@pytest.mark.parametrize("logical_id", ["SummarizeFunction", "DecideRoundFunction"])
def test_the_statistics_functions_load_no_library_beyond_the_statistics_layer(
    logical_id: str,
) -> None:
    assert layers_of(TEMPLATE, logical_id) == ["StatisticsLayer"]
    module = FUNCTIONS[logical_id]["Properties"]["Handler"].rsplit(".", 1)[0]
    assert libraries_loaded_by([module]) == {"numpy", "scipy"}  # the layer's, not plotly's


LEAN_MB = 50  # issue 47: every function package but Report's


@pytest.mark.slow
def test_every_package_but_report_s_weighs_at_most_50_mb_and_fits_beside_its_layers(
    tmp_path: Path,
) -> None:
    # Built as `sam build` builds them (the cached package of each), for the runtime (arm64).
    sizes = {}
    for name in sorted({package_of(f) for f in FUNCTIONS} | set(LAYERS)):
        build(tmp_path / name, logical_id=None if name == SHARED else name)
        sizes[name] = package_bytes(tmp_path / name)
    assert set(os.listdir(tmp_path / "StatisticsLayer")) == {"python"}  # where Lambda looks
    assert {"numpy", "scipy"} <= set(os.listdir(tmp_path / "StatisticsLayer" / "python"))
    heavy = {n: s for n, s in sizes.items() if n not in LAYERS and s > LEAN_MB * 1_000_000}
    assert set(heavy) <= {"ReportFunction"}, {n: f"{s / 1e6:.0f} MB" for n, s in heavy.items()}
    for logical_id in FUNCTIONS:
        layers = sum(sizes[name] for name in layers_of(TEMPLATE, logical_id))
        total = sizes[package_of(logical_id)] + layers
        assert total + LAYER_ALLOWANCE <= LAMBDA_UNZIPPED_LIMIT, logical_id


@pytest.mark.slow
def test_a_package_above_its_bound_fails_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RIGBENCH_CACHE", str(tmp_path / "cache"))  # built here, not reused
    monkeypatch.setattr(lambda_package, "LEAN_BOUND", 200_000)  # below jinja2 alone
    bound = r"the DecideRoundFunction package is \d+\.\d MB unzipped, above its bound of 0\.2 MB"
    with pytest.raises(PackageError, match=bound):
        build(tmp_path / "package", logical_id="DecideRoundFunction")
    assert not (tmp_path / "package").exists()
    assert list((tmp_path / "cache" / "lambda-package").iterdir()) == []  # nothing half-built


@pytest.mark.slow
def test_the_report_function_has_its_own_package_with_the_report_and_not_the_rigs() -> None:
    assert set(OWN_PACKAGES) == {"ReportFunction", "SummarizeFunction", "DecideRoundFunction"}
    assert layers_of(TEMPLATE, "ReportFunction") == ["StatisticsLayer"]
    files = set(files_of("ReportFunction"))
    assert "rigbench/report/publish.py" in files
    assert {"rigbench/report/template.html.j2", "rigbench/report/table.html.j2"} <= files
    assert "analysis/stats.py" in files
    assert "pyproject.toml" in files
    assert not any(f.startswith(("rigs/", "rigbench/local/", "rigbench/emulation/")) for f in files)
    assert "functions/launch.py" not in files


@pytest.mark.slow
def test_summarize_has_its_own_package_with_the_statistics_and_nothing_of_the_cli() -> None:
    files = set(files_of("SummarizeFunction"))
    assert {"functions/summarize.py", "functions/regressions.py", "analysis/stats.py"} <= files
    # hardware/: the price catalog functions/budget.py (closing the sweep) reads
    tops = {f.split("/")[0] for f in files}
    assert tops == {"functions", "analysis", "harness", "hardware"}
    # analysis.stats and harness.schemas, not the load generator (nor harness.version's hash
    # of every harness module)
    assert "harness/runner.py" not in files
    assert {f for f in files if f.startswith("hardware/")} <= {
        "hardware/__init__.py", "hardware/instance_types.py"
    }  # fmt: skip


@pytest.mark.slow
def test_decide_round_has_its_own_package_with_the_statistics_and_nothing_of_the_cli() -> None:
    files = set(files_of("DecideRoundFunction"))
    assert {"functions/rounds.py", "analysis/stats.py", "analysis/sequential.py"} <= files
    assert {f.split("/")[0] for f in files} <= {
        "functions",
        "analysis",
        "harness",
        "hardware",
        "pyproject.toml",
    }


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
    for logical_id in FUNCTIONS:
        name = package_of(logical_id)
        expected = set(files_of(name))
        package = build / logical_id
        found = {str(p.relative_to(package)) for p in package.rglob("*") if p.is_file()}
        ours = {f for f in found if f.split("/")[0] in REPOSITORY_TOP_LEVEL}
        assert ours == expected, logical_id
        others = {f.split("/")[0] for f in found - ours}
        assert not any(f.endswith(".pyc") for f in found), logical_id
        assert package_bytes(package) + LAYER_ALLOWANCE <= LAMBDA_UNZIPPED_LIMIT, logical_id
        if name == SHARED:  # requirements.txt, resolved for the runtime (arm64), and nothing else
            assert {"jinja2", "markupsafe"} <= others, others
            assert all(o.startswith(("jinja2", "markupsafe")) for o in others), others
        elif name == "ReportFunction":  # and the report's plots; the statistics in the layer
            assert {"jinja2", "plotly", "httpx"} <= others, others
            assert not others & {"numpy", "scipy"}, others
        else:  # the statistics functions: only their modules and requirements.txt
            assert all(o.startswith(("jinja2", "markupsafe")) for o in others), others
    layer = build / "StatisticsLayer" / "python"
    assert any(p.name.endswith("aarch64-linux-gnu.so") for p in (layer / "scipy").rglob("*.so"))
    assert (build / "template.yaml").is_file()
    # 400 MB (the report and the layer): removed here, beside the other tests,
    # not by the pytest run that would otherwise delete it at its end, alone.
    shutil.rmtree(build)


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


def test_pass_role_only_for_the_instance_and_deadline_roles() -> None:
    passing = [(o, s) for o, s in statements() if allows(s, "iam:PassRole")]
    assert passing
    passed = {
        statement["Resource"]["Fn::GetAtt"][0]: statement["Condition"]["StringEquals"][
            "iam:PassedToService"
        ]
        for _, statement in passing
    }
    assert passed == {
        "InstanceRole": "ec2.amazonaws.com",
        "DeadlineSchedulerRole": "scheduler.amazonaws.com",
    }


def test_no_statement_grants_everything() -> None:
    for owner, statement in statements():
        if statement["Effect"] == "Deny":
            continue
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


def test_instance_role_is_the_ssm_agent_plus_its_own_prefixes() -> None:
    role = RESOURCES["InstanceRole"]["Properties"]
    # AmazonSSMManagedInstanceCore would allow ssm:GetParameter* on every parameter.
    assert "ManagedPolicyArns" not in role
    granted = {
        a for o, s in statements() if o == "InstanceRole" and "Principal" not in s
        for a in actions(s)
    }  # fmt: skip
    assert not any(a.startswith("ssm:GetParameter") for a in granted)
    assert {a.split(":")[0] for a in granted} <= {
        "ssm", "ssmmessages", "ec2messages", "s3", "secretsmanager", "kms"
    }  # fmt: skip
    # kms only to read the token's secret, through Secrets Manager (tested below)
    assert [a for a in granted if a.startswith("kms:")] == ["kms:Decrypt"]
    s3 = [s for o, s in statements() if o == "InstanceRole" and actions(s)[0].startswith("s3:")]
    assert {(actions(s)[0], s["Resource"]["Fn::Sub"]) for s in s3} == {
        ("s3:GetObject", "${ArtifactBucket.Arn}/bundle/*"),
        ("s3:GetObject", "${ArtifactBucket.Arn}/datasets/*"),  # a sweep's dataset workload
        # ${!...} is CloudFormation's escape: IAM gets ${ec2:SourceInstanceARN}, a policy
        # variable set for instance-profile credentials.
        ("s3:PutObject", "${ArtifactBucket.Arn}/reports/*/${!ec2:SourceInstanceARN}/*"),
    }


def _iam_match(pattern: str, arn: str) -> bool:
    """IAM's resource matching: * any run of characters (slashes too), ? any one."""
    regex = re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")
    return re.fullmatch(regex, arn) is not None


def test_an_instance_writes_only_below_its_own_arn_where_dispatch_points_it() -> None:
    (put,) = [s for o, s in statements() if o == "InstanceRole" and allows(s, "s3:PutObject")]
    bucket = "arn:aws:s3:::rigbench-artifacts"
    pattern = put["Resource"]["Fn::Sub"].replace("${ArtifactBucket.Arn}", bucket)
    # The functions build an instance's ARN from INSTANCE_ARN_PREFIX, as EC2 sets the variable.
    sub = TEMPLATE["Globals"]["Function"]["Environment"]["Variables"]["INSTANCE_ARN_PREFIX"]
    pseudo = {"AWS::Partition": "aws", "AWS::Region": "us-east-1", "AWS::AccountId": "123456789012"}
    prefix = re.sub(r"\$\{(AWS::\w+)\}", lambda m: pseudo[m.group(1)], sub["Fn::Sub"])

    def uploads(instance_id: str, sweep: str, boot: int) -> tuple[str, list[str]]:
        arn = instance_arn(prefix, instance_id)
        cells = CellsConfig.model_validate(LoadCells().model_dump())
        commands = bench_commands(
            sweep_id=sweep, rig="torch", boot=boot, cells=cells, bucket="b", instance_arn=arn
        )
        uri = report_uri_of(commands)
        assert uri is not None
        folder = uri.removeprefix("s3://b/").removesuffix(REPORT)
        return arn, [f"{bucket}/{folder}{name}" for name in (REPORT, RECORDS, PROVENANCE)]

    mine, my_keys = uploads("i-0aaaaaaaaaaaaaaaa", "sweep-a", 1)
    assert mine == "arn:aws:ec2:us-east-1:123456789012:instance/i-0aaaaaaaaaaaaaaaa"
    own = pattern.replace("${!ec2:SourceInstanceARN}", mine)
    assert all(_iam_match(own, key) for key in my_keys)
    # Another sweep's boot, and another boot of the same sweep: never under this instance's ARN.
    for sweep, boot in (("sweep-b", 1), ("sweep-a", 2)):
        _, their_keys = uploads("i-0bbbbbbbbbbbbbbbb", sweep, boot)
        assert not any(_iam_match(own, key) for key in their_keys), their_keys
    assert not _iam_match(own, f"{bucket}/reports/sweep-a/torch/01/report.json")
    assert not _iam_match(own, f"{bucket}/sweep-reports/sweep-a/report.html")


def test_only_the_report_function_writes_sweep_reports_and_reads_only_boot_reports() -> None:
    s3 = {
        (actions(s)[0], json.dumps(s["Resource"]), json.dumps(s.get("Condition")))
        for o, s in statements()
        if o == "ReportFunction" and actions(s)[0].startswith("s3:")
    }
    assert s3 == {
        ("s3:ListBucket", '{"Fn::GetAtt": ["ArtifactBucket", "Arn"]}',
         '{"StringLike": {"s3:prefix": "reports/*"}}'),
        ("s3:GetObject", '{"Fn::Sub": "${ArtifactBucket.Arn}/reports/*"}', "null"),
        ("s3:PutObject", '{"Fn::Sub": "${ArtifactBucket.Arn}/sweep-reports/*"}', "null"),
    }  # fmt: skip
    policies = FUNCTIONS["ReportFunction"]["Properties"]["Policies"]
    templates = {next(iter(p)) for p in policies if "Statement" not in p}
    assert templates == set()  # no S3 policy template: they grant the bucket
    writers = {
        o for o, s in statements() if allows(s, "s3:PutObject") and "sweep-reports" in json.dumps(s)
    }
    assert writers == {"ReportFunction"}
    # The instances write their boots' reports, never the sweep's page.
    assert sweep_report_key("s").startswith("sweep-reports/")
    assert not sweep_report_key("s").startswith("reports/")


@pytest.mark.parametrize("logical_id", ["SweepStateMachine", "BootStateMachine"])
def test_every_definition_placeholder_is_substituted(logical_id: str) -> None:
    machine = RESOURCES[logical_id]["Properties"]
    definition = (ROOT / machine["DefinitionUri"]).read_text()
    placeholders = set(re.findall(r"\$\{(\w+)\}", definition))
    assert placeholders == set(machine["DefinitionSubstitutions"])
    for key, value in machine["DefinitionSubstitutions"].items():
        if key.endswith(("Seconds", "BackoffRate")):  # a number: a parameter with a default
            assert TEMPLATE["Parameters"][value["Ref"]]["Default"] >= 1
            continue
        if key == "LedgerTableName":  # MarkFinishFailed writes the ledger directly
            assert value == {"Ref": "LedgerTable"}
            continue
        if key == "BootStateMachineArn":  # the sweep starts each boot's execution
            assert value == {"Ref": "BootStateMachine"}
            continue
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


def test_the_deadline_schedule_can_only_terminate_project_instances() -> None:
    granted = [s for o, s in statements() if o == "DeadlineSchedulerRole" and "Principal" not in s]
    assert [actions(s) for s in granted] == [["ec2:TerminateInstances"]]
    condition = granted[0]["Condition"]["StringEquals"]
    assert condition["ec2:ResourceTag/rigbench:project"] == {"Ref": "AWS::StackName"}


def test_launch_only_allowed_types_with_imdsv2() -> None:
    allowed = {
        "LaunchFunction": "AllowedInstanceTypes",
        "BakeLaunchFunction": "BuilderInstanceTypes",
    }
    launching = [(o, s) for o, s in statements() if allows(s, "ec2:RunInstances")]
    instance = [(o, s) for o, s in launching if "instance/*" in json.dumps(s["Resource"])]
    assert {o for o, _ in instance} == set(allowed)
    for owner, statement in instance:
        conditions = statement["Condition"]["StringEquals"]
        assert conditions["ec2:InstanceType"] == {"Ref": allowed[owner]}
        assert conditions["ec2:MetadataHttpTokens"] == "required"


def test_builder_types_parameter_matches_the_catalog() -> None:
    from hardware.instance_types import BUILDERS

    default = TEMPLATE["Parameters"]["BuilderInstanceTypes"]["Default"]
    assert set(default.split(",")) == set(BUILDERS.values())


def test_data_is_retained_and_protected() -> None:
    for logical_id in ("ResultsTable", "LedgerTable", "ArtifactBucket"):
        assert RESOURCES[logical_id]["DeletionPolicy"] == "Retain", logical_id
        assert RESOURCES[logical_id]["UpdateReplacePolicy"] == "Retain", logical_id
    for logical_id in ("ResultsTable", "LedgerTable"):
        assert RESOURCES[logical_id]["Properties"]["DeletionProtectionEnabled"] is True


def test_bucket_refuses_plain_http() -> None:
    policy = RESOURCES["ArtifactBucketPolicy"]["Properties"]
    assert policy["Bucket"] == {"Ref": "ArtifactBucket"}
    (deny,) = [s for s in policy["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert deny["Action"] == "s3:*"


def test_execution_end_without_finish_reaches_the_cleanup_handler() -> None:
    function = RESOURCES["SweepEndFunction"]["Properties"]
    assert function["Handler"] == "functions.sweep_end.handler"
    (event,) = function["Events"].values()
    pattern = event["Properties"]["Pattern"]
    assert pattern["source"] == ["aws.states"]
    assert pattern["detail-type"] == ["Step Functions Execution Status Change"]
    assert set(pattern["detail"]["status"]) == {"ABORTED", "TIMED_OUT", "FAILED"}
    assert pattern["detail"]["stateMachineArn"] == [
        {"Ref": "SweepStateMachine"}, {"Ref": "BakeStateMachine"}
    ]  # fmt: skip


def test_finish_has_reserved_concurrency() -> None:
    finish = RESOURCES["FinishFunction"]["Properties"]
    assert finish["ReservedConcurrentExecutions"] == {"Ref": "FinishReservedConcurrency"}


def test_alarms_notify_the_topic() -> None:
    alarms = {k: v for k, v in RESOURCES.items() if v["Type"] == "AWS::CloudWatch::Alarm"}
    metrics = {
        (a["Properties"]["Namespace"], a["Properties"]["MetricName"]) for a in alarms.values()
    }
    assert ("rigbench", "OverdueInstances") in metrics
    assert ("AWS/Lambda", "Errors") in metrics
    reaper = [
        a for a in alarms.values()
        if {"Name": "FunctionName", "Value": {"Ref": "ReaperFunction"}}
        in a["Properties"].get("Dimensions", [])
    ]  # fmt: skip
    assert reaper, "an alarm on the reaper's errors"
    for alarm in alarms.values():
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": "AlarmTopic"}]
    assert RESOURCES["AlarmTopic"]["Type"] == "AWS::SNS::Topic"
    assert "AlarmTopicArn" in TEMPLATE["Outputs"]
    # CloudWatch cannot publish to a topic under the AWS managed key: the topic has its own,
    # whose policy lets this account's alarms encrypt what they publish
    key = RESOURCES["AlarmTopic"]["Properties"]["KmsMasterKeyId"]
    assert key == {"Ref": "AlarmTopicKey"}
    policy = RESOURCES["AlarmTopicKey"]["Properties"]["KeyPolicy"]["Statement"]
    cloudwatch = [s for s in policy if s["Principal"] == {"Service": "cloudwatch.amazonaws.com"}]
    assert [set(actions(s)) for s in cloudwatch] == [{"kms:Decrypt", "kms:GenerateDataKey*"}]


def test_cleanup_may_lift_termination_protection_only_on_project_instances() -> None:
    lifting = [(o, s) for o, s in statements() if allows(s, "ec2:ModifyInstanceAttribute")]
    assert lifting
    for owner, statement in lifting:
        conditions = statement["Condition"]["StringEquals"]
        assert conditions["ec2:ResourceTag/rigbench:project"] == {"Ref": "AWS::StackName"}, owner


def test_launch_only_encrypted_volumes() -> None:
    launching = [(o, s) for o, s in statements() if allows(s, "ec2:RunInstances")]
    volumes = [(o, s) for o, s in launching if "volume/*" in json.dumps(s["Resource"])]
    assert {o for o, _ in volumes} == {"LaunchFunction", "BakeLaunchFunction"}
    for _, statement in volumes:
        assert statement["Resource"]["Fn::Sub"].endswith(":volume/*")
        assert statement["Condition"] == {"Bool": {"ec2:Encrypted": "true"}}


def test_instances_reach_out_over_http_and_https_only() -> None:
    egress = RESOURCES["InstanceSecurityGroup"]["Properties"]["SecurityGroupEgress"]
    assert {(r["IpProtocol"], r["FromPort"], r["ToPort"]) for r in egress} == {
        ("tcp", 443, 443),
        ("tcp", 80, 80),
    }


# What each function does to the ledger (functions/budget.py, cleanup.py, ...), and no more:
# a transaction's Put/Update need PutItem/UpdateItem; nothing deletes, scans or batch-writes.
LEDGER_ACTIONS = {
    "ValidateFunction": {"dynamodb:PutItem", "dynamodb:GetItem"},
    "ReserveBudgetFunction": {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"},
    "LaunchFunction": {"dynamodb:GetItem", "dynamodb:UpdateItem"},
    "CheckAgentFunction": {"dynamodb:GetItem", "dynamodb:UpdateItem"},
    "CheckReadyFunction": {"dynamodb:GetItem", "dynamodb:UpdateItem"},
    "PollFunction": {"dynamodb:GetItem", "dynamodb:UpdateItem"},
    "FinishFunction": {"dynamodb:GetItem", "dynamodb:UpdateItem"},
    "SummarizeFunction": {"dynamodb:Query", "dynamodb:UpdateItem", "dynamodb:PutItem"},
    "ReportFunction": {"dynamodb:Query"},
    "ReaperFunction": {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem"},
    "SpotInterruptionFunction": {"dynamodb:PutItem"},
    "SweepEndFunction": {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:UpdateItem"},
    "BakePlanFunction": {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"},
    "BakeTerminateFunction": {"dynamodb:GetItem", "dynamodb:UpdateItem"},
    "SweepStateMachine": {"dynamodb:UpdateItem"},  # MarkFinishFailed
    "BootStateMachine": {"dynamodb:UpdateItem"},  # MarkFinishFailed
}


def _on(statement: dict[str, Any], table: str) -> bool:
    return table in json.dumps(statement["Resource"])


def test_no_policy_template_grants_more_than_the_code_uses() -> None:
    for logical_id, resource in RESOURCES.items():
        for policy in resource.get("Properties", {}).get("Policies", []):
            if isinstance(policy, dict):
                assert not {"DynamoDBCrudPolicy", "DynamoDBReadPolicy", "S3ReadPolicy",
                            "DynamoDBWritePolicy"} & set(policy), logical_id  # fmt: skip


def test_each_function_holds_the_ledger_actions_it_uses() -> None:
    granted: dict[str, set[str]] = {}
    for owner, statement in statements():
        if (
            statement["Effect"] == "Allow"
            and "Resource" in statement
            and _on(statement, "LedgerTable")
        ):
            granted.setdefault(owner, set()).update(actions(statement))
    assert granted == LEDGER_ACTIONS


def test_nothing_scans_and_results_are_read_by_query_only() -> None:
    assert not [o for o, s in statements() if allows(s, "dynamodb:Scan")]
    readers = {
        (o, a) for o, s in statements() if "Resource" in s and _on(s, "ResultsTable")
        for a in actions(s)
    }  # fmt: skip
    assert readers == {
        ("StoreFunction", "dynamodb:PutItem"),
        ("ReportFunction", "dynamodb:Query"),
        ("SummarizeFunction", "dynamodb:Query"),  # the sweep and its rigs' history
        ("DecideRoundFunction", "dynamodb:Query"),  # the sweep's rows after each round
    }


def test_only_summarize_publishes_and_only_to_the_alarm_topic() -> None:
    publishing = [(o, s) for o, s in statements() if any("sns:" in a for a in actions(s))]
    assert publishing, "Summarize publishes regression alerts"
    for owner, statement in publishing:
        assert owner == "SummarizeFunction"
        assert set(actions(statement)) == {"sns:Publish"}
        assert statement["Resource"] == {"Ref": "AlarmTopic"}
    summarize = RESOURCES["SummarizeFunction"]["Properties"]
    assert summarize["Environment"]["Variables"]["ALERT_TOPIC_ARN"] == {"Ref": "AlarmTopic"}


def test_s3_reads_are_scoped_by_prefix() -> None:
    reads = {
        (o, json.dumps(s["Resource"])) for o, s in statements()
        if allows(s, "s3:GetObject") and "Resource" in s and not o.endswith("Role")
    }  # fmt: skip
    assert reads == {
        ("ValidateFunction", '{"Fn::Sub": "${ArtifactBucket.Arn}/bundle/*"}'),
        ("BakePlanFunction", '{"Fn::Sub": "${ArtifactBucket.Arn}/bundle/*"}'),
        ("StoreFunction", '{"Fn::Sub": "${ArtifactBucket.Arn}/reports/*"}'),
        ("ReportFunction", '{"Fn::Sub": "${ArtifactBucket.Arn}/reports/*"}'),
    }


def _resolve(node: Any, parameters: dict[str, Any]) -> Any:
    """The few intrinsic functions a condition value is built from."""
    if isinstance(node, dict) and "Ref" in node:
        return parameters[node["Ref"]]
    if isinstance(node, dict) and "Fn::Join" in node:
        delimiter, items = node["Fn::Join"]
        return delimiter.join(_resolve(items, parameters))
    if isinstance(node, dict) and "Fn::Split" in node:
        delimiter, text = node["Fn::Split"]
        return _resolve(text, parameters).split(delimiter)
    if isinstance(node, dict) and "Fn::Sub" in node:
        text, names = node["Fn::Sub"]
        for name, value in names.items():
            text = text.replace("${" + name + "}", _resolve(value, parameters))
        return text
    return node


def test_launch_only_into_the_stack_s_subnets_from_amazon_or_own_images() -> None:
    launching = [
        s for o, s in statements() if o == "LaunchFunction" and allows(s, "ec2:RunInstances")
    ]
    by_resource = {r: s for s in launching for r in _resources(s)}
    subnet = by_resource[":subnet/*"]
    assert by_resource[":network-interface/*"] is subnet
    values = _resolve(
        subnet["Condition"]["StringLike"]["ec2:Subnet"], {"SubnetIds": ["subnet-a1", "subnet-b2"]}
    )
    assert values == ["*:subnet/subnet-a1", "*:subnet/subnet-b2"]
    image = by_resource["::image/*"]
    assert image["Condition"] == {
        "StringEquals": {"ec2:Owner": ["amazon", {"Ref": "AWS::AccountId"}]}
    }
    # Every other resource of the launch is named, or conditioned (tags, type, encryption).
    for resource, statement in by_resource.items():
        assert (
            "Condition" in statement
            or not resource.endswith(("/*", "::image/*"))
            or (resource.endswith(":spot-instances-request/*"))
        ), resource


def _resources(statement: dict[str, Any]) -> list[str]:
    found = (
        statement["Resource"]
        if isinstance(statement["Resource"], list)
        else [statement["Resource"]]
    )
    return [r["Fn::Sub"].rsplit("}", 1)[-1] if isinstance(r, dict) else r for r in found]


def test_service_quotas_are_read_by_their_arns_only() -> None:
    from functions.bake_steps import STANDARD_ON_DEMAND_QUOTA
    from functions.quota import ON_DEMAND_G_VT_QUOTA, SPOT_G_VT_QUOTA

    reading = {
        o: sorted(r["Fn::Sub"].rsplit("/", 1)[-1] for r in (
            s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]]))
        for o, s in statements() if allows(s, "servicequotas:GetServiceQuota")
    }  # fmt: skip
    assert reading == {
        "CheckQuotaFunction": sorted([SPOT_G_VT_QUOTA, ON_DEMAND_G_VT_QUOTA]),
        "BakePlanFunction": [STANDARD_ON_DEMAND_QUOTA],
    }


def test_a_finish_that_gives_up_is_ended_within_a_minute_and_alarms() -> None:
    assert TEMPLATE["Parameters"]["ReaperSchedule"]["Default"] == "rate(1 minute)"
    alarm = RESOURCES["FinishGaveUpAlarm"]["Properties"]
    assert (alarm["Namespace"], alarm["MetricName"]) == ("rigbench", "FinishGaveUpInstances")
    assert alarm["Period"] == 60
    mark = [
        s for o, s in statements()
        if o == "SweepStateMachine" and "Resource" in s and _on(s, "LedgerTable")
    ]  # fmt: skip
    assert [actions(s) for s in mark] == [["dynamodb:UpdateItem"]]


def test_the_token_secret_is_an_arn_and_its_key_decrypts_only_through_secrets_manager() -> None:
    parameters = TEMPLATE["Parameters"]
    secret = re.compile(parameters["TokenSecretArn"]["AllowedPattern"])
    assert secret.match("")
    assert secret.match("arn:aws:secretsmanager:us-east-1:123456789012:secret:rigbench/hf-AbC123")
    assert not secret.match("rigbench/hf-token")  # a name, not an ARN
    assert not secret.match("*")
    key = re.compile(parameters["TokenSecretKmsKeyArn"]["AllowedPattern"])
    assert key.match("arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab")
    assert not key.match("arn:aws:kms:us-east-1:123456789012:alias/aws/secretsmanager")
    decrypting = [(o, s) for o, s in statements() if allows(s, "kms:Decrypt")]
    token = [s for o, s in decrypting if s.get("Sid") == "DecryptTokenThroughSecretsManager"]
    assert len(token) == 1
    assert token[0]["Resource"] == {"Ref": "TokenSecretKmsKeyArn"}
    assert token[0]["Condition"] == {
        "StringEquals": {
            "kms:ViaService": {"Fn::Sub": "secretsmanager.${AWS::Region}.amazonaws.com"}
        }
    }
    assert actions(token[0]) == ["kms:Decrypt"]


def test_the_bake_launches_only_into_the_stack_s_subnets_from_amazon_or_own_images() -> None:
    launching = [
        s for o, s in statements() if o == "BakeLaunchFunction" and allows(s, "ec2:RunInstances")
    ]
    by_resource = {r: s for s in launching for r in _resources(s)}
    assert "ec2:Subnet" in by_resource[":subnet/*"]["Condition"]["StringLike"]
    assert by_resource[":network-interface/*"] is by_resource[":subnet/*"]
    assert by_resource["::image/*"]["Condition"] == {
        "StringEquals": {"ec2:Owner": ["amazon", {"Ref": "AWS::AccountId"}]}
    }
    unconditioned = [s for s in launching if "Condition" not in s]
    assert [_resources(s) for s in unconditioned] == [[""]]  # the stack's own security group
    assert "security-group/${InstanceSecurityGroup.GroupId}" in json.dumps(unconditioned)


def test_the_bake_tags_only_the_image_it_creates() -> None:
    tagging = [(o, s) for o, s in statements() if allows(s, "ec2:CreateTags")]
    for owner, statement in tagging:
        condition = statement.get("Condition", {}).get("StringEquals", {})
        assert condition.get("ec2:CreateAction") in ("RunInstances", "CreateImage"), owner
    (image,) = [s for o, s in tagging if o == "BakeImageFunction"]
    assert image["Condition"]["StringEquals"]["aws:RequestTag/rigbench:project"] == {
        "Ref": "AWS::StackName"
    }


def test_command_status_is_granted_alone() -> None:
    """GetCommandInvocation has no resource or condition key in IAM: its statement grants it
    and nothing else, so the wildcard resource reaches no other action."""
    polling = [s for o, s in statements() if allows(s, "ssm:GetCommandInvocation")]
    assert polling
    assert all(actions(s) == ["ssm:GetCommandInvocation"] for s in polling)


def test_every_function_logs_where_logs_expire() -> None:
    logging = TEMPLATE["Globals"]["Function"]["LoggingConfig"]
    assert logging == {"LogGroup": {"Ref": "FunctionLogGroup"}}
    assert not [f for f, v in FUNCTIONS.items() if "LoggingConfig" in v["Properties"]]
    group = RESOURCES["FunctionLogGroup"]["Properties"]
    assert group["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    assert TEMPLATE["Parameters"]["LogRetentionDays"]["Default"] == 90


def test_event_driven_functions_send_failed_events_to_a_queue_with_an_alarm() -> None:
    driven = {f for f, v in FUNCTIONS.items() if "Events" in v["Properties"]}
    assert driven == {"ReaperFunction", "SpotInterruptionFunction", "SweepEndFunction"}
    for name in driven:
        config = FUNCTIONS[name]["Properties"]["EventInvokeConfig"]
        assert config["DestinationConfig"]["OnFailure"] == {
            "Type": "SQS",
            "Destination": {"Fn::GetAtt": ["FailedEventsQueue", "Arn"]},
        }, name
    alarm = RESOURCES["FailedEventsAlarm"]["Properties"]
    assert alarm["Namespace"] == "AWS/SQS"
    assert alarm["Dimensions"] == [
        {"Name": "QueueName", "Value": {"Fn::GetAtt": ["FailedEventsQueue", "QueueName"]}}
    ]
    assert alarm["AlarmActions"] == [{"Ref": "AlarmTopic"}]
    assert RESOURCES["FailedEventsQueue"]["Properties"]["SqsManagedSseEnabled"] is True


def test_an_optional_budget_backs_the_monthly_cap_from_outside_the_ledger() -> None:
    budget = RESOURCES["MonthlyBudget"]
    assert budget["Condition"] == "HasBudgetAlarm"
    assert TEMPLATE["Parameters"]["BudgetAlarm"]["Default"] == "off"
    limit = budget["Properties"]["Budget"]["BudgetLimit"]
    assert limit == {"Amount": {"Ref": "MonthlyCapUsd"}, "Unit": "USD"}
    kinds = {n["Notification"]["NotificationType"] for n in budget["Properties"][
        "NotificationsWithSubscribers"]}  # fmt: skip
    assert kinds == {"ACTUAL", "FORECASTED"}


def test_the_sweep_may_start_wait_for_and_stop_only_its_boot_executions() -> None:
    boot_executions = "execution:${BootStateMachine.Name}:*"
    sweep = {
        a: json.dumps(s["Resource"])
        for o, s in statements()
        if o == "SweepStateMachine"
        for a in actions(s)
    }
    assert sweep["states:StartExecution"] == json.dumps({"Ref": "BootStateMachine"})
    for action in ("states:DescribeExecution", "states:StopExecution"):
        assert boot_executions in sweep[action], action
    # what AWS asks of a role whose Task is startExecution.sync: its managed rule, by name
    for action in ("events:PutTargets", "events:PutRule", "events:DescribeRule"):
        assert sweep[action].endswith(
            ':rule/StepFunctionsGetEventsForStepFunctionsExecutionRule"}'
        ), action
    # the end handler and the reaper stop a sweep's boot executions, named to them
    stoppers = {o for o, s in statements() if allows(s, "states:StopExecution")}
    assert stoppers == {"SweepStateMachine", "SweepEndFunction", "ReaperFunction"}
    for owner in ("SweepEndFunction", "ReaperFunction"):
        (stop,) = [s for o, s in statements() if o == owner and allows(s, "states:StopExecution")]
        assert boot_executions in json.dumps(stop["Resource"])
        variables = FUNCTIONS[owner]["Properties"]["Environment"]["Variables"]
        assert variables["BOOT_STATE_MACHINE_ARN"] == {"Ref": "BootStateMachine"}
    # the boot's own role invokes the boot's steps, the sweep's no longer does
    boot_invokes = {
        p["LambdaInvokePolicy"]["FunctionName"]["Ref"]
        for p in RESOURCES["BootStateMachine"]["Properties"]["Policies"]
        if "LambdaInvokePolicy" in p
    }
    assert "LaunchFunction" in boot_invokes
    assert "FinishFunction" in boot_invokes
    sweep_invokes = {
        p["LambdaInvokePolicy"]["FunctionName"]["Ref"]
        for p in RESOURCES["SweepStateMachine"]["Properties"]["Policies"]
        if "LambdaInvokePolicy" in p
    }
    assert not {"LaunchFunction", "PollFunction"} & sweep_invokes
