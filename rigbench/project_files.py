"""Where rigbench finds its project: the folder that holds template.yaml, statemachine/ and
the packages (harness, hardware, rigs, functions, rigbench), as a source checkout lays them out.

In a checkout that is the checkout. Installed from the wheel, the packages sit in
site-packages and the root files (template.yaml, the state machines, pyproject.toml, the
Lambda requirements) ship as package data in `rigbench/_project` (setup.py puts them there);
the project is then assembled once per installation in the cache (links to the installed
packages, copies of the root files), so the emulation, the bundle, `sam build` and the local
instances read one layout wherever rigbench runs from.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path

PACKAGES = ("analysis", "harness", "hardware", "rigs", "functions", "rigbench")
# The files at the checkout's root that the wheel carries (setup.py reads this list).
ROOT_FILES = (
    "template.yaml",
    "pyproject.toml",
    "README.md",
    "requirements.txt",
    "requirements-report.txt",
    "requirements-statistics.txt",
    "statemachine/sweep.asl.json",
    "statemachine/boot.asl.json",
    "statemachine/bake.asl.json",
    "statemachine/sweep-input.schema.json",
)
PACKAGED_DIR = "_project"  # inside the rigbench package, in the wheel only
CACHE_ENV = "RIGBENCH_CACHE"


class ProjectFilesMissing(RuntimeError):
    """Neither a checkout nor an installed wheel's copy of the project's root files was found."""


def _site_root() -> Path:
    """The folder holding the packages: the checkout, or site-packages when installed."""
    return Path(__file__).resolve().parents[1]


def _cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "rigbench")


def _assemble(site: Path, packaged: Path) -> Path:
    """The installed project as a checkout's layout, built once per installation and files."""
    digest = hashlib.sha256(str(site).encode())
    for name in ROOT_FILES:
        digest.update(name.encode())
        digest.update((packaged / name).read_bytes())
    target = _cache_root() / "project" / digest.hexdigest()[:16]
    if (target / "template.yaml").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".assembling-", dir=target.parent))
    try:
        for package in PACKAGES:
            (staging / package).symlink_to(site / package, target_is_directory=True)
        for name in ROOT_FILES:
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(packaged / name, staging / name)
        try:
            staging.rename(target)
        except OSError:  # another process assembled it first
            if not (target / "template.yaml").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def project_root() -> Path:
    """The checkout this code runs from, else the installed project assembled in the cache."""
    site = _site_root()
    if (site / "template.yaml").is_file():
        return site
    packaged = Path(str(resources.files("rigbench") / PACKAGED_DIR))
    missing = [name for name in ROOT_FILES if not (packaged / name).is_file()]
    if missing:
        raise ProjectFilesMissing(
            f"rigbench at {site} has neither a checkout's template.yaml nor the wheel's copy "
            f"({packaged} lacks {', '.join(missing)}): reinstall it from the wheel "
            "(pip install rigbench) or run it from a clone"
        )
    return _assemble(site, packaged)


REPO_ROOT = project_root()
