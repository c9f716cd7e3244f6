"""The shared client-side benchmark harness: one code path that measures every rig.

    from harness import BenchmarkConfig, run_benchmark
    report = await run_benchmark(BenchmarkConfig(url="http://127.0.0.1:8000", model="m"))

The command line is `rigbench bench` (harness.cli); the report's JSON Schema is
harness/report.schema.json.
"""

from harness.backend import ServerUnreachableError
from harness.runner import PreflightError, run_benchmark
from harness.schemas import (
    SLO,
    BenchmarkConfig,
    BenchmarkReport,
    CellReport,
    MetricSummary,
    RequestRecord,
)
from harness.version import harness_version

__all__ = [
    "SLO",
    "BenchmarkConfig",
    "BenchmarkReport",
    "CellReport",
    "MetricSummary",
    "PreflightError",
    "RequestRecord",
    "ServerUnreachableError",
    "harness_version",
    "run_benchmark",
]
