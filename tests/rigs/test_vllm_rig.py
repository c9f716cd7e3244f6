"""The vLLM rig: its definition, rendered scripts and readiness against recorded responses."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from packaging.version import Version
from typer.testing import CliRunner, Result

from rigbench.cli import app
from rigs.contract import RigDefinition, RigDefinitionError
from rigs.launch import launch_plan
from rigs.readiness import probe_ready
from rigs.registry import get_rig
from rigs.sources import ModelSource
from tests.rigs.replay_server import Replay, replay_server
from tests.rigs.rig_process import REPO, free_port


def serve_vllm_tiny(tiny: ModelSource, *args: str) -> Result:
    """`rigbench rig serve vllm --model random:tiny ARGS` in this process; exec refused."""

    def refuse(*_: object) -> NoReturn:
        raise AssertionError("the rig was started")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "execvpe", refuse)  # it would replace this process
        return CliRunner().invoke(
            app,
            ["rig", "serve", "vllm", "--model", "random:tiny", *args],
            env={"RIGBENCH_CACHE": str(tiny.path.parents[1])},
            catch_exceptions=False,
        )


SHELLCHECK = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")


def shellcheck(script: str) -> None:
    result = subprocess.run(
        [SHELLCHECK, "--shell=bash", "--severity=style", "-"],
        input=script,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def vllm() -> RigDefinition:
    return get_rig("vllm")


def test_version_is_pinned_at_or_after_the_first_one_with_gemma4(vllm: RigDefinition) -> None:
    # 0.28.0 fixed Gemma 4's per-layer config with transformers >= 5.15.
    assert Version(vllm.version) >= Version("0.28.0")
    assert vllm.runtime == "vllm"
    assert vllm.accelerators == ["cuda"]


def test_serve_command_on_a_turing_gpu(vllm: RigDefinition, tiny: ModelSource) -> None:
    argv, env = launch_plan(
        vllm,
        model="random:tiny",
        rig_venv=Path("/opt/rigbench/venvs/vllm"),
        gpu_compute_capability="7.5",
    )
    assert argv == [
        "/opt/rigbench/venvs/vllm/bin/vllm",
        "serve",
        str(tiny.path),
        "--served-model-name",
        "random:tiny",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--dtype",
        "float16",
        "--max-model-len",
        "4096",
        "--gpu-memory-utilization",
        "0.9",
        "--max-num-seqs",
        "8",
        "--attention-backend",
        "TRITON_ATTN",
        "--enable-prefix-caching",
        "--generation-config",
        "vllm",
    ]
    assert env["VLLM_NO_USAGE_STATS"] == "1"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(REPO)


def test_dtype_and_settings_overrides(vllm: RigDefinition, tiny: ModelSource) -> None:
    argv, _ = launch_plan(
        vllm,
        model="random:tiny",
        dtype="bfloat16",
        settings={"max_num_seqs": 32, "max_model_len": 2048},
        gpu_compute_capability="9.0",
    )
    assert argv[argv.index("--dtype") + 1] == "bfloat16"
    assert argv[argv.index("--max-num-seqs") + 1] == "32"
    assert argv[argv.index("--max-model-len") + 1] == "2048"
    # On a GPU with bfloat16, "auto" is left to vLLM.
    argv, _ = launch_plan(vllm, model="random:tiny", gpu_compute_capability="9.0")
    assert argv[argv.index("--dtype") + 1] == "auto"
    with pytest.raises(RigDefinitionError, match="no setting"):
        launch_plan(vllm, model="random:tiny", settings={"tensor_parallel": 2})
    with pytest.raises(RigDefinitionError, match="not 'int8'"):
        launch_plan(vllm, model="random:tiny", dtype="int8")


@pytest.mark.slow
def test_cli_dry_run_prints_the_command(tiny: ModelSource) -> None:
    out = serve_vllm_tiny(tiny, "--port", "8123", "--dry-run", "--set", "max_num_seqs=4")
    assert out.exit_code == 0, out.output
    plan = json.loads(out.stdout)
    assert plan["argv"][1:3] == ["serve", str(tiny.path)]
    assert plan["argv"][plan["argv"].index("--port") + 1] == "8123"
    assert plan["argv"][plan["argv"].index("--max-num-seqs") + 1] == "4"


@pytest.mark.slow
def test_serving_without_vllm_installed_says_so(tiny: ModelSource, tmp_path: Path) -> None:
    out = serve_vllm_tiny(tiny, "--rig-venv", str(tmp_path))
    assert out.exit_code == 2
    assert f"{tmp_path}/bin/vllm is not installed here" in out.stderr


def _install_script(vllm: RigDefinition) -> str:
    return vllm.render_install(
        rig_venv="/opt/rigbench/venvs/vllm",
        bundle_dir="/opt/rigbench/bundle",
        python_version="3.12",
    )


@pytest.mark.slow
def test_install_script_passes_shellcheck(vllm: RigDefinition) -> None:
    script = _install_script(vllm)
    shellcheck(script)
    assert 'readonly VERSION="0.34.0"' in script
    assert 'export TORCH_CUDA_ARCH_LIST="7.5"' in script
    assert 'readonly PATCH="/opt/rigbench/bundle/rigs/vllm/patches/' in script


def test_the_patch_the_script_applies_is_in_the_repo(vllm: RigDefinition) -> None:
    patch = vllm.folder / str(vllm.install.vars["patches"])
    text = patch.read_text()
    assert text.startswith("--- a/vllm/v1/attention/ops/triton_unified_attention.py")
    assert "+    if (\n+        head_size >= 512" in text
    assert "_LARGE_HEAD_SHARED_MEM = 98304" in text


def test_render_install_without_context_names_the_missing_variable(vllm: RigDefinition) -> None:
    with pytest.raises(RigDefinitionError, match="'rig_venv' is undefined"):
        vllm.render_install()


@pytest.fixture
def fake_tools(tmp_path: Path) -> tuple[Path, Path]:
    """Commands the install script calls, each recording its argv instead of acting."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    for tool in ("uv", "git", "uname", "nproc", "patch"):
        script = bin_dir / tool
        script.write_text(
            "#!/usr/bin/env bash\n"
            f'echo "{tool} $*" >> "{calls}"\n'
            f'case "{tool}" in\n'
            '  uname) echo "${FAKE_ARCH:-aarch64}" ;;\n'
            "  nproc) echo 8 ;;\n"
            '  git) mkdir -p "${@: -1}" ;;\n'
            "  uv) if [[ $1 == venv ]]; then\n"
            '        mkdir -p "${@: -1}/bin"\n'
            f"        printf '#!/usr/bin/env bash\\necho \"python $*\" >> {calls}\\necho /site\\n'"
            ' > "${@: -1}/bin/python"\n'
            '        chmod +x "${@: -1}/bin/python"\n'
            "      fi ;;\n"
            "esac\n"
        )
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bin_dir, calls


def _run_install(
    vllm: RigDefinition, tmp_path: Path, bin_dir: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    script = vllm.render_install(
        rig_venv=str(tmp_path / "venv"), bundle_dir=str(REPO), python_version="3.12"
    )
    return subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", **env},
    )


@pytest.mark.slow
def test_aarch64_gpu_boot_without_the_baked_image_refuses_to_build(
    vllm: RigDefinition, tmp_path: Path, fake_tools: tuple[Path, Path]
) -> None:
    bin_dir, calls = fake_tools
    result = _run_install(vllm, tmp_path, bin_dir, FAKE_ARCH="aarch64")
    assert result.returncode == 1
    assert "boot the baked image (rigbench bake vllm)" in result.stderr
    assert calls.read_text().splitlines() == ["uname -m"]


@pytest.mark.slow
def test_aarch64_bake_builds_torch_then_vllm_for_turing(
    vllm: RigDefinition, tmp_path: Path, fake_tools: tuple[Path, Path]
) -> None:
    bin_dir, calls = fake_tools
    result = _run_install(vllm, tmp_path, bin_dir, FAKE_ARCH="aarch64", RIGBENCH_BAKE="1")
    # Nothing really builds vllm here, so the final `vllm --version` fails after the steps ran.
    assert "bin/vllm: No such file" in result.stderr
    lines = calls.read_text().splitlines()
    assert lines[:3] == ["uname -m", f"uv venv --python 3.12 {tmp_path}/venv", "nproc "]
    assert lines[3].startswith("git clone --depth 1 --branch v2.14.0 --recurse-submodules")
    clone_vllm = next(i for i, line in enumerate(lines) if "--branch v0.34.0" in line)
    torch_build = next(i for i, line in enumerate(lines) if "--no-build-isolation ." in line)
    assert torch_build < clone_vllm  # vLLM builds against the torch built first
    assert "python use_existing_torch.py" in lines
    assert f"uv pip install --python {tmp_path}/venv/bin/python transformers==5.17.0" in lines
    assert "patch --forward --batch -p1 -d /site" in lines


@pytest.mark.slow
def test_x86_64_install_uses_the_released_wheel_and_patches_it(
    vllm: RigDefinition, tmp_path: Path, fake_tools: tuple[Path, Path]
) -> None:
    bin_dir, calls = fake_tools
    _run_install(vllm, tmp_path, bin_dir, FAKE_ARCH="x86_64")
    lines = calls.read_text().splitlines()
    assert (
        f"uv pip install --python {tmp_path}/venv/bin/python vllm==0.34.0 transformers==5.17.0"
        in lines
    )
    assert "patch --forward --batch -p1 -d /site" in lines
    assert not any(line.startswith("git") for line in lines)


@pytest.mark.slow
def test_install_is_skipped_when_the_prebuilt_marker_exists(
    vllm: RigDefinition, tmp_path: Path, fake_tools: tuple[Path, Path]
) -> None:
    bin_dir, calls = fake_tools
    (tmp_path / "venv").mkdir()
    (tmp_path / "venv" / ".rigbench-installed-vllm-0.34.0").touch()
    result = _run_install(vllm, tmp_path, bin_dir)
    assert result.returncode == 0
    assert "already installed" in result.stdout
    assert not calls.exists()


@pytest.mark.slow
def test_the_patch_applies_to_the_pinned_release(tmp_path: Path) -> None:
    """`patch` itself, against the file as vLLM 0.34.0 ships it: only the hunk's context
    lines are in the repo, so rebuild that much of the original from the patch."""
    vllm = get_rig("vllm")
    text = (vllm.folder / str(vllm.install.vars["patches"])).read_text()
    original = [line[1:] for line in text.splitlines(keepends=True)[2:] if line[:1] in (" ", "-")]
    target = tmp_path / "vllm" / "v1" / "attention" / "ops" / "triton_unified_attention.py"
    target.parent.mkdir(parents=True)
    target.write_text("".join(original))
    done = subprocess.run(
        ["patch", "--batch", "-p1", "-d", str(tmp_path)],
        input=text,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "_max_shared_mem(torch.cuda.current_device())" in target.read_text()


@pytest.fixture(scope="module")
def replay() -> Iterator[tuple[str, Replay]]:
    with replay_server() as server:
        yield server


@pytest.mark.slow
def test_ready_on_a_real_completion(replay: tuple[str, Replay]) -> None:
    base, server = replay
    server.scenario = "ready"
    state = probe_ready(base)
    assert state.ready
    assert (state.model, state.text) == ("google/gemma-4-E2B-it", " Sarah and I am")
    sent = server.requests[-1]
    assert sent["model"] == "google/gemma-4-E2B-it"
    assert sent["temperature"] == 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("scenario", "phase", "detail"),
    [
        ("engine_dead_old_health", "unhealthy", "completion 500"),
        ("engine_dead", "loading", "/health 503"),
        ("empty_text", "unhealthy", "empty text"),
    ],
)
def test_not_ready_unless_a_completion_has_text(
    replay: tuple[str, Replay], scenario: str, phase: str, detail: str
) -> None:
    base, server = replay
    server.scenario = scenario
    state = probe_ready(base)
    assert not state.ready
    assert state.phase == phase
    assert detail in state.detail


def test_nothing_listening_is_unreachable() -> None:
    state = probe_ready(f"http://127.0.0.1:{free_port()}", timeout_s=2)
    assert (state.ready, state.phase) == (False, "unreachable")
