"""The local fleet: instance commands run in workspaces, report like SSM, and die on terminate."""

import json
import os
import sys
import time
from pathlib import Path

import pytest

from functions.boot_plan import plan_for
from functions.bootstrap import InstancePlan, user_data
from functions.execution_input import parse_sweep_input
from functions.instance_commands import probe_commands
from functions.settings import RIG_TAG
from hardware.instance_types import get_instance_type
from hardware.local_host import gpu_count
from rigbench.emulation.fleet import CommandNotDelivered, LaunchedInstance, LaunchRequest
from rigbench.local.emulated import EmulatedAccount
from rigbench.local.fleet import STDOUT_LIMIT, LocalFleet, UnknownInstanceError, write_status
from rigbench.local.procs import group_alive
from rigbench.local.session import rig_serve_command
from rigs.bootstrap.user_data import BootstrapSpec
from tests.local.conftest import http_rig, wait_for

BUNDLE_KEY = f"bundle/{'ab' * 32}.tar.gz"  # bundle/<sha256>.tar.gz, as rigbench.bundle keys it
INSTANCE = InstancePlan(
    "torch",
    "random:tiny",
    "bucket-x",
    BUNDLE_KEY,
    "us-east-1",
    "",
    2_000_000_000,
)
TORCH = BootstrapSpec(
    rig="torch",
    model="random:tiny",
    deadline_epoch=2_000_000_000,
    bundle_s3_uri="s3://bucket-x/bundle/abababababababababababababababababababababababababababababababab.tar.gz",
    region="us-east-1",
)

PROBE = (
    'python3 -c "import os, urllib.request as u; '
    "print(u.urlopen(os.environ['RIGBENCH_URL']).status)\""
)


def _done(fleet: LocalFleet, command_id: str, instance_id: str) -> str:
    def finished() -> bool:
        return fleet.invocation(command_id, instance_id).Status not in ("Pending", "InProgress")

    wait_for(finished, what=f"command {command_id}")
    return fleet.invocation(command_id, instance_id).Status


def _online(fleet: LocalFleet, instance_id: str) -> None:
    instance = fleet.launch(instance_id, TORCH)
    assert fleet.agent_online(instance_id)
    assert instance.port != 8000
    # The stand-in rig is up once it answers on its port.
    fleet.send_command(
        "probe0",
        instance_id,
        [f"for i in $(seq 100); do {PROBE} && exit 0; sleep 0.1; done; exit 1"],
        30,
    )
    assert _done(fleet, "probe0", instance_id) == "Success"


@pytest.mark.slow
def test_command_reaches_its_rig_and_writes_in_its_workspace(fleet: LocalFleet) -> None:
    _online(fleet, "i-0aaa")
    _online(fleet, "i-0bbb")
    fleet.send_command(
        "c1",
        "i-0aaa",
        [
            "set -e",
            PROBE,
            'echo \'{"phase": "ready"}\' > "$RIGBENCH_STATUS_FILE"',
            'echo "home=$RIGBENCH_HOME"',
        ],
        30,
    )
    assert _done(fleet, "c1", "i-0aaa") == "Success"
    inv = fleet.invocation("c1", "i-0aaa")
    workspace = fleet.get("i-0aaa").workspace
    assert inv.ResponseCode == 0
    assert inv.StandardOutputContent.splitlines() == ["200", f"home={workspace}"]
    assert (workspace / "status.json").read_text().strip() == '{"phase": "ready"}'
    assert '"phase": "serving"' in (fleet.get("i-0bbb").workspace / "status.json").read_text()
    assert fleet.get("i-0aaa").port != fleet.get("i-0bbb").port
    assert sorted(fleet.online_instances()) == ["i-0aaa", "i-0bbb"]


@pytest.mark.slow
def test_failure_and_output_limits_are_reported_as_ssm_does(fleet: LocalFleet) -> None:
    _online(fleet, "i-0ccc")
    fleet.send_command("bad", "i-0ccc", ["echo oops >&2", "exit 3"], 30)
    assert _done(fleet, "bad", "i-0ccc") == "Failed"
    inv = fleet.invocation("bad", "i-0ccc")
    assert (inv.ResponseCode, inv.StandardErrorContent) == (3, "oops\n")
    fleet.send_command("big", "i-0ccc", ["python3 -c \"print('x' * 100000)\""], 30)
    assert _done(fleet, "big", "i-0ccc") == "Success"
    assert len(fleet.invocation("big", "i-0ccc").StandardOutputContent) == STDOUT_LIMIT


@pytest.mark.slow
def test_timed_out_command_is_killed(fleet: LocalFleet, tmp_path: Path) -> None:
    _online(fleet, "i-0ddd")
    fleet.send_command("slow", "i-0ddd", ["sleep 600"], 0.5)
    assert _done(fleet, "slow", "i-0ddd") == "TimedOut"
    assert fleet.invocation("slow", "i-0ddd").StatusDetails == "ExecutionTimedOut"


@pytest.mark.slow
def test_terminate_ends_rig_and_running_commands(fleet: LocalFleet) -> None:
    _online(fleet, "i-0eee")
    rig_pgid = fleet.get("i-0eee").rig_pgid
    fleet.send_command("long", "i-0eee", ["sleep 600 & sleep 600"], 600)
    wait_for(lambda: fleet.invocation("long", "i-0eee").Status == "InProgress")
    assert fleet.terminate("i-0eee")
    assert not group_alive(rig_pgid)
    assert not fleet.agent_online("i-0eee")
    assert _done(fleet, "long", "i-0eee") == "Failed"
    assert fleet.invocation("long", "i-0eee").StatusDetails == "Terminated"
    assert not fleet.terminate("i-0eee")  # already gone: a second terminate is a no-op
    with pytest.raises(UnknownInstanceError, match="not online"):
        fleet.run_command("late", "i-0eee", ["true"], 5)
    fleet.send_command("late", "i-0eee", ["true"], 5)  # as SSM: never delivered
    with pytest.raises(CommandNotDelivered):
        fleet.command_result("late", "i-0eee")


@pytest.mark.slow
def test_instance_paths_point_at_the_workspace(fleet: LocalFleet) -> None:
    _online(fleet, "i-0fff")
    script = [
        'cd "$RIGBENCH_HOME/bundle"',
        '"$RIGBENCH_PYTHON" -c "import rigbench, sys; print(sys.executable)"',
        'cat "$RIGBENCH_STATUS_FILE"',
    ]
    fleet.send_command("paths", "i-0fff", script, 30)
    assert _done(fleet, "paths", "i-0fff") == "Success", fleet.invocation("paths", "i-0fff")
    python, status = fleet.invocation("paths", "i-0fff").StandardOutputContent.splitlines()
    assert python == sys.executable
    assert json.loads(status)["phase"] == "serving"
    # The readiness probe the state machine sends, as an instance gets it, word for word: it
    # reads this workspace's status file (a failed install here) from the environment.
    write_status(fleet.get("i-0fff").workspace, "failed", step="gpu", error="no GPU here")
    fleet.send_command("ready", "i-0fff", probe_commands(INSTANCE), 60)
    assert _done(fleet, "ready", "i-0fff") == "Failed"
    invocation = fleet.invocation("ready", "i-0fff")
    assert (fleet.get("i-0fff").workspace / "commands" / "ready" / "script.sh").read_text() == (
        "\n".join(probe_commands(INSTANCE)) + "\n"
    )
    assert invocation.ResponseCode == 3, invocation
    state = json.loads(invocation.StandardOutputContent.splitlines()[-1])
    assert state["detail"] == "install failed at gpu: no GPU here"


@pytest.mark.slow
def test_a_rig_that_dies_is_a_failed_install_and_the_agent_stays_online(
    fleet: LocalFleet,
) -> None:
    crashing = LocalFleet(
        fleet._home,
        fleet._groups,
        lambda spec, port: [
            sys.executable, "-c",
            "import sys; print('loading'); print('no GPU here: ' + 'x' * 2000 + ' the end'); "
            "sys.exit(4)",
        ],
    )  # fmt: skip
    instance = crashing.launch("i-0dead", TORCH)
    status_file = instance.workspace / "status.json"
    wait_for(lambda: json.loads(status_file.read_text())["phase"] == "failed")
    status = json.loads(status_file.read_text())
    # a last line too long for the bound keeps its end (it once left "no output")
    assert status["error"].startswith("rig torch exited with code 4: the end of its log:\n…")
    assert status["error"].endswith("x" * 100 + " the end")
    assert len(status["error"]) < 1600
    assert crashing.agent_online("i-0dead")  # SSM can still reach it to read that
    assert crashing.terminate("i-0dead")
    assert not crashing.agent_online("i-0dead")


@pytest.mark.slow
def test_a_command_runs_once_per_instance_however_often_it_is_sent(fleet: LocalFleet) -> None:
    _online(fleet, "i-0111")
    for _ in range(3):
        fleet.send_command("once", "i-0111", ['echo run >> "$RIGBENCH_HOME/runs.txt"'], 30)
    assert _done(fleet, "once", "i-0111") == "Success"
    time.sleep(0.3)
    assert (fleet.get("i-0111").workspace / "runs.txt").read_text() == "run\n"


@pytest.mark.slow
def test_a_launched_instance_serves_the_plan_its_user_data_carries(fleet: LocalFleet) -> None:
    """As an instance's unit serves its user data's plan, the local fleet serves the plan the
    launch put into the user data: the entry's rig, model, dtype and every setting."""
    sweep = parse_sweep_input(
        {
            "rigs": ["torch@serial"],
            "model": "random:tiny",
            "budget_usd": 1,
            "rig_settings": {"torch@serial": {"batching": "serial", "batch_gap_ms": 3}},
        }
    )
    plan = plan_for(sweep, "torch@serial", get_instance_type("g4dn.xlarge"))
    text = user_data(
        InstancePlan(
            rig="torch@serial", model="random:tiny", bucket="bucket-x",
            bundle_key=BUNDLE_KEY, region="us-east-1", token_secret_arn="",
            deadline_epoch=2_000_000_000, boot=plan,
        )
    )  # fmt: skip
    seen: list[BootstrapSpec] = []

    def recording(spec: BootstrapSpec, port: int) -> list[str]:
        seen.append(spec)
        return http_rig(spec, port)

    local = LocalFleet(fleet._home, fleet._groups, recording)
    try:
        local.launched(
            LaunchedInstance(
                instance_id="i-0plan",
                instance_type="g4dn.xlarge",
                availability_zone="us-east-1a",
                market="spot",
                user_data=text,
                tags={RIG_TAG: "torch@serial"},
            )
        )
    finally:
        local.close()
    [spec] = seen
    assert (spec.rig, spec.model, spec.dtype, spec.settings) == (
        "torch@serial", "random:tiny", "float16", plan.settings
    )  # fmt: skip
    assert plan.settings["batching"] == "serial"
    assert plan.settings["batch_gap_ms"] == 3
    argv = rig_serve_command(spec, 8123)
    assert argv[:6] == [sys.executable, "-m", "rigbench", "rig", "serve", "torch@serial"]
    assert "--dtype float16" in " ".join(argv)
    assert "--set batching=serial" in " ".join(argv)
    assert "--port 8123 --host 127.0.0.1" in " ".join(argv)


@pytest.mark.slow
def test_one_instance_per_gpu(
    fleet: LocalFleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a machine with two GPUs (nvidia-smi, as the driver's tool answers) two instances
    hold one each, a third launch is refused as an AZ without capacity refuses it, and an
    instance that ends frees its GPU."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "nvidia-smi").write_text("#!/bin/sh\nprintf '0\\n1\\n'\n")
    (tools / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:{os.environ['PATH']}")
    gpu_count.cache_clear()
    request = LaunchRequest("g5g.2xlarge", "subnet-1", "us-east-1a", "spot")
    try:
        assert EmulatedAccount().quota_vcpus == 16
        held = []
        for instance_id in ("i-0gpu0", "i-0gpu1"):
            assert fleet.capacity_error(request) is None
            held.append(fleet.launch(instance_id, TORCH))
        assert [i.gpu for i in held] == [0, 1]
        assert fleet.capacity_error(request) == "InsufficientInstanceCapacity"
        for instance in held:
            fleet.send_command("gpu", instance.instance_id, ["echo $CUDA_VISIBLE_DEVICES"], 30)
            assert _done(fleet, "gpu", instance.instance_id) == "Success"
            output = fleet.invocation("gpu", instance.instance_id).StandardOutputContent
            assert output.strip() == str(instance.gpu)
        assert fleet.terminate("i-0gpu0")
        assert fleet.capacity_error(request) is None
        assert fleet.launch("i-0gpu2", TORCH).gpu == 0
    finally:
        gpu_count.cache_clear()
