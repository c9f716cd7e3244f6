"""`rigbench stop --local`: a local sweep runs in the process that started it; stop, from
another process, asks that process to stop it. The execution ends, every local instance ends,
every boot is billed to when its instance ended, and the status says who stopped it."""

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from rigbench.commands.stop import who
from rigbench.local.emulated import EmulatedAccount
from rigbench.local.home import LocalHome
from rigbench.stack import StackError, SweepProgress, parse_sweep
from rigbench.stack import local as local_stack
from rigbench.stack.local import LocalStack
from tests.local.conftest import REPO, http_rig, local_env, processes_under, sweep_input, wait_for

pytestmark = pytest.mark.slow


def stop_cli(home: LocalHome, sweep_id: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rigbench", "stop", "--local", sweep_id, "--home", str(home.root)],
        cwd=REPO, env=local_env(home.root), capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def ledger(stack: LocalStack, sweep_id: str) -> dict[str, dict[str, Any]]:
    items = stack.client("dynamodb").query(
        TableName=stack.refs.ledger_table,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": f"SWEEP#{sweep_id}"}},
        ConsistentRead=True,
    )["Items"]
    return {i["sk"]["S"]: i for i in items}


def test_stop_from_another_process_ends_the_sweep_and_bills_every_boot(
    home: LocalHome, tmp_path: Path
) -> None:
    # A rig that serves HTTP but never a completion: the boot waits for readiness until stopped.
    body = sweep_input(deadlines={"ready_s": 300, "bench_s": 60, "instance_s": 900})
    with LocalStack(home, EmulatedAccount.from_env(quota_vcpus=8), rig_command=http_rig) as stack:
        stack.follow_poll_s = 0.5
        started = stack.start_sweep(parse_sweep(body))
        fleet = stack.session.fleet
        wait_for(fleet.online_instances, timeout=120, what="the boot's instance online")
        followed: list[SweepProgress] = []
        follower = threading.Thread(
            target=lambda: followed.append(stack.follow_sweep(started.execution_arn)), daemon=True
        )
        follower.start()

        stopped = stop_cli(home, started.sweep_id)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert f"stopped by {who()}" in " ".join(stopped.stdout.split())
        follower.join(120)
        (progress,) = followed
        assert progress.status == "ABORTED"
        assert progress.error == "StoppedByUser"
        assert f"stopped by {who()}" in progress.cause

        emu = stack.session.emu
        (ended,) = emu.seams.status_changes.wait(started.execution_arn)
        assert ended["terminated"] == [i.instance_id for i in fleet.instances()]
        assert emu.running_instances() == []
        assert all(i.terminated for i in fleet.instances())
        items = ledger(stack, started.sweep_id)
        boot = items["BOOT#torch#01"]
        assert boot["status"]["S"] == "reconciled"
        assert float(boot["seconds"]["N"]) > 0  # billed to when the instance ended
        assert int(boot["spent"]["N"]) > 0
        assert items["TOTAL"]["reserved"]["N"] == "0"
        assert items["TOTAL"]["spent"]["N"] == boot["spent"]["N"]

        with pytest.raises(StackError, match="is not running: it ended ABORTED"):
            stack.stop_sweep(started.sweep_id, "again")
    assert processes_under(tmp_path) == []
    # Saved as stopped, for `rigbench status --local` later.
    with LocalStack(home, keep_results=False) as later:
        saved = later.describe_sweep(started.sweep_id)
    assert saved.status == "ABORTED"
    assert f"stopped by {who()}" in saved.cause


def test_stop_of_a_sweep_no_process_runs_says_so(
    home: LocalHome, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local_stack, "STOP_REQUEST_TIMEOUT_S", 0.5)
    with LocalStack(home, keep_results=False) as stack, pytest.raises(StackError) as refused:
        stack.stop_sweep("local-nothing-here", "tester")
    assert "no running local sweep 'local-nothing-here' took the stop request" in str(refused.value)
    assert not home.stop_request("local-nothing-here").exists(), "the request is withdrawn"
