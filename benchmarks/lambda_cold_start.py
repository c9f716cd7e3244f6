"""DecideRound's cold start before and after the StatisticsLayer, and what each package weighs.

    PYTHONPATH=$PWD python -m benchmarks.lambda_cold_start [--runs 9] [--python python3.12]

The proxy for a cold start is the import of its handler module (`functions.rounds`) in a fresh
interpreter without bytecode (Lambda's packages carry none, and /var/task is read-only), on
Lambda's path order: the function's package, then its layers, then what the runtime and the
Powertools layer provide (boto3, aws-lambda-powertools, pydantic, aws-xray-sdk). Both layouts
are built here for this machine's architecture and the given interpreter, with pip's
--platform options as `sam build` does for arm64 (rigbench/lambda_package.py):
- before: one package holding requirements.txt, requirements-report.txt and
  requirements-statistics.txt (what Summarize and DecideRound shared until issue 47);
- after: the function's own package (requirements.txt) and the StatisticsLayer.
Runs alternate between the two; the median of `--runs` each is printed, with the package sizes
on this machine and, as deployed (arm64), every package's size from the build's cache.
What the proxy leaves out: Lambda fetching and unpacking the code (larger for the old package).
"""

import argparse
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from rigbench.bundle import REPO_ROOT
from rigbench.lambda_package import (
    LAYERS,
    OWN_PACKAGES,
    PLATFORMS,
    REQUIREMENTS,
    SHARED,
    build,
    load_template,
    package_bytes,
    package_files,
)

FUNCTION = "DecideRoundFunction"
HANDLER_MODULE = "functions.rounds"
RUNTIME = ("boto3", "aws-lambda-powertools[tracer,parser]")
PROBE = (
    "import time; t = time.perf_counter(); import functions.rounds; print(time.perf_counter() - t)"
)


def pip_install(python: str, dest: Path, args: list[str]) -> None:
    version = subprocess.run(
        [python, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--no-compile", "--target", str(dest), "--platform", PLATFORMS[platform.machine()],
         "--python-version", version, "--implementation", "cp", "--only-binary=:all:", *args],
        check=True,
    )  # fmt: skip


def layouts(python: str, work: Path) -> dict[str, list[Path]]:
    """Each layout's sys.path entries, built under `work`."""
    template = load_template()
    # what requirements-report.txt held for the three functions until the layer
    requirements = [REQUIREMENTS, *OWN_PACKAGES["ReportFunction"], *LAYERS.values()]
    paths: dict[str, list[Path]] = {}
    for name, package_requirements in (
        ("before", requirements),
        ("after", [REQUIREMENTS, *OWN_PACKAGES[FUNCTION]]),
    ):
        package = work / name / "package"
        for relative in package_files(template=template, package=FUNCTION):
            (package / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO_ROOT / relative, package / relative)
        pip_install(python, package, [a for r in package_requirements for a in ("-r", r)])
        paths[name] = [package]
    layer = work / "after" / "StatisticsLayer" / "python"
    pip_install(python, layer, ["-r", LAYERS["StatisticsLayer"]])
    paths["after"].append(layer)
    pip_install(python, work / "runtime", list(RUNTIME))
    for entries in paths.values():
        entries.append(work / "runtime")
    return paths


def import_seconds(python: str, path: list[Path]) -> float:
    done = subprocess.run(
        [python, "-S", "-B", "-c", PROBE],
        env={"PYTHONPATH": ":".join(map(str, path)), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True, text=True, check=True, cwd="/",
    )  # fmt: skip
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--python", default="python3.12", help="the interpreter (Lambda's: 3.12)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be at least 1 (got {args.runs})")
    with tempfile.TemporaryDirectory() as folder:
        paths = layouts(args.python, Path(folder))
        import_seconds(args.python, paths["after"])  # the first run warms the page cache
        runs: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(args.runs):
            for name, path in paths.items():
                runs[name].append(import_seconds(args.python, path))
        for name, path in paths.items():
            sizes = " + ".join(f"{package_bytes(p) / 1e6:.0f} MB" for p in path[:-1])
            times = ", ".join(f"{s:.2f}" for s in sorted(runs[name]))
            print(
                f"{name:6s} import {HANDLER_MODULE}: median {statistics.median(runs[name]):.2f} s, "
                f"fastest {min(runs[name]):.2f} s of {args.runs} ({times}); "
                f"package(s) on {platform.machine()}: {sizes}"
            )
        deployed = Path(folder) / "deployed"
        for name in [SHARED, *OWN_PACKAGES, *LAYERS]:
            build(deployed / name, logical_id=None if name == SHARED else name)
            print(f"deployed (arm64) {name}: {package_bytes(deployed / name) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
