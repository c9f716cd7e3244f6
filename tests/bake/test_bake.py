"""The bake state machine on the emulated account (real definition, real handlers, moto):
it ends with the builder terminated on every path, and spends within its rules."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from functions.bake_steps import BAKE_BOOT, STATUS_FILE, BakeInput
from functions.tables import ledger
from rigbench.bake_emulation import BakeRun, BuildFleet, emulated_bake
from rigbench.emulation import Emulation, Faults
from tests.orchestrator.scripted_fleet import ScriptedFleet

BODY: dict[str, Any] = {
    "rig": "vllm",
    "arch": "aarch64",
    "target_instance_type": "g5g.2xlarge",
    "budget_usd": 5,
    "waits": {"build_poll_s": 0, "image_poll_s": 0},
}


@pytest.fixture(scope="module")
def bundle_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bundle")
    for rig in ("torch", "vllm"):
        (root / "rigs" / rig).mkdir(parents=True)
        (root / "rigs" / rig / "rig.toml").write_text(f'name = "{rig}"\n')
    return root


@pytest.mark.slow
def test_dry_run_bakes_records_and_terminates(bundle_root: Path) -> None:
    fleet = BuildFleet(build_checks=2)
    run = emulated_bake(BODY, fleet, bundle_root=bundle_root, baked_images=False)
    assert run.status == "SUCCEEDED", run.error
    assert run.plan is not None
    assert (run.plan.builder_type, run.plan.arch) == ("c7g.4xlarge", "aarch64")
    assert run.plan.estimate_usd == pytest.approx(0.58 * 6)
    assert run.states.count("CheckBuild") == 3  # the first only sends the status command
    assert run.states[-2:] == ["TerminateBuilder", "BakeSucceeded"]
    assert run.recorded is not None
    assert run.recorded.startswith("ami-")
    # One builder, launched as the plan says, ended; none left running.
    (builder,) = fleet.launched_instances
    assert builder.instance_type == "c7g.4xlarge"
    assert builder.market == "on-demand"
    assert builder.tags["rigbench:bake"] == "aarch64"
    assert run.output["finished"]["terminated"] == [builder.instance_id]
    assert fleet.alive == set()
    assert run.builders_alive == []
    assert_settled_as_a_one_boot_sweep(run)
    # The builder's user data installs in bake mode and verifies the kernels for the target.
    assert "RIGBENCH_BAKE=1 bash" in builder.user_data
    assert "rig check vllm --instance-type g5g.2xlarge" in builder.user_data
    assert 'export TORCH_CUDA_ARCH_LIST="7.5"' in builder.user_data
    assert STATUS_FILE in builder.user_data


def assert_settled_as_a_one_boot_sweep(run: BakeRun) -> None:
    assert run.plan is not None
    assert_settled(run.ledger, run.plan.bake_id, run.plan.rig)


def assert_settled(items: dict[tuple[str, str], dict[str, Any]], bake_id: str, rig: str) -> None:
    """The bake's ledger rows are a one-boot sweep's, settled by the sweep's own code: the
    reservation replaced by the builder's bill in the boot, the bake and the month alike."""
    bake = ledger.sweep_pk(bake_id)
    boot = items[(bake, ledger.boot_sk(rig, BAKE_BOOT))]
    total = items[(bake, ledger.TOTAL)]
    assert boot["status"]["S"] == "reconciled"
    spent = int(boot["spent"]["N"])
    assert spent > 0
    assert int(total["reserved"]["N"]) == 0
    assert int(total["spent"]["N"]) == spent
    assert "open" not in total  # closed: the reaper has nothing left to settle
    month = items[(ledger.month_pk(boot["month"]["S"]), ledger.TOTAL)]
    assert int(month["committed"]["N"]) == spent
    assert items[(bake, "OWNER")]["execution_arn"] == total["execution_arn"]


@pytest.mark.parametrize(
    ("fleet", "faults", "failed_in"),
    [
        # The build fails (e.g. the kernel check refused the install): no image, terminated.
        (BuildFleet(build="failed"), Faults(), "CheckBuild"),
        # A step after launch fails: its Catch reaches the terminate state.
        (BuildFleet(), Faults(lambdas={"BakeImageFunction": ["raise"]}), "CreateImage"),
        (BuildFleet(), Faults(lambdas={"BakeRecordFunction": ["raise"]}), "RecordImage"),
    ],
    ids=["build-failed", "image-step-failed", "record-step-failed"],
)
@pytest.mark.slow
def test_every_failure_after_launch_terminates_the_builder(
    bundle_root: Path, fleet: BuildFleet, faults: Faults, failed_in: str
) -> None:
    run = emulated_bake(BODY, fleet, bundle_root=bundle_root, faults=faults, baked_images=False)
    assert run.status == "FAILED"
    assert failed_in in run.states
    assert run.states[-2:] == ["TerminateAfterFailure", "BakeFailed"]
    assert len(fleet.launched_instances) == 1
    assert fleet.alive == set()
    assert run.builders_alive == []
    assert run.recorded is None  # the rig's image parameter was not written
    assert_settled_as_a_one_boot_sweep(run)


@pytest.mark.slow
def test_a_launch_whose_response_is_lost_still_ends_its_builder(bundle_root: Path) -> None:
    """RunInstances succeeds but the Lambda times out before answering: the state carries no
    instance id, so the builder is found by its tags."""
    fleet = BuildFleet(launch_delay_s=6.0)
    run = emulated_bake(
        BODY, fleet, bundle_root=bundle_root, baked_images=False, function_timeout_s=3.0
    )
    assert run.status == "FAILED"
    assert "Sandbox.Timedout" in run.error or "timed out" in run.error
    assert run.states[-2:] == ["TerminateAfterFailure", "BakeFailed"]
    assert run.builders_alive == []


@pytest.mark.slow
def test_a_stopped_bake_is_ended_and_billed_as_a_stopped_sweep(bundle_root: Path) -> None:
    """Stop runs no Catch: the execution's status change reaches the sweep's own cleanup
    (functions/sweep_end.py), which finds the bake through the id's owner, ends the builder by
    its tags and settles the reservation; the reaper then finds nothing left."""
    fleet = BuildFleet(build="never")
    with Emulation(fleet=fleet, bundle_root=bundle_root, baked_images=False) as emu:
        sfn = emu.client("stepfunctions")
        arn = sfn.start_execution(
            stateMachineArn=emu.physical["BakeStateMachine"],
            input=json.dumps({**BODY, "waits": {"build_poll_s": 1, "image_poll_s": 0}}),
            name="bake-vllm-stopped",
        )["executionArn"]
        for _ in range(1500):  # until the builder is up and its build polled
            if fleet.checks:
                break
            time.sleep(0.2)
        assert fleet.checks > 0
        (builder,) = fleet.launched_instances
        sfn.stop_execution(executionArn=arn, error="UserAborted")
        (ended,) = emu.seams.status_changes.wait(arn)
        assert ended == {
            "sweep_id": "bake-vllm-stopped", "terminated": [builder.instance_id],
            "boots_closed": ["vllm#1"], "stopped": [],
        }  # fmt: skip
        assert fleet.alive == set()
        items = emu.client("dynamodb").scan(TableName=emu.table("LedgerTable"))["Items"]
        assert_settled({(i["pk"]["S"], i["sk"]["S"]): i for i in items}, ended["sweep_id"], "vllm")
        assert emu.run_scheduled("ReaperFunction") == {"reaped": [], "released_sweeps": []}


@pytest.mark.slow
def test_over_budget_launches_nothing(bundle_root: Path) -> None:
    fleet = BuildFleet()
    run = emulated_bake(
        {**BODY, "budget_usd": 1}, fleet, bundle_root=bundle_root, baked_images=False
    )
    assert run.status == "FAILED"
    assert "bake estimate $3.48" in run.error
    assert "over the budget $1.00" in run.error
    assert run.states == ["PlanBake"]
    assert fleet.launched_instances == []


@pytest.mark.slow
def test_no_quota_for_the_builder_launches_nothing(bundle_root: Path) -> None:
    fleet = BuildFleet(quota_vcpus_value=8)
    run = emulated_bake(BODY, fleet, bundle_root=bundle_root, baked_images=False)
    assert run.status == "FAILED"
    assert "builder c7g.4xlarge needs 16" in run.error
    assert fleet.launched_instances == []


@pytest.mark.slow
def test_a_rig_without_a_baked_image_for_the_arch_is_refused(bundle_root: Path) -> None:
    fleet = BuildFleet()
    run = emulated_bake(
        {**BODY, "rig": "torch"}, fleet, bundle_root=bundle_root, baked_images=False
    )
    assert run.status == "FAILED"
    assert "rig torch names no SSM parameter for a baked aarch64 image" in run.error
    assert fleet.launched_instances == []


def test_bake_input_is_strict() -> None:
    with pytest.raises(ValueError, match="budget_usd"):
        BakeInput.model_validate({"rig": "vllm", "budget_usd": 0})
    with pytest.raises(ValueError, match="arch"):
        BakeInput.model_validate({"rig": "vllm", "budget_usd": 1, "arch": "riscv64"})


@pytest.mark.slow
def test_a_sweep_needing_a_missing_baked_image_fails_before_any_launch(
    bundle_root: Path,
) -> None:
    fleet = ScriptedFleet()
    with Emulation(fleet, bundle_root=bundle_root, baked_images=False) as emu:
        arn = emu.start_execution(
            {"rigs": ["vllm"], "model": "random:tiny", "budget_usd": 5, "boots_per_rig": 1}
        )
        described = emu.wait(arn)
        history = emu.client("stepfunctions").get_execution_history(executionArn=arn)["events"]
    assert described["status"] == "FAILED"
    causes = [
        json.loads(e["taskFailedEventDetails"]["cause"])["errorMessage"]
        for e in history
        if "taskFailedEventDetails" in e
    ]
    assert any(
        "rig vllm on g5g.2xlarge (aarch64) needs the baked image named by SSM parameter "
        "/rigbench/ami/vllm-0.34.0-sm75, which does not exist" in c
        for c in causes
    )
    assert fleet.launch_requests == []
