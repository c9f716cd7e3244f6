"""`python -m rigbench bench ...` and `rig serve ...` run on GPU machines that may lack the
control-plane packages: importing the CLI must not pull them (or the model libraries) in."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parents[1]
HEAVY = (
    "boto3", "botocore", "moto", "aws_lambda_powertools", "scipy", "torch", "transformers", "jax",
)  # fmt: skip


def loaded_after_import(module: str) -> set[str]:
    probe = (
        f"import {module}, json, sys; "
        f"print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_importing_the_cli_loads_no_control_plane_or_model_library() -> None:
    assert loaded_after_import("rigbench.cli") == set()


def test_the_probe_sees_a_heavy_import() -> None:
    # The probe itself must be able to fail: the Lambda code does load powertools and boto3.
    assert {"aws_lambda_powertools", "boto3"} <= loaded_after_import("functions.reaper")
