"""The real state machine and handlers on the emulated account: sweeps that succeed."""

import json

import pytest
from cfn_tools import load_yaml

from functions.settings import sweep_report_key
from rigbench.emulation import Emulation
from rigbench.emulation.cfn_template import TEMPLATE_PATH
from rigbench.emulation.seams import ACCOUNT_ID
from rigbench.report.data import gather
from rigbench.report.writer import store_from
from rigbench.stack import ResultsQuery
from rigbench.stack.boto import BotoStack
from tests.orchestrator.conftest import (
    assert_clean,
    result_rows,
    run_sweep,
    sweep_id_of,
    sweep_input,
)
from tests.orchestrator.scripted_fleet import ScriptedFleet

pytestmark = pytest.mark.slow


def test_the_stack_is_template_yaml_created_by_cloudformation_and_a_sweep_runs_on_it(
    emu: Emulation,
) -> None:
    declared = load_yaml(TEMPLATE_PATH.read_text())["Resources"]
    cfn = emu.client("cloudformation")
    (stack,) = cfn.describe_stacks(StackName=emu.stack_name)["Stacks"]
    assert stack["StackStatus"] == "CREATE_COMPLETE"
    created = {
        r["LogicalResourceId"]: r
        for page in cfn.get_paginator("list_stack_resources").paginate(StackName=emu.stack_name)
        for r in page["StackResourceSummaries"]
    }
    # What the translator makes of each SAM resource, under the template's own logical id.
    translated = {
        "AWS::Serverless::Function": "AWS::Lambda::Function",
        "AWS::Serverless::StateMachine": "AWS::StepFunctions::StateMachine",
    }
    for logical_id, resource in declared.items():
        if resource["Type"] in translated:
            assert created[logical_id]["ResourceType"] == translated[resource["Type"]], logical_id
            assert created[logical_id]["ResourceStatus"] == "CREATE_COMPLETE", logical_id
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}
    assert outputs["StateMachineArn"] == created["SweepStateMachine"]["PhysicalResourceId"]
    assert emu.stack_refs().state_machine_arn == outputs["StateMachineArn"]
    # The handler each function runs is the one template.yaml names.
    lam = emu.client("lambda")
    fn = lam.get_function_configuration(
        FunctionName=created["LaunchFunction"]["PhysicalResourceId"]
    )
    assert fn["Handler"] == declared["LaunchFunction"]["Properties"]["Handler"]

    described = run_sweep(emu, sweep_input())

    assert described["status"] == "SUCCEEDED", described.get("cause")
    assert described["stateMachineArn"] == outputs["StateMachineArn"]
    assert_clean(emu, sweep_id_of(described))


def test_a_sweep_measures_every_rig_and_boot_then_terminates(emu: Emulation) -> None:
    described = run_sweep(emu, sweep_input(rigs=["torch", "vllm"], boots_per_rig=2))

    assert described["status"] == "SUCCEEDED", described.get("cause")
    sweep_id = sweep_id_of(described)
    rows = result_rows(emu, sweep_id)
    assert sorted(r["row_key"] for r in rows) == sorted(
        f"{rig}#{boot:02d}#c{c:05d}" for rig in ("torch", "vllm") for boot in (1, 2) for c in (1, 4)
    )
    row = rows[0]
    assert row["metrics"]["output_tok_s"] > 0
    assert set(row["metrics"]["ttft_ms"]) >= {"mean", "p50", "p90", "p99"}
    # The cell's achieved load, validity and delivery ride along in the row.
    for row in rows:
        concurrency, metrics = row["metrics"]["concurrency"], row["metrics"]
        assert metrics["achieved_concurrency"] == pytest.approx(0.95 * concurrency)
        assert metrics["achieved_request_rate"] == pytest.approx(4 / (1.0 + 0.1 * concurrency))
        assert metrics["delivery"] == "streamed"
        assert metrics["ttft_validity"]["p50"] is True
        assert metrics["itl_validity"]["p50"] is True
        assert metrics["itl_validity"]["p99"] is False
        assert metrics["itl_validity"]["predicted_error_ms"]["p99"] == pytest.approx(0.9)
        assert "chunks read late" in metrics["itl_validity"]["reason"]
    provenance = row["provenance"]
    assert provenance["bundle_sha256"] == emu.bundle["sha256"]
    assert provenance["harness_version"] == "0.1.0+scripted"
    assert provenance["instance_type"] == "g5g.2xlarge"
    assert provenance["availability_zone"].startswith("us-east-1")
    assert provenance["image_id"].startswith("ami-")
    assert provenance["driver"] == "570.133.20"
    assert provenance["gpu"] == "NVIDIA T4G"
    assert provenance["rig"] == {"runtime": "torch 2.7.0", "transformers": "5.17.0"}
    assert provenance["served_model"] == "random:tiny"
    assert_clean(emu, sweep_id)
    fleet = emu.fleet
    assert isinstance(fleet, ScriptedFleet)
    assert len(fleet.instances) == 4
    assert all(i.market == "spot" for i in fleet.instances.values())


def test_a_sweep_leaves_its_html_report_in_the_bucket(emu: Emulation) -> None:
    described = run_sweep(emu, sweep_input(rigs=["torch", "vllm"], boots_per_rig=2))

    assert described["status"] == "SUCCEEDED", described.get("cause")
    sweep_id = sweep_id_of(described)
    summary = json.loads(described["output"])
    assert summary["report_key"] == sweep_report_key(sweep_id)
    assert summary["report_missing"] == ""
    stored = emu.client("s3").get_object(Bucket=emu.stack_refs().bucket, Key=summary["report_key"])
    assert stored["ContentType"].startswith("text/html")
    page = stored["Body"].read().decode()
    assert f"rigbench sweep {sweep_id}" in page
    for plot in ("plot-throughput", "plot-latency", "plot-tradeoff", "plot-cost"):
        assert f'id="{plot}"' in page, plot
    assert "succeeded" in page
    assert "still running" not in page
    assert "execution not available" not in page


def test_a_report_that_fails_fails_nothing_else(emu: Emulation) -> None:
    emu.faults.fail_lambda("ReportFunction", "raise")
    described = run_sweep(emu, sweep_input())

    assert described["status"] == "SUCCEEDED", described.get("cause")
    summary = json.loads(described["output"])
    assert summary["report_key"] == ""
    assert "injected failure in ReportFunction" in summary["report_missing"]
    sweep_id = sweep_id_of(described)
    listed = emu.client("s3").list_objects_v2(
        Bucket=emu.stack_refs().bucket, Prefix=sweep_report_key(sweep_id)
    )
    assert listed.get("KeyCount", 0) == 0
    assert_clean(emu, sweep_id)


def test_rows_from_a_report_before_achieved_load_are_stored_and_read_back(emu: Emulation) -> None:
    fleet = emu.fleet
    assert isinstance(fleet, ScriptedFleet)
    fleet.report_before_achieved_load = True
    described = run_sweep(emu, sweep_input())

    assert described["status"] == "SUCCEEDED", described.get("cause")
    sweep_id = sweep_id_of(described)
    stack = BotoStack(emu.session(), emu.stack_refs())
    rows = stack.results(ResultsQuery(sweep=sweep_id))
    assert [r.cell for r in rows] == ["c00001", "c00004"]
    for row in rows:
        assert row.metrics["output_tok_s"] > 0
        # Not recorded then: unknown, not "valid" or "streamed".
        for field in ("achieved_concurrency", "ttft_validity", "itl_validity", "delivery"):
            assert row.metrics.get(field) is None
    assert_clean(emu, sweep_id)


def test_a_boot_s_files_are_read_only_from_the_instance_recorded_for_it(emu: Emulation) -> None:
    described = run_sweep(emu, sweep_input(boots_per_rig=2))
    assert described["status"] == "SUCCEEDED", described.get("cause")
    sweep_id = sweep_id_of(described)
    s3, bucket = emu.client("s3"), emu.stack_refs().bucket
    rows = result_rows(emu, sweep_id)
    instance_of = {int(r["boot"]): r["provenance"]["instance_id"] for r in rows}
    arn = f"arn:aws:ec2:us-east-1:{ACCOUNT_ID}:instance/"
    keys = {int(r["boot"]): r["report_key"] for r in rows}
    for boot, key in keys.items():  # each boot's files are under its instance's ARN (IAM)
        assert key == f"reports/{sweep_id}/torch/{boot:02d}/{arn}{instance_of[boot]}/report.json"
    genuine = {
        boot: json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        for boot, key in keys.items()
    }
    # What IAM still lets an instance do: write below its own ARN anywhere under reports/. Boot
    # 2's instance and an instance of another sweep each plant a report for boot 1.
    for instance in (instance_of[2], "i-0fffffffffffffff0"):
        s3.put_object(
            Bucket=bucket,
            Key=f"reports/{sweep_id}/torch/01/{arn}{instance}/report.json",
            Body=json.dumps({"planted": instance}).encode(),
        )
    store = store_from(emu.client, emu.stack_refs())
    assert {b.boot: b.report for b in gather(store, sweep_id).boots} == genuine
    # Without rows to name the instance (Store never ran), the ledger's record decides.
    ddb = emu.client("dynamodb")
    for row in rows:
        key = {"sweep_id": {"S": sweep_id}, "row_key": {"S": row["row_key"]}}
        ddb.delete_item(TableName=emu.table("ResultsTable"), Key=key)
    assert {b.boot: b.report for b in gather(store, sweep_id).boots} == genuine
