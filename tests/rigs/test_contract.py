"""Every rig folder is a valid definition; broken definitions fail loudly."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rigs.contract import RigDefinitionError, load_definition
from rigs.registry import RIGS_DIR, discover, get_rig, rig_folders
from tests.rigs.test_vllm_rig import shellcheck

CONTEXT = {
    "rig_venv": "/opt/rigbench/venvs/x",
    "bundle_dir": "/opt/rigbench/bundle",
    "python_version": "3.12",
}


@pytest.mark.slow
def test_every_rig_folder_parses() -> None:
    folders = rig_folders()
    rigs = discover()
    assert {"torch", "vllm"} <= set(rigs)
    assert sorted(rigs) == [f.name for f in folders]
    for rig in rigs.values():
        assert rig.port == 8000
        assert rig.serve.default_dtype in rig.serve.dtypes
        shellcheck(rig.render_install(**CONTEXT))


def test_folders_with_code_but_no_definition_are_not_rigs() -> None:
    # serving/, bootstrap/, configs/ are shared code, not runtimes.
    names = {f.name for f in rig_folders()}
    assert not names & {"serving", "bootstrap", "configs"}


def _copy_rig(tmp_path: Path, name: str = "torch") -> Path:
    folder = tmp_path / name
    shutil.copytree(
        RIGS_DIR / "torch", folder, ignore=shutil.ignore_patterns("*.py", "__pycache__")
    )
    return folder


def test_a_new_rig_is_just_a_folder(tmp_path: Path) -> None:
    folder = _copy_rig(tmp_path, "newrt")
    toml = (folder / "rig.toml").read_text().replace('name = "torch"', 'name = "newrt"')
    (folder / "rig.toml").write_text(toml)
    assert set(discover(tmp_path)) == {"newrt"}
    assert get_rig("newrt", tmp_path).runtime == "transformers"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace('name = "torch"', 'name = "other"'), "differs from its folder"),
        (lambda t: t.replace('"{port}"', '"{prot}"'), r"unknown \['prot'\]"),
        (lambda t: t.replace('script = "install.sh.j2"', 'script = "nope.sh"'), "missing"),
        (
            lambda t: t.replace('architectures = ["x86_64", "aarch64"]', "architectures = []"),
            "architectures",
        ),
        (lambda t: t.replace('runtime = "transformers"\n', ""), "runtime"),
        (lambda t: t + "\nport = 9000\n", "port"),
        (lambda t: t + "\nsurprise = 1\n", "surprise"),
        (lambda t: t.replace("[install]", "[install"), "rig.toml"),
        (lambda t: t.replace('default_dtype = "auto"', 'default_dtype = "int4"'), "default_dtype"),
        (
            lambda t: t.replace("default = 8192, min = 1", "default = 0, min = 1"),
            "a default its own declaration refuses: rig torch setting max_model_len = 0",
        ),
        (
            lambda t: t.replace(', choices = ["auto", "inductor", "graphs", "off"]', ""),
            "a str setting names its choices or a pattern",
        ),
        (
            lambda t: t.replace('type = "int", default = 8192', 'type = "list", default = 8192'),
            "type",
        ),
    ],
)
def test_broken_definitions_name_the_problem(tmp_path: Path, edit: object, message: str) -> None:
    folder = _copy_rig(tmp_path)
    toml = folder / "rig.toml"
    toml.write_text(edit(toml.read_text()))  # type: ignore[operator]
    with pytest.raises(RigDefinitionError, match=message):
        load_definition(folder)


def test_unknown_rig_lists_the_known_ones() -> None:
    with pytest.raises(RigDefinitionError, match=r"unknown rig 'tgi'; known rigs: .*torch"):
        get_rig("tgi")


def test_torch_rig_picks_float16_on_turing() -> None:
    torch_rig = get_rig("torch")
    assert torch_rig.pick_dtype(None, "7.5") == "float16"
    assert torch_rig.pick_dtype(None, "9.0") == "auto"
    assert torch_rig.pick_dtype("bfloat16", "7.5") == "bfloat16"  # an explicit choice wins


def test_prebuilt_ami_must_be_an_ami_id_or_ssm_parameter(tmp_path: Path) -> None:
    folder = _copy_rig(tmp_path)
    toml = folder / "rig.toml"
    base = toml.read_text()
    good = base.replace(
        'script = "install.sh.j2"',
        'script = "install.sh.j2"\nprebuilt_ami = { aarch64 = "ami-0123456789abcdef0" }',
    )
    toml.write_text(good)
    assert load_definition(folder).install.prebuilt_ami == {"aarch64": "ami-0123456789abcdef0"}
    for bad in ('{ aarch64 = "my image" }', '{ riscv64 = "/rigbench/ami/x" }'):
        toml.write_text(
            base.replace(
                'script = "install.sh.j2"', f'script = "install.sh.j2"\nprebuilt_ami = {bad}'
            )
        )
        with pytest.raises(RigDefinitionError, match="prebuilt_ami"):
            load_definition(folder)


def test_concurrency_setting_must_be_a_declared_setting(tmp_path: Path) -> None:
    folder = _copy_rig(tmp_path)
    toml = folder / "rig.toml"
    toml.write_text(
        toml.read_text().replace('concurrency_setting = "max_batch"', 'concurrency_setting = "x"')
    )
    with pytest.raises(RigDefinitionError, match="concurrency_setting 'x' is not a setting"):
        load_definition(folder)


def test_every_rig_declares_its_concurrency_and_gpu_code_per_architecture() -> None:
    for rig in discover().values():
        assert rig.serve.concurrency_setting in rig.serve.settings
        if "cuda" in rig.accelerators:
            assert set(rig.install.gpu_code) == set(rig.architectures)
