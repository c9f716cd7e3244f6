"""`rigbench rig check`: the rigs' GPU code against each instance type, from wheels made here
out of nvcc-built binaries (fixtures/kernels) laid out as the real wheels are."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hardware.instance_types import get_instance_type
from rigs.cli import app
from rigs.coverage import check_rig
from rigs.registry import get_rig

FIXTURES = Path(__file__).parent / "fixtures" / "kernels"
TURING = FIXTURES / "k_sm75_compute80.o"  # SASS sm_75
AMPERE_UP = FIXTURES / "libk_sm80_sm90.so"  # what PyPI's aarch64 libtorch_cuda.so carries


def wheel(cache: Path, arch: str, name: str, members: dict[str, Path]) -> Path:
    (cache / arch).mkdir(parents=True, exist_ok=True)
    path = cache / arch / f"{name}-cp312-cp312-manylinux_2_28_{arch}.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, source in members.items():
            archive.write(source, member)
    return path


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    cache = tmp_path / "wheels"
    wheel(
        cache,
        "x86_64",
        "torch-2.14.0",
        {"torch/lib/libtorch_cuda.so": TURING, "torch/lib/libtorch_cuda_linalg.so": AMPERE_UP},
    )
    wheel(
        cache,
        "x86_64",
        "vllm-0.34.0",
        {
            "vllm/_C_stable_libtorch.abi3.so": TURING,
            "vllm/_moe_C_stable_libtorch.abi3.so": TURING,
            "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": AMPERE_UP,
        },
    )
    return cache


def test_x86_64_wheels_with_turing_code_run_and_extras_are_named(cache: Path) -> None:
    result = check_rig(get_rig("vllm"), get_instance_type("g4dn.xlarge"), cache=cache)
    assert result.verdict == "runs"
    assert [s.source for s in result.sources] == ["wheel:vllm==0.34.0", "wheel:torch==2.14.0"]
    assert "_vllm_fa2_C.abi3.so" in result.sources[0].detail
    assert result.sources[1].provides == "SASS sm_75; PTX compute_80"


def test_a_core_library_without_turing_code_does_not_run(tmp_path: Path) -> None:
    cache = tmp_path / "wheels"
    # The union of this wheel has sm_75 (a helper library); libtorch_cuda.so has none.
    wheel(
        cache,
        "x86_64",
        "torch-2.14.0",
        {"torch/lib/libtorch_cuda.so": AMPERE_UP, "torch/lib/libtorch_nvshmem.so": TURING},
    )
    result = check_rig(get_rig("torch"), get_instance_type("g4dn.xlarge"), cache=cache)
    assert result.verdict == "does not run"
    assert result.sources[0].detail == "no code for this GPU in torch/lib/libtorch_cuda.so"


def test_missing_wheels_and_ami_provided_code_are_unverified_not_passed(tmp_path: Path) -> None:
    empty = tmp_path / "none"
    torch_g4dn = check_rig(get_rig("torch"), get_instance_type("g4dn.xlarge"), cache=empty)
    assert torch_g4dn.verdict == "unverified"
    assert "wheel_kernels.py" in torch_g4dn.sources[0].detail
    torch_g5g = check_rig(get_rig("torch"), get_instance_type("g5g.2xlarge"), cache=empty)
    assert torch_g5g.verdict == "unverified"
    assert torch_g5g.sources[0].source == "image:/opt/pytorch"


def test_vllm_on_graviton_is_built_for_turing() -> None:
    result = check_rig(get_rig("vllm"), get_instance_type("g5g.2xlarge"))
    assert result.verdict == "runs"
    assert result.sources[0].provides == "SASS sm_75"


def test_an_installed_tree_decides(tmp_path: Path) -> None:
    site = tmp_path / "venv" / "lib" / "python3.12" / "site-packages"
    (site / "torch" / "lib").mkdir(parents=True)
    (site / "torch" / "lib" / "libtorch_cuda.so").write_bytes(AMPERE_UP.read_bytes())
    torch_rig, g5g = get_rig("torch"), get_instance_type("g5g.2xlarge")
    result = check_rig(torch_rig, g5g, installed=tmp_path / "venv")
    assert result.verdict == "does not run"
    (site / "torch" / "lib" / "libtorch_cuda.so").write_bytes(TURING.read_bytes())
    assert check_rig(torch_rig, g5g, installed=tmp_path / "venv").verdict == "runs"
    (site / "torch" / "lib" / "libtorch_cuda.so").unlink()
    result = check_rig(torch_rig, g5g, installed=tmp_path / "venv")
    assert result.verdict == "does not run"
    assert "none of the core binaries" in result.sources[0].detail


def test_cli_prints_every_rig_and_type_and_fails_on_a_pair_that_does_not_run(
    tmp_path: Path, cache: Path
) -> None:
    runner = CliRunner()
    out = runner.invoke(app, ["check", "--wheels", str(cache)])
    assert out.exit_code == 0, out.output
    for pair in [
        "vllm on g4dn.xlarge (x86_64, T4 cc 7.5): runs",
        "vllm on g5g.2xlarge (aarch64, T4G cc 7.5): runs",
        "torch on g4dn.xlarge (x86_64, T4 cc 7.5): runs",
        "torch on g5g.2xlarge (aarch64, T4G cc 7.5): unverified",
        "jax on g4dn.xlarge (x86_64, T4 cc 7.5): unverified",
        "jax on g5g.2xlarge (aarch64, T4G cc 7.5): unverified",
    ]:
        assert pair in out.output
    venv = tmp_path / "venv" / "torch" / "lib"
    venv.mkdir(parents=True)
    (venv / "libtorch_cuda.so").write_bytes(AMPERE_UP.read_bytes())
    out = runner.invoke(
        app, ["check", "torch", "--instance-type", "g5g.2xlarge", "--venv", str(tmp_path / "venv")]
    )
    assert out.exit_code == 1
    assert "no code for this GPU in torch/lib/libtorch_cuda.so" in out.output
    out = runner.invoke(app, ["check", "torch", "--instance-type", "p5.48xlarge"])
    assert out.exit_code == 2
    assert "'p5.48xlarge' is not supported" in out.output
