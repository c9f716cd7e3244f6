"""The cloud commands against the emulated stack: run, status, results (by Query), reap,
deploy --bundle-only."""

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import typer
from typer.testing import CliRunner

from functions.tables import results as results_table
from harness.version import harness_version
from rigbench import cloud
from rigbench.bundle import REPO_ROOT, build_bundle
from rigbench.commands import stack_choice
from rigbench.commands.deploy import deploy_command
from rigbench.commands.logs import logs_command
from rigbench.commands.stop import stop_command, who
from rigbench.emulation import Emulation
from rigbench.report.data import gather
from rigbench.report.writer import store_from
from rigbench.stack.boto import BotoStack
from rigbench.stack.client import StackError, report_link_expires_s
from tests import loopback
from tests.orchestrator.conftest import assert_clean, fleet_of, result_rows, run_sweep, sweep_input

runner = CliRunner()
app = typer.Typer()  # the cloud commands alone (rigbench.cli's `run` also goes local)
cloud.register(app)
app.command("stop")(stop_command)
app.command("logs")(logs_command)
app.command("deploy")(deploy_command)


@pytest.fixture
def stack(emu: Emulation, monkeypatch: pytest.MonkeyPatch) -> Emulation:
    """The cloud commands resolve the stack to the emulated one."""

    def connect(stack_name: str) -> BotoStack:
        client = BotoStack(boto3.session.Session(), emu.stack_refs())
        client.follow_poll_s = 0.2
        return client

    monkeypatch.setattr(stack_choice, "connect_aws", connect)
    return emu


def invoke(*args: str) -> Any:
    return runner.invoke(app, list(args), catch_exceptions=False)


def no_scan(client: Any) -> Any:
    def refuse(**_: Any) -> None:
        raise AssertionError("results must Query, never Scan")

    client.meta.events.register("before-call.dynamodb.Scan", refuse)
    return client


@pytest.mark.slow
def test_run_follows_a_sweep_to_its_end(stack: Emulation, tmp_path: Path) -> None:
    body = sweep_input()
    body.pop("rigs")
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(body))
    done = invoke("run", str(path), "--rig", "torch", "--rig", "vllm", "--name", "cli-run-1")
    assert done.exit_code == 0, done.output
    assert (
        "arn:aws:states:us-east-1:123456789012:execution:rigbench-SweepStateMachine:cli-run-1"
        in done.output
    )
    assert "SUCCEEDED" in done.output
    assert "terminated" in done.output
    assert len(result_rows(stack, "cli-run-1")) == 4
    assert stack.running_instances() == []
    # It ends with where the report is: a presigned GET of the object WriteReport stored.
    url = done.output.strip().splitlines()[-1].removeprefix("report: ")
    assert url.startswith(stack.endpoint_url), done.output
    assert "X-Amz-Algorithm=AWS4-HMAC-SHA256" in url
    assert "X-Amz-Expires=3600" in url  # an hour, unless RIGBENCH_REPORT_LINK_S says
    assert "/sweep-reports/cli-run-1/report.html?" in url
    fetched = loopback.get(url, timeout=30)
    assert fetched.status_code == 200
    assert fetched.headers["content-type"].startswith("text/html")
    assert "rigbench sweep cli-run-1" in fetched.text
    assert 'id="plot-throughput"' in fetched.text


@pytest.mark.slow
def test_run_says_when_there_is_no_report(stack: Emulation, tmp_path: Path) -> None:
    stack.faults.fail_lambda("ReportFunction", "raise")
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(sweep_input()))
    done = invoke("run", str(path), "--name", "cli-run-no-report")
    assert done.exit_code == 0, done.output
    last = done.output.strip().splitlines()[-1]
    assert last.startswith("report not available: no report for sweep 'cli-run-no-report'")


@pytest.mark.slow
def test_run_refuses_bad_input_before_starting_anything(stack: Emulation, tmp_path: Path) -> None:
    sfn = stack.client("stepfunctions")
    before = sfn.list_executions(stateMachineArn=stack.state_machine_arn)["executions"]
    done = invoke("run", "--rig", "tgi", "--model", "m", "--budget", "1")
    assert done.exit_code == 2
    assert "rigs: unknown rig 'tgi'" in done.output
    broken = tmp_path / "broken.json"
    broken.write_text('{"rigs": [')
    done = invoke("run", str(broken))
    assert done.exit_code == 2
    assert f"{broken}: not valid JSON" in done.output
    done = invoke("run", "--rig", "torch", "--model", "m", "--budget", "0")
    assert done.exit_code == 2
    assert "budget_usd" in done.output
    assert sfn.list_executions(stateMachineArn=stack.state_machine_arn)["executions"] == before


@pytest.mark.slow
def test_status_shows_each_boot_and_the_failure(stack: Emulation) -> None:
    stack.fleet.bench = "failed"  # type: ignore[attr-defined]
    described = run_sweep(stack, sweep_input())
    name = described["executionArn"].rsplit(":", 1)[1]
    done = invoke("status", name)
    assert done.exit_code == 0, done.output
    assert "torch" in done.output
    assert "failed" in done.output
    assert "CommandFailed" in done.output
    listing = invoke("status")
    assert name in listing.output


@pytest.mark.slow
def test_results_returns_what_a_sweep_stored_by_query(stack: Emulation) -> None:
    described = run_sweep(stack, sweep_input(rigs=["torch", "vllm"]))
    sweep_id = described["executionArn"].rsplit(":", 1)[1]
    stored = result_rows(stack, sweep_id)
    ddb = no_scan(stack.client("dynamodb"))
    table = stack.table("ResultsTable")

    def query_results(**kwargs: Any) -> list[dict[str, Any]]:
        now = datetime.now(UTC)
        since = kwargs.pop("since", now - timedelta(days=30))
        return results_table.query_rows(ddb, table, since=since, until=now, **kwargs)

    by_sweep = query_results(sweep=sweep_id)
    assert sorted(by_sweep, key=lambda r: r["row_key"]) == sorted(
        stored, key=lambda r: r["row_key"]
    )
    over_time = query_results(rig="torch", model="random:tiny", instance_type="g5g.2xlarge")
    assert {r["row_key"] for r in over_time if r["sweep_id"] == sweep_id} == {
        "torch#01#c00001",
        "torch#01#c00004",
    }
    by_month = query_results(rig="vllm")
    assert {r["row_key"] for r in by_month if r["sweep_id"] == sweep_id} == {
        "vllm#01#c00001",
        "vllm#01#c00004",
    }
    assert all(r["rig"] == "vllm" for r in by_month)
    future = datetime.now(UTC) + timedelta(days=1)
    assert query_results(rig="vllm", since=future) == []

    done = invoke("results", "--sweep", sweep_id, "--format", "json")
    assert done.exit_code == 0, done.output
    assert sorted(json.loads(done.output), key=lambda r: r["row_key"]) == sorted(
        stored, key=lambda r: r["row_key"]
    )
    done = invoke(
        "results",
        "--rig",
        "torch",
        "--model",
        "random:tiny",
        "--instance-type",
        "g5g.2xlarge",
        "--format",
        "csv",
    )
    header, *lines = done.output.strip().splitlines()
    # then the metric table's results columns, in its order (analysis.metrics)
    assert header.startswith("sweep_id,rig,boot,model,instance_type,cell,started_at,ttft_ms.p50")
    assert "output_tok_s" in header.split(",")
    assert any(
        line.startswith(f"{sweep_id},torch,1,random:tiny,g5g.2xlarge,c00004") for line in lines
    )
    done = invoke("results", "--rig", "torch")
    assert done.exit_code == 0
    assert "result rows" in done.output
    assert "torch" in done.output
    assert invoke("results", "--since", "yesterday").exit_code == 2


@pytest.mark.slow
def test_reap_ends_only_overdue_project_instances(stack: Emulation) -> None:
    ec2 = stack.client("ec2")
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    overdue = ec2.run_instances(
        ImageId="ami-0e1a7ed0000000000", MinCount=1, MaxCount=1, SubnetId=subnet,
        TagSpecifications=[{"ResourceType": "instance", "Tags": [
            {"Key": "rigbench:project", "Value": stack.stack_name},
            {"Key": "rigbench:deadline", "Value": "1000000000"},
        ]}],
    )["Instances"][0]["InstanceId"]  # fmt: skip
    listed = invoke("reap", "--dry-run")
    assert overdue in listed.output
    assert stack.running_instances() == [overdue]
    done = invoke("reap")
    assert overdue in done.output
    assert stack.running_instances() == []


@pytest.mark.slow
def test_deploy_uploads_the_bundle_named_by_its_hash(stack: Emulation) -> None:
    done = invoke("deploy", "--bundle-only")
    assert done.exit_code == 0, done.output
    expected = build_bundle(REPO_ROOT)
    assert expected.sha256[:12] in done.output
    s3 = stack.client("s3")
    bucket = stack.stack_refs().bucket
    manifest = json.loads(s3.get_object(Bucket=bucket, Key="bundle/current.json")["Body"].read())
    assert manifest["sha256"] == expected.sha256
    assert "torch" in manifest["rigs"]
    assert s3.get_object(Bucket=bucket, Key=manifest["key"])["Body"].read() == expected.data


def test_since_far_in_the_past_is_refused_in_one_line() -> None:
    from datetime import UTC, datetime, timedelta

    from rigbench.commands.stack_choice import CloudError, parse_since

    with pytest.raises(CloudError, match="more than 3 years ago"):
        parse_since("1999-01-01")
    recent = parse_since((datetime.now(UTC) - timedelta(days=30)).date().isoformat())
    assert recent is not None
    assert recent.tzinfo is not None


def test_the_report_link_lives_an_hour_unless_told_and_a_bad_life_is_named() -> None:
    assert report_link_expires_s({}) == 3600
    assert report_link_expires_s({"RIGBENCH_REPORT_LINK_S": "600"}) == 600
    for bad in ("0", "-5", "1h", str(7 * 24 * 3600 + 1)):
        with pytest.raises(StackError, match=f"RIGBENCH_REPORT_LINK_S='{bad}': a presigned"):
            report_link_expires_s({"RIGBENCH_REPORT_LINK_S": bad})


@pytest.mark.slow
def test_a_dry_run_with_credentials_plans_against_the_account(
    stack: Emulation, tmp_path: Path
) -> None:
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(sweep_input(boots_per_rig=2)))
    sfn = stack.client("stepfunctions")
    before = sfn.list_executions(stateMachineArn=stack.state_machine_arn)["executions"]
    planned = invoke("run", "--dry-run", str(path))
    assert planned.exit_code == 0, planned.output
    text = " ".join(planned.output.split())
    assert (
        "planned against the deployed stack 'rigbench' (us-east-1) (the account's figures)" in text
    )
    assert "quota L-3819A6DF: 64 vCPU (the account's)" in text
    assert "spot price history" in text
    assert "already committed of the $50.00 monthly cap" in text
    assert "emulated" not in text
    assert "nothing was spent" in text
    after = sfn.list_executions(stateMachineArn=stack.state_machine_arn)["executions"]
    assert after == before, "a dry run starts nothing"


@pytest.mark.slow
def test_stop_ends_a_running_sweep_and_says_who_stopped_it(stack: Emulation) -> None:
    fleet = fleet_of(stack)
    fleet.bench = "running"
    body = sweep_input(waits={"agent_poll_s": 0, "ready_poll_s": 0, "command_poll_s": 1})
    arn = stack.start_execution(body, name="cli-stop-1")
    assert fleet.bench_started.wait(60)
    assert len(stack.running_instances()) == 1
    stopped = invoke("stop", "cli-stop-1")
    assert stopped.exit_code == 0, stopped.output
    text = " ".join(stopped.output.split())
    assert f"stopped by {who()}" in text
    assert "no instance of sweep cli-stop-1 is running" in text
    described = stack.wait(arn, 30)
    assert described["status"] in ("ABORTED", "FAILED")  # moto ends a stopped Map FAILED
    assert stack.running_instances() == []
    assert_clean(stack, "cli-stop-1")  # every boot billed to when its instance ended
    again = invoke("stop", "cli-stop-1")
    assert again.exit_code == 2
    assert "is not running" in again.output


@pytest.mark.slow
def test_logs_prints_what_each_boot_s_instance_uploaded_and_nothing_else(stack: Emulation) -> None:
    fleet = fleet_of(stack)
    described = run_sweep(stack, sweep_input(), timeout_s=90)
    assert described["status"] == "SUCCEEDED", described.get("cause")
    sweep_id = described["name"]
    (instance,) = fleet.instances.values()
    arn_prefix = "arn:aws:ec2:us-east-1:123456789012:instance/"
    # The launch told the instance where its logs go; it appends its own id.
    logs_at = f"s3://{stack.stack_refs().bucket}/reports/{sweep_id}/torch/01/{arn_prefix}"
    assert logs_at in instance.user_data
    s3, bucket = stack.client("s3"), stack.stack_refs().bucket
    mine = f"reports/{sweep_id}/torch/01/{arn_prefix}{instance.instance_id}/"
    s3.put_object(Bucket=bucket, Key=mine + "bootstrap.log", Body=b"fetching_bundle\ninstalling\n")
    s3.put_object(Bucket=bucket, Key=mine + "rig.log", Body=b"line 1\nline 2\nCUDA error\n")
    # An instance the ledger never recorded for this boot: its files are never read.
    foreign = f"reports/{sweep_id}/torch/01/{arn_prefix}i-0f0f0f0f0f0f0f0f0/rig.log"
    s3.put_object(Bucket=bucket, Key=foreign, Body=b"planted\n")

    shown = invoke("logs", sweep_id)
    assert shown.exit_code == 0, shown.output
    assert f"== torch boot 1, {instance.instance_id}, bootstrap.log" in shown.output
    assert "installing" in shown.output
    assert "CUDA error" in shown.output
    assert "planted" not in shown.output
    last = invoke("logs", sweep_id, "--rig", "torch", "--boot", "1", "--tail", "1")
    assert "last 1 of 3 lines" in last.output
    assert "CUDA error" in last.output
    assert "line 2" not in last.output
    none = invoke("logs", sweep_id, "--rig", "vllm")
    assert none.exit_code == 1
    assert "no logs of sweep" in none.output
    # The report links them (never the planted one), and reads no log's body.
    (boot,) = gather(store_from(stack.client, stack.stack_refs()), sweep_id).boots
    assert [link.rsplit("/", 2)[-2:] for link in boot.logs] == [
        [instance.instance_id, "bootstrap.log"], [instance.instance_id, "rig.log"],
    ]  # fmt: skip
    assert all(
        link.startswith("https://us-east-1.console.aws.amazon.com/s3/") for link in boot.logs
    )


def fake_sam(tmp_path: Path) -> Path:
    """A `sam` that records its arguments and succeeds (the real one builds and deploys)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sam = bin_dir / "sam"
    sam.write_text(f'#!/bin/sh\necho "$@" >> "{tmp_path / "sam-calls"}"\n')
    sam.chmod(0o755)
    return bin_dir


@pytest.mark.slow
def test_deploy_without_sam_says_what_is_missing_in_one_line(
    stack: Emulation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no sam anywhere
    refused = invoke("deploy")
    assert refused.exit_code == 2
    assert len(refused.output.strip().splitlines()) == 1, refused.output
    assert "the AWS SAM CLI (`sam`) is not on PATH" in refused.output


@pytest.mark.slow
def test_deploy_without_vpc_finds_the_default_vpc_and_its_subnets(
    stack: Emulation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{fake_sam(tmp_path)}:{os.environ['PATH']}")
    ec2 = stack.client("ec2")
    (default,) = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"]
    subnets = sorted(
        ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [default["VpcId"]]}])["Subnets"],
        key=lambda s: s["AvailabilityZone"],
    )
    # A stack not deployed yet: its network is the account's default VPC.
    done = invoke("deploy", "--stack", "rigbench-new")
    assert done.exit_code == 0, done.output
    said = " ".join(done.output.split())
    assert f"network: {default['VpcId']}" in said
    assert "the default VPC of us-east-1" in said
    build, deploy = (tmp_path / "sam-calls").read_text().splitlines()
    assert build == "build"
    assert f"VpcId={default['VpcId']}" in deploy.split()
    assert f"SubnetIds={','.join(s['SubnetId'] for s in subnets)}" in deploy.split()
    assert f"RigbenchVersion={harness_version()}" in deploy.split()
    assert "bundle " in done.output  # then the bundle went up
    assert "rigbench doctor --stack rigbench-new" in said


@pytest.mark.slow
def test_deploy_keeps_a_deployed_stack_s_network_or_takes_the_one_given(
    stack: Emulation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{fake_sam(tmp_path)}:{os.environ['PATH']}")
    kept = invoke("deploy", "--stack", stack.stack_name)
    assert kept.exit_code == 0, kept.output
    assert f"as stack '{stack.stack_name}' was deployed" in " ".join(kept.output.split())
    ec2 = stack.client("ec2")
    other = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    mine = ec2.create_subnet(VpcId=other, CidrBlock="10.9.1.0/24")["Subnet"]["SubnetId"]
    default_subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    mixed = invoke("deploy", "--vpc", other, "--subnets", f"{mine},{default_subnet}")
    assert mixed.exit_code == 2
    assert f"not all in --vpc {other}" in " ".join(mixed.output.split())
    given = invoke("deploy", "--subnets", mine)
    assert given.exit_code == 0, given.output
    assert f"VpcId={other}" in (tmp_path / "sam-calls").read_text().splitlines()[-1].split()
