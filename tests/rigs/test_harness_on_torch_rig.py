"""The shared harness measures the torch rig (random:tiny on this CPU) end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rigbench.cli import app
from tests.rigs.conftest import RIG_SERVERS_GROUP

pytestmark = [RIG_SERVERS_GROUP, pytest.mark.slow]


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_harness_measures_the_torch_rig(torch_rig: str, tmp_path: Path, endpoint: str) -> None:
    out = tmp_path / "report.json"
    args = ["bench", "--url", torch_rig, "--model", "random:tiny", "--endpoint", endpoint]
    args += ["--concurrency", "1,2", "--input-len", "32", "--output-len", "8"]
    args += ["--requests", "4", "--warmup", "1", "--out", str(out)]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    report = json.loads(out.read_text())
    assert [cell["concurrency"] for cell in report["cells"]] == [1, 2]
    assert report["token_delivery"] == "per_token"  # as the rig says on /v1/models
    for cell in report["cells"]:
        assert (cell["requests_ok"], cell["requests_failed"]) == (4, 0)
        assert cell["output_tokens"] == 4 * 8
        assert cell["length_mismatches"] == 0
        assert cell["requests_without_usage"] == 0
        # Token-id prompts are exact; chat prompts are words that the built-in tokenizer
        # splits into several tokens, which the harness flags rather than hides.
        assert cell["prompt_length_mismatches"] == (0 if endpoint == "completions" else 4)
        assert cell["output_tok_s"] > 0
        assert cell["ttft_ms"]["count"] == 4
