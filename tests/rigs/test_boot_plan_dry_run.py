"""A cloud dry run per instance type: each plans its own quota, price, image and dtype. Apart
from test_boot_plan.py, whose module-long emulation would hold this process's one slot."""

import json
from pathlib import Path

import pytest


@pytest.mark.slow
@pytest.mark.parametrize(("instance_type", "fit"), [("g4dn.xlarge", 2), ("g5g.2xlarge", 1)])
def test_a_cloud_dry_run_plans_each_type_with_its_own_quota_and_price(
    tmp_path: Path, instance_type: str, fit: int
) -> None:
    from rich.console import Console

    from rigbench.commands.local import run_local

    path = tmp_path / "input.json"
    body = {
        "rigs": ["vllm", "torch"],
        "model": "google/gemma-4-E2B-it",
        "instance_type": instance_type,
        "boots_per_rig": 2,
        "budget_usd": 5,
        "cells": {"concurrency": [1, 8]},
    }
    path.write_text(json.dumps(body))
    console = Console(record=True, width=200)
    code = run_local(
        path, dry_run=True, home=tmp_path / "home", console=console, quota_vcpus=8, spot_price=0.2
    )
    out = console.export_text()
    assert code == 0, out
    assert f"on {instance_type} (spot)" in out
    assert f"at most {fit} instances at once" in out  # 8 vCPU of quota: 4 or 8 per instance
    assert sum(f"│ {instance_type}" in line and "│ spot" in line for line in out.splitlines()) == 4
    assert "no instance was launched" in out
