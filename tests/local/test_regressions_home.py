"""A local sweep's regression alerts are kept in the home: what Summarize stored in the
emulated ledger outlasts the run, and `rigbench regressions --local` lists it later."""

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analysis.metrics import Direction
from functions.alerts import store
from functions.regressions import Regression
from rigbench.cli import app
from rigbench.local.home import LocalHome
from rigbench.stack.local import LocalStack


@pytest.mark.slow
def test_alerts_outlast_the_run_and_are_listed_locally(tmp_path: Path) -> None:
    home = LocalHome(tmp_path / "home").ensure()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    alert = Regression(
        sweep_id="local-1", sweep_started_at=started, rig="torch", model="random:tiny",
        instance_type="g5g.2xlarge", cell="c00001", cell_label="c=1", metric="ttft_ms.p50",
        direction=Direction.LOWER_IS_BETTER, now=60.0, history=40.0, worse_by=1.5,
        threshold=1.05, p_value=1e-4, p_holm=6e-4, n_now=3, n_history=3,
        history_sweeps=["local-0"], family=6,
    )  # fmt: skip
    with LocalStack(home) as stack:  # what Summarize does in a local sweep
        store(stack.client("dynamodb"), stack.refs.ledger_table, [alert])

    listed = CliRunner().invoke(
        app, ["regressions", "--local", "--home", str(home.root), "--format", "json"]
    )
    assert listed.exit_code == 0, listed.output
    assert [Regression.model_validate(r) for r in json.loads(listed.output)] == [alert]
    other = CliRunner().invoke(
        app, ["regressions", "--local", "--home", str(home.root), "--sweep", "local-2"],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    assert "no regression alerts in the period asked" in other.output
