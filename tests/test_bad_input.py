"""Bad input to the `rigbench` command: each case is one line naming the field, option or file
at fault, exit code 2, and nothing started (no stack reached, no local sweep run). In process,
with typer's CliRunner: no emulation, no subprocess."""

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rigbench.cli import app
from rigbench.commands import local as local_cli
from rigbench.commands import stack_choice

GOOD = {"rigs": ["torch"], "model": "random:tiny", "budget_usd": 1, "boots_per_rig": 1}
runner = CliRunner()


@pytest.fixture(autouse=True)
def nothing_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("bad input reached a stack")

    monkeypatch.setattr(stack_choice, "connect_aws", refuse)
    monkeypatch.setattr(local_cli, "run_local", refuse)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def refused(*args: str, env: dict[str, str] | None = None) -> str:
    """The command's one line of output, asserting exit code 2."""
    result = runner.invoke(app, list(args), env=env, catch_exceptions=False)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1, result.output
    return lines[0]


def input_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "sweep.json"
    path.write_text(text)
    return str(path)


def test_deeply_nested_json(tmp_path: Path) -> None:
    path = input_file(tmp_path, "[" * 5_000 + "]" * 5_000)
    line = refused("run", "--local", path)
    assert path in line


def test_an_endless_input_file_is_read_no_further_than_the_api_limit() -> None:
    line = refused("run", "--local", "/dev/zero")
    assert line == "/dev/zero: larger than the 65536 bytes a sweep input may have"


def test_whitespace_around_a_valid_input_counts_toward_the_limit(tmp_path: Path) -> None:
    padding = " " * (10 * 1024 * 1024)
    path = input_file(tmp_path, padding + json.dumps(GOOD) + padding)
    assert refused("run", "--local", path) == (
        f"{path}: larger than the 65536 bytes a sweep input may have"
    )


@pytest.mark.parametrize("profile", ["", "no-such-profile"])
def test_an_aws_profile_that_names_no_profile(profile: str) -> None:
    line = refused("run", "--local", "--dry-run", env={"AWS_PROFILE": profile})
    assert line.startswith("error: AWS_PROFILE ")


def test_patterns_in_errors_are_printed_as_they_are(tmp_path: Path) -> None:
    path = input_file(tmp_path, json.dumps({**GOOD, "rigs": ["Torch!"]}))
    line = refused("run", "--local", path)
    assert "rigs.0: String should match pattern '^[a-z0-9][a-z0-9_-]{0,31}(@" in line


@pytest.mark.parametrize(
    ("field", "value"),
    [("boots_per_rig", True), ("budget_usd", "1"), ("budget_usd", True), ("boots_per_rig", "2")],
)
def test_no_boolean_or_string_is_taken_for_a_number(tmp_path: Path, field: str, value: Any) -> None:
    path = input_file(tmp_path, json.dumps({**GOOD, field: value}))
    line = refused("run", "--local", path)
    assert line.startswith(f"invalid sweep input: {field}: Input should be a valid "), line


@pytest.mark.parametrize("cells", ["", "1,,4", "two"])
def test_run_concurrency_must_be_integers(cells: str) -> None:
    line = refused("run", "--local", "--rig", "torch", "--concurrency", cells)
    bad = next(part for part in cells.split(",") if not part.strip().isdigit())
    assert line == f"--concurrency: {bad!r} is not a whole number (give e.g. 1,8)"


@pytest.mark.parametrize("rate", ["nan", "inf", "0", "-1"])
def test_bench_rate_must_be_a_positive_finite_number(rate: str) -> None:
    line = refused("bench", "--url", "http://127.0.0.1:9", "--model", "m", "--rate", rate)
    assert line.startswith("rigbench bench: error: invalid argument: --rate: "), line
