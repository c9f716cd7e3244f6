"""moto's EC2 and SSM, routed through the local fleet: launches boot processes, SSM is real."""

import time
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from rigbench.local.fleet import LocalFleet
from rigbench.local.procs import group_alive
from rigbench.local.seams import local_fleet_seams
from tests.local.conftest import wait_for


def _launch(ec2: Any, rig: str | None) -> str:
    tags = [{"Key": "rigbench:sweep", "Value": "s1"}]
    if rig:
        tags.append({"Key": "rigbench:rig", "Value": rig})
    out = ec2.run_instances(
        ImageId="ami-12345678", InstanceType="g5g.2xlarge", MinCount=1, MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
    )  # fmt: skip
    return str(out["Instances"][0]["InstanceId"])


def _online(ssm: Any, instance_id: str | None = None) -> list[str]:
    filters = [{"Key": "InstanceIds", "Values": [instance_id]}] if instance_id else []
    info = ssm.describe_instance_information(Filters=filters)["InstanceInformationList"]
    assert all(i["PingStatus"] == "Online" for i in info)
    return [i["InstanceId"] for i in info]


def _run(ssm: Any, instance_id: str, commands: list[str]) -> dict[str, Any]:
    command_id = ssm.send_command(
        InstanceIds=[instance_id], DocumentName="AWS-RunShellScript",
        Parameters={"commands": commands, "executionTimeout": ["60"]},
    )["Command"]["CommandId"]  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        inv: dict[str, Any] = ssm.get_command_invocation(
            CommandId=command_id, InstanceId=instance_id
        )
        if inv["Status"] not in ("Pending", "InProgress"):
            return inv
        time.sleep(0.1)
    raise AssertionError("command never finished")


def test_launch_command_terminate_through_boto3(fleet: LocalFleet) -> None:
    models: list[dict[str, str]] = []

    def model_for(tags: dict[str, str]) -> str:
        models.append(tags)
        return "random:tiny"

    with mock_aws(), local_fleet_seams(fleet, model_for):
        ec2 = boto3.client("ec2", region_name="us-east-1")
        ssm = boto3.client("ssm", region_name="us-east-1")
        plain = _launch(ec2, None)  # not a rig instance: no local process
        iid = _launch(ec2, "torch")
        assert models == [{"rigbench:sweep": "s1", "rigbench:rig": "torch"}]
        assert _online(ssm) == [iid]
        assert _online(ssm, plain) == []
        instance = fleet.get(iid)
        assert (instance.rig, instance.model) == ("torch", "random:tiny")

        inv = _run(ssm, iid, ['echo "$RIGBENCH_URL"', "cat /var/lib/rigbench/status.json"])
        assert inv["Status"] == "Success", inv
        assert inv["ResponseCode"] == 0
        url, status = inv["StandardOutputContent"].splitlines()
        assert url == f"http://127.0.0.1:{instance.port}"
        assert '"phase": "starting"' in status
        failed = _run(ssm, iid, ["echo nope >&2", "exit 7"])
        assert (failed["Status"], failed["ResponseCode"]) == ("Failed", 7)
        assert failed["StandardErrorContent"] == "nope\n"

        ec2.terminate_instances(InstanceIds=[iid])
        assert not group_alive(instance.rig_pgid)
        assert _online(ssm) == []
        with pytest.raises(ClientError, match="InvalidInstanceId"):
            ssm.send_command(
                InstanceIds=[iid], DocumentName="AWS-RunShellScript",
                Parameters={"commands": ["true"]},
            )  # fmt: skip


def test_a_rig_that_dies_reports_failed_in_status(
    fleet: LocalFleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    crashing = LocalFleet(
        fleet._home,
        fleet._groups,
        lambda rig, model, port: ["python3", "-c", "import sys; print('no GPU here'); sys.exit(4)"],
    )
    with mock_aws(), local_fleet_seams(crashing, lambda tags: "random:tiny"):
        ec2 = boto3.client("ec2", region_name="us-east-1")
        ssm = boto3.client("ssm", region_name="us-east-1")
        iid = _launch(ec2, "torch")
        workspace = crashing.get(iid).workspace
        wait_for(lambda: '"failed"' in (workspace / "status.json").read_text())
        assert "exited with code 4: no GPU here" in (workspace / "status.json").read_text()
        assert _online(ssm) == [iid]  # the agent of a failed rig's instance is still online
        ec2.terminate_instances(InstanceIds=[iid])
        assert _online(ssm) == []
