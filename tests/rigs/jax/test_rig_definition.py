"""The JAX rig's definition: valid, its scripts pass shellcheck, its command line renders."""

import argparse

import pytest

from rigs.bootstrap.user_data import BootstrapSpec, render_user_data
from rigs.contract import RigDefinition, Scalar
from rigs.jax.server import (
    buckets_arg,
    eos_ids,
    main,
    pick_dtype,
    served_buckets,
)
from rigs.launch import launch_plan
from rigs.registry import discover, get_rig
from rigs.sources import ModelSource
from tests.rigs.test_vllm_rig import shellcheck


@pytest.fixture(scope="module")
def jax_rig() -> RigDefinition:
    return get_rig("jax")


def test_discovered_with_the_other_rigs(jax_rig: RigDefinition) -> None:
    assert discover()["jax"] == jax_rig
    assert jax_rig.pick_dtype(None, "7.5") == "float16"  # Turing has no bfloat16


@pytest.mark.slow
def test_install_script_passes_shellcheck(jax_rig: RigDefinition) -> None:
    script = jax_rig.render_install(
        rig_venv="/opt/rigbench/venvs/jax", bundle_dir="/opt/rigbench/bundle", python_version="3.12"
    )
    shellcheck(script)
    assert 'jax_spec="jax[cuda12]==0.10.2"' in script


@pytest.mark.slow
def test_user_data_passes_shellcheck() -> None:
    spec = BootstrapSpec.model_validate(
        {
            "rig": "jax",
            "model": "google/gemma-4-E2B-it",
            "deadline_epoch": 2_000_000_000,
            "bundle_s3_uri": "s3://rigbench-bundles/bundle/abababababababababababababababababababababababababababababababab.tar.gz",
            "region": "us-east-1",
            "hf_token_secret_id": "rigbench/hf-token",
            "settings": {"max_slots": 8},
        }
    )
    shellcheck(render_user_data(spec))


def test_serve_command(jax_rig: RigDefinition) -> None:
    argv, env = launch_plan(jax_rig, model="random:tiny", settings={"max_slots": 4})
    assert argv[1:4] == ["-m", "rigs.jax.server", "--model"]
    assert argv[argv.index("--max-slots") + 1] == "4"
    assert argv[argv.index("--max-model-len") + 1] == "4096"
    assert argv[argv.index("--prompt-buckets") + 1] == "auto"
    assert argv[argv.index("--batched-prefill-max-len") + 1] == "1024"
    assert argv[argv.index("--kernels") + 1] == "xla"
    assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.90"
    settings: dict[str, Scalar] = {"prompt_buckets": "64,512", "batched_prefill_max_len": 64}
    argv, _ = launch_plan(jax_rig, model="random:tiny", settings=settings)
    assert argv[argv.index("--prompt-buckets") + 1] == "64,512"
    assert argv[argv.index("--batched-prefill-max-len") + 1] == "64"


def test_prompt_buckets_rise_from_one_and_end_at_the_served_context() -> None:
    assert buckets_arg("auto") == ()
    assert buckets_arg("64,512") == (64, 512)
    for bad in ("", "0,64", "512,64", "64,64", "64,x", "64;512"):
        with pytest.raises(argparse.ArgumentTypeError, match=f"rising from >= 1.*got {bad!r}"):
            buckets_arg(bad)
    assert served_buckets((), 1024) == ()  # the engine's ladder
    assert served_buckets((64,), 1024) == (64, 1024)
    assert served_buckets((64, 1024, 4096), 1024) == (64, 1024)  # max_model_len was cut


@pytest.mark.parametrize(
    ("flag", "value", "words"),
    [
        ("--prompt-buckets", "512,64", "--prompt-buckets must be 'auto' or prompt lengths"),
        ("--prompt-buckets", "64;512", "rig jax setting prompt_buckets = '64;512' is not text"),
        ("--batched-prefill-max-len", "0", "batched_prefill_max_len = 0 is not an int from 1"),
        ("--batched-prefill-max-len", "x", "batched_prefill_max_len = 'x' is not an int from 1"),
        ("--max-slots", "0", "max_slots = 0 is not an int from 1 to 1024, or 'auto'"),
        ("--kernels", "cuda", "kernels = 'cuda' is not one of 'xla', 'pallas'"),
    ],
)
def test_bad_setting_flags_stop_the_server_before_it_loads(
    flag: str, value: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--model", "random:tiny", flag, value])
    assert stopped.value.code == 2
    assert words in capsys.readouterr().err


def test_auto_dtype_follows_the_device() -> None:
    assert pick_dtype("auto", "cpu", None) == "float32"
    assert pick_dtype("auto", "gpu", "7.5") == "float16"
    assert pick_dtype("auto", "gpu", "9.0") == "bfloat16"
    assert pick_dtype("float16", "gpu", "9.0") == "float16"


def test_eos_ids_merge_config_and_generation_config(tiny: ModelSource) -> None:
    assert eos_ids(tiny.path) == frozenset({1})
