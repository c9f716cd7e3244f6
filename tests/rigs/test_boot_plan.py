"""What each rig boots with on g4dn.xlarge (x86_64 T4) and g5g.2xlarge (aarch64 T4G): image,
dtype, settings; planned from the input, used at launch, stored with the results."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from functions.boot_plan import plan_boot, plan_for
from functions.errors import InvalidInput
from functions.execution_input import SweepInput, parse_sweep_input
from functions.settings import EMULATED_AMI_PARAMETER
from hardware.instance_types import DLAMI_PARAMETERS, InstanceType
from hardware.local_host import host_arch
from rigbench.emulation import Emulation, Faults
from rigs.serving.app import DEFAULT_MAX_WAITING
from tests.orchestrator.conftest import FAST, result_rows, sweep_id_of, sweep_input
from tests.orchestrator.scripted_fleet import ScriptedFleet

RIGS = ["torch", "vllm", "jax"]
DLAMI = DLAMI_PARAMETERS["aarch64"]  # the stack's default AmiParameter


def _sweep(instance_type: str, **extra: Any) -> Any:
    return parse_sweep_input(
        {"rigs": RIGS, "model": "m", "budget_usd": 5, "instance_type": instance_type, **extra}
    )


@pytest.mark.parametrize(
    ("instance_type", "arch", "images"),
    [
        (
            "g5g.2xlarge",
            "aarch64",
            {"torch": DLAMI, "jax": DLAMI, "vllm": "/rigbench/ami/vllm-0.34.0-sm75"},
        ),
        ("g4dn.xlarge", "x86_64", dict.fromkeys(RIGS, DLAMI_PARAMETERS["x86_64"])),
    ],
)
def test_image_dtype_and_settings_per_rig(
    instance_type: str, arch: str, images: dict[str, str]
) -> None:
    sweep = _sweep(instance_type)
    for rig in RIGS:
        plan = plan_boot(sweep, rig, DLAMI)
        assert plan.arch == arch
        assert plan.image == images[rig]
        assert plan.image_source == ("baked" if rig == "vllm" and arch == "aarch64" else "base")
        assert plan.dtype == "float16"  # Turing: no bfloat16, whatever the rig's default
        assert plan.dtype_reason == "compute capability 7.5 has no bfloat16"
    # The same number of concurrent sequences for every rig: the highest cell (8) by default.
    assert plan_boot(sweep, "vllm").settings["max_num_seqs"] == 8
    assert plan_boot(sweep, "torch").settings["max_batch"] == 8
    assert plan_boot(sweep, "jax").settings["max_slots"] == 8


def test_the_input_sets_concurrency_for_all_and_settings_per_rig() -> None:
    sweep = _sweep(
        "g4dn.xlarge",
        max_concurrent_sequences=4,
        rig_settings={"torch": {"batching": "batched"}, "vllm": {"max_num_seqs": 16}},
    )
    assert plan_boot(sweep, "jax").settings["max_slots"] == 4
    assert plan_boot(sweep, "torch").settings["max_batch"] == 4
    assert plan_boot(sweep, "torch").settings["batching"] == "batched"
    assert plan_boot(sweep, "vllm").settings["max_num_seqs"] == 16  # the input said otherwise


def test_a_rig_server_holds_every_request_of_the_sweeps_highest_concurrency() -> None:
    """The server's bound on waiting requests is at least the highest cell's concurrency, the
    schema's highest included, so a cell is queued, never refused."""
    highest = SweepInput.model_json_schema()["$defs"]["LoadCells"]["properties"]["concurrency"]
    schema_max = highest["items"]["maximum"]
    assert schema_max <= DEFAULT_MAX_WAITING
    sweep = _sweep("g4dn.xlarge", cells={"concurrency": [1, schema_max]})
    for rig in ("torch", "jax"):
        assert plan_boot(sweep, rig).settings["max_waiting"] >= schema_max
    small = _sweep("g4dn.xlarge", cells={"concurrency": [1, 4]})
    assert plan_boot(small, "torch").settings["max_waiting"] == DEFAULT_MAX_WAITING
    lowered = _sweep(
        "g4dn.xlarge", cells={"concurrency": [1, 8]}, rig_settings={"jax": {"max_waiting": 2}}
    )
    assert plan_boot(lowered, "jax").settings["max_waiting"] == 8  # raised to the highest cell


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"rig_settings": {"vllm": {"tensor_parallel": 2}}}, "rig vllm has no setting"),
        ({"rig_settings": {"sglang": {"x": 1}}}, "which the sweep does not run"),
        ({"instance_type": "p5.48xlarge"}, "'p5.48xlarge' is not supported"),
    ],
)
def test_bad_settings_and_types_are_refused_naming_the_field(
    extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_sweep_input({"rigs": RIGS, "model": "m", "budget_usd": 5, **extra})


def test_requests_per_cell_default_is_four_times_the_concurrency() -> None:
    assert _sweep("g4dn.xlarge").cells.requests_per_cell == 32  # cells 1, 8: max(32, 4 x 8)
    wide = _sweep("g4dn.xlarge", cells={"concurrency": [1, 16, 32]})
    assert wide.cells.requests_per_cell == 128
    given = _sweep("g4dn.xlarge", cells={"concurrency": [32], "requests_per_cell": 40})
    assert given.cells.requests_per_cell == 40  # an explicit value stands


BAKED_VLLM_PARAMETER = "/rigbench/ami/vllm-0.34.0-sm75"


@pytest.fixture(scope="module")
def emulation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulation]:
    root = tmp_path_factory.mktemp("bundle")
    for rig in ("torch", "vllm"):
        (root / "rigs" / rig).mkdir(parents=True)
        (root / "rigs" / rig / "rig.toml").write_text(f'name = "{rig}"\n')
    emu = Emulation(ScriptedFleet(), bundle_root=root, faults=Faults(hang_s=0.5), parameters=FAST)
    emu.start()
    baked = emu.client("ec2").register_image(
        Name="rigbench-vllm-baked",
        RootDeviceName="/dev/sda1",
        BlockDeviceMappings=[{"DeviceName": "/dev/sda1", "Ebs": {"VolumeSize": 100}}],
    )["ImageId"]
    emu.client("ssm").put_parameter(
        Name=BAKED_VLLM_PARAMETER, Value=baked, Type="String", Overwrite=True
    )
    try:
        yield emu
    finally:
        emu.stop()


@pytest.mark.parametrize("instance_type", ["g5g.2xlarge", "g4dn.xlarge"])
@pytest.mark.slow
def test_an_emulated_sweep_launches_and_stores_the_plan(
    emulation: Emulation, instance_type: str
) -> None:
    fleet = emulation.fleet
    assert isinstance(fleet, ScriptedFleet)
    fleet.reset()
    arn = emulation.start_execution(
        sweep_input(rigs=["torch", "vllm"], instance_type=instance_type)
    )
    described = emulation.wait(arn, 120)
    assert described["status"] == "SUCCEEDED", described.get("cause")
    ec2 = emulation.client("ec2")
    images = {}
    for instance in fleet.instances.values():
        found = ec2.describe_instances(InstanceIds=[instance.instance_id])
        images[instance.tags["rigbench:rig"]] = found["Reservations"][0]["Instances"][0]["ImageId"]
        assert instance.instance_type == instance_type
        assert "--dtype float16" in instance.user_data
        assert "--set max_batch=4" in instance.user_data or "--set max_num_seqs=4" in (
            instance.user_data
        )
    baked_vllm = emulation.client("ssm").get_parameter(Name=BAKED_VLLM_PARAMETER)["Parameter"]
    baked = baked_vllm["Value"] if instance_type == "g5g.2xlarge" else images["torch"]
    assert images["vllm"] == baked
    assert images["torch"] != baked_vllm["Value"]
    rows = result_rows(emulation, sweep_id_of(described))
    assert rows
    for row in rows:
        assert row["instance_type"] == instance_type
        assert row["config_key"].endswith(f"#{instance_type}")
        plan = row["provenance"]["boot_plan"]
        assert plan["dtype"] == "float16"
        assert plan["instance_type"] == instance_type
        concurrency = {"torch": "max_batch", "vllm": "max_num_seqs"}[row["rig"]]
        assert plan["settings"][concurrency] == 4
        # The plan stored is the plan launched: the stack's own AmiParameter, else the baked one.
        baked_here = row["rig"] == "vllm" and instance_type == "g5g.2xlarge"
        assert plan["image"] == (BAKED_VLLM_PARAMETER if baked_here else EMULATED_AMI_PARAMETER)
    assert json.dumps(rows)  # stored rows stay plain JSON


def test_user_data_template_still_renders_for_every_rig(tmp_path: Path) -> None:
    from rigs.bootstrap.user_data import BootstrapSpec, render_user_data

    for rig in RIGS:
        plan = plan_boot(_sweep("g5g.2xlarge"), rig)
        spec = BootstrapSpec(
            rig=rig,
            model="random:tiny",
            deadline_epoch=2_000_000_000,
            bundle_s3_uri="s3://bucket-x/bundle/abababababababababababababababababababababababababababababababab.tar.gz",
            region="us-east-1",
            dtype=plan.dtype,
            settings=dict(plan.settings),
        )
        text = render_user_data(spec)
        assert "--dtype float16" in text


def test_a_labelled_entry_runs_its_rig_with_its_own_settings() -> None:
    sweep = _sweep(
        "g4dn.xlarge",
        rigs=["torch", "torch@serial"],
        rig_settings={"torch@serial": {"batching": "serial"}},
    )
    # Like for like by default: the torch rig batches continuously, as the other rigs do.
    assert plan_boot(sweep, "torch").settings["batching"] == "continuous"
    labelled = plan_boot(sweep, "torch@serial")
    assert labelled.rig == "torch"
    assert labelled.settings["batching"] == "serial"


def test_only_the_validate_step_plans_a_boot() -> None:
    """Validate plans each rig once and places the plan in the state; no later step plans
    again (a second plan could differ from the one launched)."""
    functions_dir = Path(__file__).resolve().parents[2] / "functions"
    planners = sorted(p.name for p in functions_dir.glob("*.py") if "plan_boot(" in p.read_text())
    assert planners == ["boot_plan.py", "validate.py"]


def test_a_cpu_is_planned_in_float32_with_the_context_the_cells_need() -> None:
    """A local instance on a machine without a GPU: float32, the concurrency setting as on a
    GPU, a context no longer than a cell and the agreement probe (256 tokens) need, then the
    entry's own settings."""
    cpu = InstanceType(
        name="local", arch="x86_64", vcpus=2, memory_gib=8, gpu=None, on_demand_usd_per_hour={}
    )
    cells = {"concurrency": [1, 4], "prompt_tokens": 8, "output_tokens": 8}
    sweep = _sweep(
        "g4dn.xlarge",
        rigs=["jax", "torch", "torch@serial"],
        cells=cells,
        rig_settings={"torch@serial": {"batching": "serial", "max_model_len": 512}},
    )
    jax = plan_for(sweep, "jax", cpu)
    assert (jax.dtype, jax.dtype_reason, jax.compute_capability) == (
        "float32",
        "a CPU, no GPU",
        None,
    )
    assert jax.settings == {
        "max_model_len": 256,
        "max_slots": 4,
        "steps_per_call": 8,
        "prompt_buckets": "auto",
        "batched_prefill_max_len": 1024,
        "max_waiting": 1024,
        "request_timeout_s": 3600,
        "kernels": "xla",
    }
    torch = plan_for(sweep, "torch", cpu)
    assert (torch.settings["max_model_len"], torch.settings["max_batch"]) == (256, 4)
    serial = plan_for(sweep, "torch@serial", cpu)
    assert (serial.settings["batching"], serial.settings["max_model_len"]) == ("serial", 512)
    longer = _sweep("g4dn.xlarge", rigs=["jax"], cells={**cells, "prompt_tokens": 1000})
    assert plan_for(longer, "jax", cpu).settings["max_model_len"] == 1024
    huge = _sweep("g4dn.xlarge", rigs=["jax"], cells={**cells, "prompt_tokens": 9000})
    assert plan_for(huge, "jax", cpu).settings["max_model_len"] == 4096  # the rig's own, at most
    # A catalogued type without a GPU (a bake builder) is no place for a sweep.
    with pytest.raises(InvalidInput, match=r"c6i\.4xlarge has no GPU"):
        plan_for(sweep, "torch", cpu.model_copy(update={"name": "c6i.4xlarge"}))


def test_a_stack_of_local_instances_plans_for_this_machine() -> None:
    sweep = _sweep("g5g.2xlarge", rigs=["torch"])
    local = plan_boot(sweep, "torch", EMULATED_AMI_PARAMETER, "local")
    assert (local.instance_type, local.arch) == ("local", host_arch())
    assert local.image == EMULATED_AMI_PARAMETER
    assert plan_boot(sweep, "torch", EMULATED_AMI_PARAMETER).instance_type == "g5g.2xlarge"
