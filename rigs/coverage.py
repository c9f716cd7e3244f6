"""Does a rig's pinned install carry GPU code an instance type runs? (`rigbench rig check`)

For each source its rig.toml names for the instance's architecture (`[install.gpu_code]`):
    wheel:NAME==VERSION  read from the downloaded wheel (benchmarks/wheel_kernels.py fetches
                         them), its core binaries (`gpu_core`) checked one by one;
    built:7.5,...        compiled from source at bake time for these capabilities;
    image:/path          shipped by the AMI: only an installed tree (`--venv`) can tell.
With an installed tree (on a builder or an instance) the tree itself is read and decides.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hardware.instance_types import InstanceType
from rigs.contract import RigDefinition
from rigs.kernels import KernelReport, read_kernels

Verdict = Literal["runs", "does not run", "unverified"]
DEFAULT_WHEEL_CACHE = Path("/tmp/rigbench-wheels")  # where benchmarks/wheel_kernels.py downloads


@dataclass(frozen=True)
class SourceCheck:
    source: str
    provides: str  # e.g. "SASS sm_75 sm_80; PTX compute_120", or why it is not known here
    verdict: Verdict
    detail: str = ""  # which core binaries lack code for the GPU, or what verifies it later


@dataclass(frozen=True)
class CoverageCheck:
    rig: str
    instance_type: str
    arch: str
    compute_capability: str
    sources: list[SourceCheck]

    @property
    def verdict(self) -> Verdict:
        verdicts = {s.verdict for s in self.sources}
        if not self.sources or "does not run" in verdicts:
            return "does not run"
        return "unverified" if "unverified" in verdicts else "runs"


def _wheel_report(spec: str, arch: str, cache: Path) -> KernelReport | None:
    name, version = spec.split("==")
    wheels = sorted((cache / arch).glob(f"{name.replace('-', '_')}-{version}-*.whl"))
    if not wheels:
        return None
    sidecar = wheels[0].with_suffix(".kernels.json")
    if sidecar.is_file():
        return KernelReport.from_json(json.loads(sidecar.read_text()))
    report = read_kernels(wheels[0])
    sidecar.write_text(json.dumps(report.to_json(), indent=1))
    return report


def judge(report: KernelReport, rig: RigDefinition, cc: str) -> tuple[Verdict, str]:
    """Every core binary present must carry code this capability runs, and one must exist."""
    core = report.core(rig.install.gpu_core)
    if core.empty:
        return "does not run", f"none of the core binaries {rig.install.gpu_core} is present"
    missing = core.unrunnable_on(cc)
    if missing:
        return "does not run", "no code for this GPU in " + ", ".join(missing)
    extras = report.unrunnable_on(cc)
    return "runs", ("optional, not for this GPU: " + ", ".join(extras)) if extras else ""


def check_source(
    rig: RigDefinition, source: str, instance: InstanceType, cache: Path
) -> SourceCheck:
    cc = instance.compute_capability or ""
    kind, _, value = source.partition(":")
    if kind == "wheel":
        report = _wheel_report(value, instance.arch, cache)
        if report is None:
            return SourceCheck(
                source,
                f"not downloaded to {cache / instance.arch}",
                "unverified",
                "run benchmarks/wheel_kernels.py to fetch and read it",
            )
        verdict, detail = judge(report, rig, cc)
        return SourceCheck(
            source, report.core(rig.install.gpu_core).archs.describe(), verdict, detail
        )
    if kind == "built":
        built = [c.strip() for c in value.split(",")]
        provides = "SASS " + " ".join(f"sm_{c.replace('.', '')}" for c in built)
        if cc in built:
            return SourceCheck(source, provides, "runs", "read again on the builder at bake time")
        return SourceCheck(source, provides, "does not run", f"not built for {cc}")
    return SourceCheck(
        source,
        f"from the AMI at {value}",
        "unverified",
        f"read on the instance: rigbench rig check {rig.name} --venv {value}",
    )


def check_rig(
    rig: RigDefinition,
    instance: InstanceType,
    *,
    cache: Path = DEFAULT_WHEEL_CACHE,
    installed: Path | None = None,
) -> CoverageCheck:
    cc = instance.compute_capability
    if cc is None:
        raise ValueError(f"{instance.name} has no GPU to check a rig against")
    if installed is not None:
        report = read_kernels(installed)
        verdict, detail = judge(report, rig, cc)
        found = report.core(rig.install.gpu_core).archs.describe()
        sources = [SourceCheck(f"installed:{installed}", found, verdict, detail)]
    else:
        sources = [
            check_source(rig, source, instance, cache)
            for source in rig.install.gpu_code.get(instance.arch, [])
        ]
    return CoverageCheck(rig.name, instance.name, instance.arch, cc, sources)
