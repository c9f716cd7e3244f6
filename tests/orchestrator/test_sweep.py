"""The real state machine and handlers on the emulated account: sweeps that succeed."""

from rigbench.emulation import Emulation
from tests.orchestrator.conftest import (
    assert_clean,
    result_rows,
    run_sweep,
    sweep_id_of,
    sweep_input,
)
from tests.orchestrator.scripted_fleet import ScriptedFleet


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
