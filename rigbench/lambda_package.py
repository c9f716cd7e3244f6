"""The Lambda functions' package: exactly what the handlers import and read, nothing else.

`sam build` runs `make build-<LogicalId>` (template.yaml: `BuildMethod: makefile`,
functions/Makefile) in the repository root, which runs

    python -m rigbench.lambda_package "$ARTIFACTS_DIR" <LogicalId>

It copies the repository modules the handlers import (found by importing them in a fresh
interpreter), the files those modules read (the rig definitions and templates), and
requirements.txt installed for the Lambda runtime's Python and architecture with pip's
platform options, so no python3.12 is needed on this machine. Tests, benchmarks, rigs'
server code, `.rigbench/` and anything else under the repository stay out.

Every function shares one package, except those in `OWN_PACKAGES`, which get only what their
own handler imports. The statistics (numpy, scipy: about 160 MB installed for arm64) are a
layer of their own, `LAYERS`, built here the same way under `python/` (where Lambda puts a
layer on the path) and attached in template.yaml to the functions whose handlers load them:
so every function package but Report's stays under `LEAN_BOUND`, and scipy is installed once.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

from cfn_tools import load_yaml

from rigbench.bundle import REPO_ROOT
from rigs.sources import cache_root

TEMPLATE = "template.yaml"
REQUIREMENTS = "requirements.txt"
# Functions whose package is their own: their handler's modules, requirements.txt and these.
OWN_PACKAGES: dict[str, tuple[str, ...]] = {
    # the report's plots (plotly)
    "ReportFunction": ("requirements-report.txt",),
    # Summarize's regression check runs analysis.stats on the sweep's results: the layer's
    "SummarizeFunction": (),
    # DecideRound's verdicts after each round of an adaptive sweep: analysis.stats as well
    "DecideRoundFunction": (),
}
# Layers built here: their requirements alone, under python/.
LAYERS = {"StatisticsLayer": "requirements-statistics.txt"}
SHARED = "shared"
# What a function package but Report's may weigh unzipped: the handlers' modules and jinja2
# are about 1 MB; a library that slips in (scipy alone is 116 MB) fails the build.
LEAN_BOUND = 50_000_000
UNBOUNDED = {"ReportFunction"}  # bounded by what Lambda allows beside its layers
# What Lambda allows unzipped, function and layers together, and what is kept for the
# Powertools layer (about 13 MB installed for arm64 without the runtime's boto3, 2026-12).
LAMBDA_UNZIPPED_LIMIT = 262_144_000
LAYER_ALLOWANCE = 30_000_000
# sam build builds each function on its own; each package is built once per content of its
# sources (these folders, the requirements, template.yaml) and copied from the project's cache
# dir, which every clone shares (`rigs.sources.cache_root`: RIGBENCH_CACHE or ~/.cache/rigbench).
CACHE = "lambda-package"
SOURCES = ("functions", "hardware", "rigs", "rigbench", "harness", "analysis")
PLATFORMS = {"arm64": "manylinux2014_aarch64", "x86_64": "manylinux2014_x86_64"}


class PackageError(Exception):
    """The package cannot be built; the message says why."""


def load_template(root: Path = REPO_ROOT) -> dict[str, Any]:
    template: dict[str, Any] = load_yaml((root / TEMPLATE).read_text())
    return template


def package_of(logical_id: str | None) -> str:
    """The package a function (or layer) gets: its own (its logical id) or the shared one."""
    return logical_id if logical_id in OWN_PACKAGES or logical_id in LAYERS else SHARED


def layers_of(template: dict[str, Any], logical_id: str) -> list[str]:
    """The layers of `LAYERS` that template.yaml attaches to the function."""
    layers = template["Resources"][logical_id]["Properties"].get("Layers", [])
    return [ref["Ref"] for ref in layers if isinstance(ref, dict) and ref.get("Ref") in LAYERS]


def bound_of(package: str) -> int:
    """What the package may weigh unzipped (a layer: what a function beside it leaves)."""
    if package in UNBOUNDED or package in LAYERS:
        return LAMBDA_UNZIPPED_LIMIT - LAYER_ALLOWANCE
    return LEAN_BOUND


def handler_modules(template: dict[str, Any], package: str = SHARED) -> list[str]:
    """The module of the Handler of every function in `package`
    (functions.validate.handler -> functions.validate)."""
    return sorted(
        {
            r["Properties"]["Handler"].rsplit(".", 1)[0]
            for logical_id, r in template["Resources"].items()
            if r["Type"] == "AWS::Serverless::Function" and package_of(logical_id) == package
        }
    )


def imported_files(modules: list[str], root: Path = REPO_ROOT) -> list[Path]:
    """Repository files a fresh interpreter loads to import `modules` (relative to root)."""
    probe = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(json.dumps([getattr(m, '__file__', None) for m in list(sys.modules.values())]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(root)!r})\n" + probe],
        cwd=root, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise PackageError(f"importing the handlers failed:\n{done.stderr[-3000:]}")
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    # A virtual environment inside the repository (make's .venv) holds installed packages,
    # not repository modules: they come from requirements.txt instead.
    installed = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix)}
    found = set()
    for name in filter(None, loaded):
        # not resolved: an installed rigbench's project links its packages from site-packages
        # (rigbench/project_files.py), and what it imported through them is the project's
        path = Path(os.path.abspath(name))
        if any(path.is_relative_to(prefix) for prefix in installed):
            continue
        if path.is_relative_to(root) and path.suffix == ".py":
            found.add(path.relative_to(root))
    return sorted(found)


def data_files(imported: list[Path], root: Path = REPO_ROOT) -> list[Path]:
    """Files the imported modules read at run time: each rig's definition and install script
    (rigs.registry, rigs.contract), the user data templates (rigs.bootstrap, the bake's), the
    report's page templates, and what harness.version hashes (every harness module)."""
    found: list[Path] = []
    if Path("rigs/registry.py") in imported:
        found += sorted((root / "rigs" / "bootstrap").glob("*.j2"))
        for definition in sorted((root / "rigs").glob("*/rig.toml")):
            found.append(definition)
            script = tomllib.loads(definition.read_text()).get("install", {}).get("script")
            if script:
                found.append(definition.parent / script)
    for folder in sorted({p.parent for p in imported}):
        found += sorted((root / folder).glob("*.j2"))
    if Path("harness/version.py") in imported:
        found += [*sorted((root / "harness").glob("*.py")), root / "pyproject.toml"]
    return [p.relative_to(root) for p in found]


def package_files(
    root: Path = REPO_ROOT, template: dict[str, Any] | None = None, package: str = SHARED
) -> list[Path]:
    """Every repository file in `package` (SHARED or a logical id of OWN_PACKAGES)."""
    template = template or load_template(root)
    imported = imported_files(handler_modules(template, package), root)
    return sorted({*imported, *data_files(imported, root)})


def runtime_target(template: dict[str, Any]) -> tuple[str, str]:
    """(python version, pip platform) of the functions' runtime, from the template Globals."""
    globals_ = template.get("Globals", {}).get("Function", {})
    runtime = str(globals_.get("Runtime", ""))
    if not runtime.startswith("python"):
        raise PackageError(f"template Globals Runtime {runtime!r} is not a python runtime")
    architecture = (globals_.get("Architectures") or ["x86_64"])[0]
    if architecture not in PLATFORMS:
        raise PackageError(f"no pip platform known for architecture {architecture!r}")
    return runtime.removeprefix("python"), PLATFORMS[architecture]


def requirements(package: str) -> list[str]:
    if package in LAYERS:
        return [LAYERS[package]]
    return [REQUIREMENTS, *OWN_PACKAGES.get(package, ())]


def install_dependencies(
    dest: Path,
    root: Path,
    template: dict[str, Any],
    package: str = SHARED,
    target: tuple[str, str] | None = None,
) -> None:
    """The package's requirements for the runtime's Python and architecture (or `target`:
    python version, pip platform). No bytecode: this machine's Python would compile it for its
    own version, not the runtime's."""
    version, platform = target or runtime_target(template)
    files = requirements(package)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--no-compile", "--target", str(dest), "--platform", platform,
         "--python-version", version, "--implementation", "cp", "--only-binary=:all:",
         *(arg for name in files for arg in ("-r", str(root / name)))],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise PackageError(f"pip could not resolve {', '.join(files)}:\n{done.stderr[-3000:]}")


def package_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def source_digest(root: Path = REPO_ROOT) -> str:
    """A digest of everything the package is made from, this packager included."""
    digest = hashlib.sha256()
    paths = [root / TEMPLATE, root / REQUIREMENTS, Path(__file__).resolve()]
    paths += [root / name for names in OWN_PACKAGES.values() for name in names]
    paths += [root / name for name in LAYERS.values()] + [root / "pyproject.toml"]
    for name in SOURCES:
        paths += [
            p for p in (root / name).rglob("*") if p.is_file() and "__pycache__" not in p.parts
        ]
    for path in sorted(paths):
        name = str(path.relative_to(root)) if path.is_relative_to(root) else path.name
        digest.update(f"{name}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def stage(staging: Path, root: Path, package: str, target: tuple[str, str] | None = None) -> None:
    """The package's files in `staging`: a layer's requirements under python/; a function's
    repository files and requirements at the top."""
    template = load_template(root)
    if package in LAYERS:
        install_dependencies(staging / "python", root, template, package, target)
        return
    for relative in package_files(root, template, package):
        copied = staging / relative
        copied.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / relative, copied)
    install_dependencies(staging, root, template, package, target)


def build(dest: Path, root: Path = REPO_ROOT, logical_id: str | None = None) -> list[Path]:
    """Write the function's (or layer's) package to `dest` (built once per source digest);
    returns its files. A PackageError when it weighs more than its bound."""
    package = package_of(logical_id)
    digest = source_digest(root)
    cached = cache_root() / CACHE / f"{digest}-{package}"
    if not cached.is_dir():
        staging = cached.with_name(f"{cached.name}.partial-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        stage(staging, root, package)
        size = package_bytes(staging)
        if size > bound_of(package):
            shutil.rmtree(staging, ignore_errors=True)
            raise PackageError(
                f"the {package} package is {size / 1e6:.1f} MB unzipped, above its bound of "
                f"{bound_of(package) / 1e6:.1f} MB (rigbench/lambda_package.py bound_of)"
            )
        for old in cached.parent.iterdir():  # the current packages kept, nothing older
            if ".partial-" not in old.name and not old.name.startswith(f"{digest}-"):
                shutil.rmtree(old, ignore_errors=True)
        try:
            staging.rename(cached)
        except OSError:  # a parallel build got there first
            shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(cached, dest, dirs_exist_ok=True)
    return sorted(p.relative_to(dest) for p in dest.rglob("*") if p.is_file())


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print(
            "usage: python -m rigbench.lambda_package ARTIFACTS_DIR [LOGICAL_ID]", file=sys.stderr
        )
        return 2
    try:
        files = build(Path(argv[0]), logical_id=argv[1] if len(argv) == 2 else None)
    except PackageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{len(files)} files -> {argv[0]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
