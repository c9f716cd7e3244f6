"""A local run keeps the handlers' JSON logs in the home's lambda.log (CloudWatch's on AWS)."""

import io
import logging
from pathlib import Path

import pytest

from functions.observability import SERVICE, logger
from rigbench.local.home import LocalHome
from rigbench.stack.local import LocalStack


@pytest.mark.slow
def test_logs_reach_lambda_log_after_an_in_process_cli_run_closed_their_stream(
    tmp_path: Path,
) -> None:
    """The handlers' log handler is bound to the sys.stdout of the moment it was imported; an
    in-process CLI run (typer's CliRunner) closes that capture when it returns. The next local
    run must still open, redirect and restore (it failed with "I/O operation on closed file")."""
    (handler,) = (
        h for h in logging.getLogger(SERVICE).handlers if type(h) is logging.StreamHandler
    )
    capture = io.StringIO()
    original = handler.setStream(capture)
    capture.close()
    home = LocalHome(tmp_path / "home").ensure()
    try:
        with LocalStack(home):
            logger.info("probe from a handler")
        restored = handler.stream
    finally:
        handler.setStream(original)
    assert "probe from a handler" in (home.root / "lambda.log").read_text()
    assert not restored.closed
