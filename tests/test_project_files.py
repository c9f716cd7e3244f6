"""What an installed rigbench carries of its project: every top-level package pyproject ships,
and every root file the stack is built from (the state machines among them)."""

import tomllib
from pathlib import Path

from rigbench.project_files import PACKAGES, ROOT_FILES

ROOT = Path(__file__).resolve().parents[1]


def test_the_installed_project_links_every_package_pyproject_ships() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    shipped = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    assert sorted(PACKAGES) == sorted(name.removesuffix("*").rstrip(".") for name in shipped)


def test_every_state_machine_and_template_file_is_carried() -> None:
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / "statemachine").iterdir() if p.is_file()}
    assert on_disk <= set(ROOT_FILES)
    assert all((ROOT / name).is_file() for name in ROOT_FILES)
