"""The shared client-side benchmark harness: one code path that measures every rig.

    from harness.runner import run_benchmark
    from harness.schemas import BenchmarkConfig
    report = await run_benchmark(BenchmarkConfig(url="http://127.0.0.1:8000", model="m"))

The command line is `rigbench bench` (harness.cli); the report's JSON Schema is
harness/report.schema.json (harness.schemas). This package imports nothing itself: the
orchestrator's Store reads reports through harness.schemas without loading the load
generator (httpx, numpy) into its Lambda package.
"""
