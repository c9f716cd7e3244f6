"""Steps around the happy path, on the emulated account: bad input, budget and monthly cap,
on-demand, the reaper, idempotent launch, the spot interruption rule."""

import json
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest
from botocore.exceptions import ClientError

from functions.quota import ON_DEMAND_G_VT_QUOTA
from functions.reaper import UNTAGGED_GRACE_S, reap
from functions.settings import Clients
from rigbench.emulation import Emulation
from rigbench.stack.history import boot_executions_in_flight, fold
from rigbench.stack.models import Phase
from tests.orchestrator.conftest import (
    assert_clean,
    boot_histories,
    error_of,
    fleet_of,
    history,
    ledger_items,
    run_sweep,
    sweep_id_of,
    sweep_input,
)

pytestmark = pytest.mark.slow


def first_state_failure(emu: Emulation, described: dict[str, Any]) -> tuple[str, str]:
    """The execution failed in ValidateInput and nothing was reserved or launched."""
    assert described["status"] == "FAILED"
    history = emu.client("stepfunctions").get_execution_history(
        executionArn=described["executionArn"]
    )["events"]
    entered = [
        e["stateEnteredEventDetails"]["name"] for e in history if "stateEnteredEventDetails" in e
    ]
    assert entered == ["ValidateInput"]
    assert fleet_of(emu).launch_requests == []
    assert emu.running_instances() == []
    assert ledger_items(emu, f"SWEEP#{sweep_id_of(described)}") == {}
    error, cause = error_of(described)
    return error, json.loads(cause)["errorMessage"]


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"rigs": ["tgi"]}, "rigs: unknown rig 'tgi' (the bundle has: torch, vllm)"),
        ({"budget_usd": 0}, "budget_usd: Input should be greater than 0"),
        ({"boots_per_rig": 51}, "boots_per_rig: Input should be less than or equal to 50"),
        (
            {"instance_type": "p5.48xlarge"},
            "instance_type: instance type 'p5.48xlarge' is not allowed",
        ),
        (
            {"rig_settings": {"torch": {"max_batch": "abc"}}},
            "rig_settings: rig torch setting max_batch = 'abc' is not an int from 1 to 1024",
        ),
    ],
)
def test_bad_input_fails_in_the_first_state(
    emu: Emulation, change: dict[str, Any], words: str
) -> None:
    described = run_sweep(emu, sweep_input(**change))
    error, message = first_state_failure(emu, described)
    assert error == "InvalidInput"
    assert words in message


def test_input_that_is_not_an_object_fails_in_the_first_state(emu: Emulation) -> None:
    described = run_sweep(emu, "[1, 2]")
    error, message = first_state_failure(emu, described)
    assert error == "InvalidInput"
    assert "expected a JSON object" in message


def test_malformed_json_is_refused_before_any_state(emu: Emulation) -> None:
    sfn = emu.client("stepfunctions")
    before = sfn.list_executions(stateMachineArn=emu.state_machine_arn)["executions"]
    # AWS answers InvalidExecutionInput; moto answers 400 with the JSON error as the message.
    with pytest.raises(ClientError) as caught:
        emu.start_execution('{"rigs": ["torch"')
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert "delimiter" in caught.value.response["Error"]["Message"]
    assert sfn.list_executions(stateMachineArn=emu.state_machine_arn)["executions"] == before
    assert fleet_of(emu).launch_requests == []


def test_over_budget_fails_before_launch_saying_by_how_much(emu: Emulation) -> None:
    fleet_of(emu).price_usd_per_hour = 0.40
    body = sweep_input(
        budget_usd=0.5,
        boots_per_rig=2,
        deadlines={"ready_s": 20, "bench_s": 20, "instance_s": 3600},
    )
    described = run_sweep(emu, body)
    assert described["status"] == "FAILED"
    error, cause = error_of(described)
    assert error == "OverBudget"
    # 2 boots x $0.50/h (the $0.40 spot price with 25% headroom: MaxPrice) x (1 h + 120 s for
    # the relaunch allowed) = $1.03 against $0.50
    assert "estimate $1.03 (2 boots x $0.5000/h x (1 h deadline + 1 relaunch x 120 s))" in cause
    assert "over the sweep budget $0.50 by $0.53" in cause
    assert fleet_of(emu).launch_requests == []
    ledger = ledger_items(emu, f"SWEEP#{sweep_id_of(described)}")
    assert set(ledger) == {"OWNER"}, "the sweep id was claimed, nothing was reserved"


def test_on_demand_only_when_asked(emu: Emulation) -> None:
    fleet = fleet_of(emu)
    fleet.quotas[ON_DEMAND_G_VT_QUOTA] = 8
    described = run_sweep(emu, sweep_input(market="on-demand"))
    assert described["status"] == "SUCCEEDED", described.get("cause")
    assert [r.market for r in fleet.launch_requests] == ["on-demand"]
    sweep_id = sweep_id_of(described)
    boot = ledger_items(emu, f"SWEEP#{sweep_id}")["BOOT#torch#01"]
    assert boot["price"] == 556_000  # the on-demand list price, in micro-dollars per hour
    assert_clean(emu, sweep_id)


def test_spot_refused_does_not_fall_back_to_on_demand(emu: Emulation) -> None:
    fleet = fleet_of(emu)
    fleet.refuse_markets = {"spot": "InsufficientInstanceCapacity"}
    described = run_sweep(
        emu, sweep_input(deadlines={"ready_s": 2, "bench_s": 20, "instance_s": 600})
    )
    assert error_of(described)[0] == "CapacityUnavailable"
    assert {r.market for r in fleet.launch_requests} == {"spot"}
    assert_clean(emu, sweep_id_of(described))


def test_reaper_ends_project_instances_past_their_deadline(emu: Emulation) -> None:
    ec2 = emu.client("ec2")
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]

    def launch(project: str, deadline: float) -> str:
        tags = [
            {"Key": "rigbench:project", "Value": project},
            {"Key": "rigbench:deadline", "Value": str(int(deadline))},
        ]
        return str(
            ec2.run_instances(
                ImageId="ami-0e1a7ed0000000000",
                MinCount=1,
                MaxCount=1,
                SubnetId=subnet,
                InstanceType="g5g.2xlarge",
                TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
            )["Instances"][0]["InstanceId"]
        )

    overdue = launch(emu.stack_name, time.time() - 60)  # a protected one is ended all the same
    ec2.modify_instance_attribute(InstanceId=overdue, DisableApiTermination={"Value": True})
    in_time = launch(emu.stack_name, time.time() + 3600)
    not_ours = launch("someone-else", time.time() - 60)
    try:
        assert emu.run_scheduled("ReaperFunction") == {"reaped": [overdue], "released_sweeps": []}
        assert set(emu.running_instances()) == {in_time, not_ours}
    finally:
        ec2.terminate_instances(InstanceIds=[in_time, not_ours])


def test_launch_is_idempotent_per_sweep_rig_and_boot(emu: Emulation) -> None:
    described = run_sweep(emu, sweep_input())
    assert described["status"] == "SUCCEEDED"
    (boot,) = boot_histories(emu, described["executionArn"]).values()
    launches = [
        json.loads(e["taskScheduledEventDetails"]["parameters"])
        for e in boot
        if e["type"] == "TaskScheduled"
        and "LaunchFunction" in e["taskScheduledEventDetails"]["parameters"]
    ]
    assert len(launches) == 1
    payload = json.dumps(launches[0]["Payload"]).encode()
    before = set(fleet_of(emu).instances)
    lam = emu.client("lambda")
    replies = [
        json.loads(
            lam.invoke(FunctionName=emu.physical["LaunchFunction"], Payload=payload)[
                "Payload"
            ].read()
        )
        for _ in range(2)
    ]
    assert set(fleet_of(emu).instances) == before, "a retried launch started another instance"
    assert replies[0] == replies[1]  # the Instance itself: ResultPath places it
    assert replies[0]["instance_id"] in before


def test_launch_encrypts_the_root_volume_whatever_the_account_default(emu: Emulation) -> None:
    described = run_sweep(emu, sweep_input())
    assert described["status"] == "SUCCEEDED"
    volumes = emu.client("ec2").describe_volumes(
        Filters=[{"Name": "tag:rigbench:sweep", "Values": [sweep_id_of(described)]}]
    )["Volumes"]
    assert volumes
    assert all(v["Encrypted"] for v in volumes)


def test_interruption_warning_for_someone_elses_instance_is_ignored(emu: Emulation) -> None:
    ec2 = emu.client("ec2")
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    instance = ec2.run_instances(
        ImageId="ami-0e1a7ed0000000000", MinCount=1, MaxCount=1, SubnetId=subnet
    )["Instances"][0]["InstanceId"]
    try:
        assert emu.interrupt_spot(instance) == [{"recorded": False}]
        assert ledger_items(emu, f"INSTANCE#{instance}") == {}
    finally:
        ec2.terminate_instances(InstanceIds=[instance])


def test_an_aborted_sweep_is_cleaned_up_by_its_status_change_handler(emu: Emulation) -> None:
    fleet = fleet_of(emu)
    fleet.bench = "running"
    fleet.quotas["L-3819A6DF"] = 8  # one boot at a time: the second never launches
    body = sweep_input(
        rigs=["torch", "vllm"], waits={"agent_poll_s": 0, "ready_poll_s": 0, "command_poll_s": 1}
    )
    arn = emu.start_execution(body)
    assert fleet.bench_started.wait(60)
    (running,) = emu.running_instances()
    emu.client("stepfunctions").stop_execution(executionArn=arn, error="UserAborted")
    # AWS says ABORTED; moto's parser ends a stopped Map as FAILED. Either way no Finish ran.
    assert emu.wait(arn, 30)["status"] in ("ABORTED", "FAILED")
    (ended,) = emu.seams.status_changes.wait(arn)
    sweep_id = arn.rsplit(":", 1)[1]
    assert ended["sweep_id"] == sweep_id
    assert ended["terminated"] == [running]
    assert_clean(emu, sweep_id)
    boots = ledger_items(emu, f"SWEEP#{sweep_id}")
    assert boots["BOOT#vllm#01"]["spent"] == 0  # never launched: its reservation is released
    assert boots["BOOT#torch#01"]["seconds"] > 0
    # Nothing left for the reaper.
    assert emu.run_scheduled("ReaperFunction") == {"reaped": [], "released_sweeps": []}


def test_a_sweep_id_belongs_to_one_execution(emu: Emulation) -> None:
    first = run_sweep(emu, sweep_input(sweep_id="nightly"))
    assert first["status"] == "SUCCEEDED", first.get("cause")
    spent = ledger_items(emu, "SWEEP#nightly")["TOTAL"]
    second = run_sweep(emu, sweep_input(sweep_id="nightly"))
    assert second["status"] == "FAILED"
    error, cause = error_of(second)
    assert error == "InvalidInput"
    assert "'nightly' already belongs to" in cause
    assert first["executionArn"] in cause
    assert len(fleet_of(emu).instances) == 1, "the second execution launched nothing"
    assert ledger_items(emu, "SWEEP#nightly")["TOTAL"] == spent, "nor reserved anything"


def test_execution_names_that_normalise_alike_do_not_share_a_sweep(emu: Emulation) -> None:
    first = emu.wait(emu.start_execution(sweep_input(), name="Nightly_Run"), 90)
    assert first["status"] == "SUCCEEDED", first.get("cause")
    second = emu.wait(emu.start_execution(sweep_input(), name="nightly-run"), 90)
    assert second["status"] == "FAILED"
    assert "'nightly-run' already belongs to" in error_of(second)[1]


def test_one_instance_the_reaper_cannot_end_does_not_stop_it(emu: Emulation) -> None:
    ec2 = emu.client("ec2")
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    tags = [
        {"Key": "rigbench:project", "Value": emu.stack_name},
        {"Key": "rigbench:deadline", "Value": str(int(time.time() - 60))},
    ]
    stuck, overdue = (
        ec2.run_instances(
            ImageId="ami-0e1a7ed0000000000", MinCount=1, MaxCount=1, SubnetId=subnet,
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
        )["Instances"][0]["InstanceId"]
        for _ in range(2)
    )  # fmt: skip
    emu.faults.unterminable.add(stuck)
    try:
        reply = emu.run_scheduled("ReaperFunction")
        assert reply["errorType"] == "ReaperFailed"
        assert f"{stuck}: OperationNotPermitted" in reply["errorMessage"]
        assert overdue in reply["errorMessage"]  # reported as reaped
        assert emu.running_instances() == [stuck]
    finally:
        emu.faults.unterminable.clear()
        ec2.terminate_instances(InstanceIds=[stuck])


def _tagged_instance(emu: Emulation, tags: dict[str, str]) -> str:
    ec2 = emu.client("ec2")
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    pairs = [{"Key": k, "Value": v} for k, v in tags.items()]
    return str(
        ec2.run_instances(
            ImageId="ami-0e1a7ed0000000000", MinCount=1, MaxCount=1, SubnetId=subnet,
            InstanceType="g5g.2xlarge",
            TagSpecifications=[{"ResourceType": "instance", "Tags": pairs}],
        )["Instances"][0]["InstanceId"]
    )  # fmt: skip


def test_a_malformed_item_does_not_stop_the_reaper(emu: Emulation) -> None:
    """A malformed tag and a malformed ledger item come first; the two overdue instances after
    them are ended and billed all the same, and both bad items are reported by name."""
    project, past = emu.stack_name, str(int(time.time() - 60))
    bad = _tagged_instance(emu, {"rigbench:project": project, "rigbench:deadline": "tomorrow"})
    ddb, table = emu.client("dynamodb"), emu.table("LedgerTable")
    gone = emu.physical["SweepStateMachine"].replace(":stateMachine:", ":execution:") + ":gone"
    ddb.put_item(
        TableName=table,
        Item={"pk": {"S": "SWEEP#gone"}, "sk": {"S": "OWNER"}, "execution_arn": {"S": gone}},
    )
    ddb.put_item(
        TableName=table,
        Item={
            "pk": {"S": "SWEEP#gone"},
            "sk": {"S": "TOTAL"},
            "open": {"S": "1"},
            "created_at": {"S": "2026-12-01T00:00:00+00:00"},
        },
    )
    ddb.put_item(
        TableName=table,
        Item={"pk": {"S": "SWEEP#gone"}, "sk": {"S": "BOOT#torch#x"}, "status": {"S": "reserved"}},
    )
    month = time.strftime("%Y-%m", time.gmtime())
    before = ledger_items(emu, f"MONTH#{month}").get("TOTAL", {}).get("committed", 0)
    overdue = [_tagged_instance(emu, {"rigbench:project": project, "rigbench:deadline": past})]
    overdue.append(_tagged_instance(emu, {"rigbench:project": project, "rigbench:deadline": past}))
    try:
        reply = emu.run_scheduled("ReaperFunction")
        assert reply["errorType"] == "ReaperFailed"
        message = reply["errorMessage"]
        assert f"{bad}: MalformedItem: instance {bad}: tag rigbench:deadline is 'tomorrow'" in (
            message
        )
        assert "sweep gone item 'BOOT#torch#x': MalformedItem: not BOOT#<rig>#<n>" in message
        assert all(instance in message for instance in overdue)  # reported as reaped
        assert emu.running_instances() == [bad]
        strays = [ledger_items(emu, f"INSTANCE#{i}")["STRAY"] for i in overdue]
        assert all(stray["seconds"] > 0 and stray["spent"] > 0 for stray in strays)
        after = ledger_items(emu, f"MONTH#{month}")["TOTAL"]["committed"]
        assert after - before == sum(stray["spent"] for stray in strays)
        # The sweep with a bad boot item stays open: the next pass reports it again.
        assert ledger_items(emu, "SWEEP#gone")["TOTAL"]["open"] == "1"
    finally:
        emu.client("ec2").terminate_instances(InstanceIds=[bad])
        for sk in ("OWNER", "TOTAL", "BOOT#torch#x"):
            ddb.delete_item(TableName=table, Key={"pk": {"S": "SWEEP#gone"}, "sk": {"S": sk}})


def test_an_instance_without_a_deadline_tag_is_ended_only_if_the_stack_launched_it(
    emu: Emulation,
) -> None:
    project = emu.stack_name
    launch_tags = {
        "rigbench:project": project, "rigbench:sweep": "lost", "rigbench:rig": "torch",
        "rigbench:boot": "1",
    }  # fmt: skip
    ours = _tagged_instance(emu, launch_tags)
    foreign = _tagged_instance(emu, {"rigbench:project": project})
    clients = cast(
        Clients,
        SimpleNamespace(ec2=emu.client("ec2"), dynamodb=emu.client("dynamodb"),
                        stepfunctions=emu.client("stepfunctions")),
    )  # fmt: skip
    table, region = emu.table("LedgerTable"), emu.region
    try:
        within_grace = reap(clients, project, table, time.time() + 60, region=region)
        assert within_grace.instances == []
        after_grace = time.time() + UNTAGGED_GRACE_S + 60
        reaped = reap(clients, project, table, after_grace, region=region)
        assert reaped.instances == [ours]
        assert reaped.failures == []
        assert emu.running_instances() == [foreign]
    finally:
        emu.client("ec2").terminate_instances(InstanceIds=[ours, foreign])


def test_each_instance_gets_a_server_side_deadline(emu: Emulation) -> None:
    described = run_sweep(emu, sweep_input())
    assert described["status"] == "SUCCEEDED", described.get("cause")
    (instance_id,) = fleet_of(emu).instances
    tags = fleet_of(emu).instances[instance_id].tags
    schedule = emu.client("scheduler").get_schedule(Name=f"rigbench-deadline-{instance_id}")
    deadline = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(tags["rigbench:deadline"])))
    assert schedule["ScheduleExpression"] == f"at({deadline})"
    assert schedule["Target"]["Arn"] == "arn:aws:scheduler:::aws-sdk:ec2:terminateInstances"
    assert json.loads(schedule["Target"]["Input"]) == {"InstanceIds": [instance_id]}
    assert schedule["Target"]["RoleArn"].endswith(f":role/{emu.physical['DeadlineSchedulerRole']}")


def test_a_boot_s_progress_is_read_from_its_own_execution_while_it_runs(emu: Emulation) -> None:
    fleet = fleet_of(emu)
    fleet.bench = "running"
    arn = emu.start_execution(sweep_input(waits={**sweep_input()["waits"], "command_poll_s": 1}))
    assert fleet.bench_started.wait(60)
    events = history(emu, arn)
    (boot_arn,) = boot_executions_in_flight(events)
    assert boot_arn.endswith(f":{sweep_id_of({'executionArn': arn})}-torch-1")
    # the sweep's own history knows only that the boot's execution was started
    assert fold(events, execution_arn=arn).boots[0].phase == Phase.LAUNCHING
    running = fold(events, execution_arn=arn, boot_events={boot_arn: history(emu, boot_arn)})
    (boot,) = running.boots
    assert (boot.rig, boot.boot, boot.phase) == ("torch", 1, Phase.BENCHMARKING)
    assert boot.instance_id in fleet.alive
    fleet.bench = "success"
    described = emu.wait(arn, 90)
    assert described["status"] == "SUCCEEDED"
    events = history(emu, arn)
    assert boot_executions_in_flight(events) == []
    # once it ended, the boot's outcome is in the sweep's history
    (ended,) = fold(events, execution_arn=arn, described=described).boots
    assert (ended.phase, ended.outcome, ended.instance_id) == (
        Phase.TERMINATED, "succeeded", boot.instance_id,
    )  # fmt: skip
    assert_clean(emu, sweep_id_of(described))
