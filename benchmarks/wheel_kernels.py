"""Download the rigs' pinned CUDA wheels (both architectures) and list the GPU code they carry.

Not run in CI: it downloads about 3 GB. The figures it prints are quoted in README.md.

    python benchmarks/wheel_kernels.py [--cache DIR] [--json OUT]

Each wheel is fetched with `pip download --no-deps` for a manylinux platform tag, then every
ELF member is read by `rigs.kernels` (headers of the .nv_fatbin sections only).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from rigs.kernels import read_kernels

# What the rigs' install recipes install from PyPI (rigs/*/rig.toml), and what they avoid.
WHEELS = [
    "torch==2.14.0",  # vllm rig (vllm 0.34.0 pins it); torch rig on g4dn
    "torch==2.13.0",  # the torch rig's pin before this change
    "vllm==0.34.0",
    "jax-cuda13-plugin==0.10.2",
    "jax-cuda13-pjrt==0.10.2",
    "jax-cuda12-plugin==0.10.2",
    "jax-cuda12-pjrt==0.10.2",
]
PLATFORMS = {
    "x86_64": ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux2014_x86_64"],
    "aarch64": ["manylinux_2_28_aarch64", "manylinux_2_27_aarch64", "manylinux2014_aarch64"],
}
T4 = "7.5"


def download(spec: str, arch: str, cache: Path) -> Path | None:
    target = cache / arch
    target.mkdir(parents=True, exist_ok=True)
    name = spec.split("==")[0].replace("-", "_")
    version = spec.split("==")[1]
    found = sorted(target.glob(f"{name}-{version}-*.whl"))
    if found:
        return found[0]
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    argv += ["--python-version", "3.12", "-d", str(target), spec]
    for tag in PLATFORMS[arch]:
        argv += ["--platform", tag]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(f"{spec} ({arch}): not downloadable: {done.stderr.strip().splitlines()[-1]}")
        return None
    found = sorted(target.glob(f"{name}-{version}-*.whl"))
    return found[0] if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/rigbench-wheels"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    for spec in WHEELS:
        for arch in PLATFORMS:
            wheel = download(spec, arch, args.cache)
            if wheel is None:
                rows.append({"wheel": spec, "arch": arch, "found": False})
                continue
            started = time.perf_counter()
            report = read_kernels(wheel)
            archs = report.archs
            row = {
                "wheel": spec,
                "arch": arch,
                "found": True,
                "file": wheel.name,
                "mib": round(wheel.stat().st_size / 2**20),
                "sass": sorted(archs.sass),
                "ptx": sorted(archs.ptx),
                "binaries": {name: a.describe() for name, a in sorted(report.binaries.items())},
                "unrunnable_on_7_5": report.unrunnable_on(T4),
                "read_s": round(time.perf_counter() - started, 1),
            }
            rows.append(row)
            if report.empty:
                verdict = "no device code"
            elif report.runs_on(T4):
                verdict = "every binary runs on cc 7.5"
            else:
                verdict = "NOT on cc 7.5: " + ", ".join(report.unrunnable_on(T4))
            print(f"{spec:26} {arch:8} {row['mib']:>4} MiB  {archs.describe()}  -> {verdict}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
