"""Rig settings as rig.toml declares them: one source for Validate, the launcher and the
rig's own server."""

from __future__ import annotations

import pytest

from rigs.contract import RigDefinitionError, Scalar
from rigs.jax import server as jax_server
from rigs.launch import launch_plan
from rigs.registry import discover, get_rig
from rigs.serving.sizing import AUTO
from rigs.torch import server as torch_server


def test_the_torch_servers_defaults_are_its_rig_toml() -> None:
    torch = get_rig("torch")
    parsed = vars(torch_server.options().parse_args(["--model", "random:tiny"]))
    defaults = torch.setting_defaults()
    assert defaults["max_batch"] == "auto"
    assert parsed["max_batch"] == AUTO  # the server's own form of 'auto'
    assert {key: parsed[key] for key in torch.serve.settings} == {**defaults, "max_batch": AUTO}
    assert parsed["batching"] == "continuous"


def test_the_jax_servers_defaults_are_its_rig_toml() -> None:
    jax = get_rig("jax")
    defaults = jax.setting_defaults()
    assert defaults["max_slots"] == "auto"
    assert defaults["prompt_buckets"] == "auto"
    parser = jax_server.argparse.ArgumentParser()
    jax_server.add_options(parser, jax.name, jax.serve.settings)
    assert vars(parser.parse_args([])) == defaults


@pytest.mark.parametrize(
    ("rig", "settings", "words"),
    [
        ("torch", {"max_batch": "abc"}, "rig torch setting max_batch = 'abc' is not an int"),
        ("torch", {"max_batch": True}, "max_batch = True is not an int from 1 to 1024"),
        ("torch", {"max_batch": 2.0}, "max_batch = 2.0 is not an int"),
        ("torch", {"max_batch": 0}, "max_batch = 0 is not an int from 1 to 1024"),
        ("torch", {"batching": "waves"}, "batching = 'waves' is not one of 'serial', 'batched'"),
        ("torch", {"batch_gap_ms": -1}, "batch_gap_ms = -1 is not a float from 0 to 10000"),
        ("jax", {"max_slots": "all"}, "max_slots = 'all' is not an int from 1 to 1024, or 'auto'"),
        ("jax", {"prompt_buckets": "64;rm"}, "prompt_buckets = '64;rm' is not text matching"),
        ("vllm", {"gpu_memory_utilization": 2.0}, "gpu_memory_utilization = 2.0 is not a float"),
        ("vllm", {"attention_backend": "x y"}, "attention_backend = 'x y' is not text matching"),
    ],
)
def test_a_value_outside_its_declaration_is_refused_naming_rig_key_and_value(
    rig: str, settings: dict[str, Scalar], words: str
) -> None:
    with pytest.raises(RigDefinitionError, match=r"^rig ") as refused:
        get_rig(rig).check_settings(settings)
    assert words in str(refused.value)


def test_values_within_their_declarations_pass() -> None:
    get_rig("torch").check_settings({"max_batch": 1, "batch_gap_ms": 3, "batching": "serial"})
    get_rig("jax").check_settings({"max_slots": 4, "prompt_buckets": "64,512"})
    get_rig("jax").check_settings({"max_slots": "auto"})
    for rig in discover().values():
        rig.check_settings(rig.setting_defaults())


def test_settings_given_as_text_are_read_as_their_declared_type() -> None:
    torch = get_rig("torch")
    typed = torch.settings_from_text(
        {"max_batch": "8", "batch_gap_ms": "2.5", "batching": "serial"}
    )
    assert typed == {"max_batch": 8, "batch_gap_ms": 2.5, "batching": "serial"}
    with pytest.raises(RigDefinitionError, match="max_batch = 'eight' is not an int"):
        launch_plan(
            torch, model="random:tiny", settings=torch.settings_from_text({"max_batch": "eight"})
        )
    assert get_rig("jax").settings_from_text({"max_slots": "auto"}) == {"max_slots": "auto"}
