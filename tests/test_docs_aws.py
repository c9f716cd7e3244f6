"""docs/aws.md shows only what the code has: every `rigbench ...` command parses with the real
CLI (its subcommand, flags and arguments), every sweep input parses as the stack parses it,
every `--parameter` names a template parameter, and the quota codes are the ones checked."""

import json
import re
import shlex
from pathlib import Path

import pytest
import typer
from typer._click.core import Context  # typer 0.29 carries its own click
from typer._click.exceptions import UsageError
from typer.core import TyperGroup

from functions.quota import ON_DEMAND_G_VT_QUOTA, SPOT_G_VT_QUOTA
from rigbench.cli import app
from rigbench.stack import parse_sweep

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "aws.md").read_text()
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", DOC, flags=re.DOTALL)
COMMANDS = [
    line.strip()
    for lang, body in BLOCKS
    if lang == "sh"
    for line in body.splitlines()
    if line.strip().startswith("rigbench ")
]
INLINE = re.findall(r"`(rigbench [^`]+)`", DOC)


def parse(command_line: str) -> Context:
    """The command's context as click builds it before running it (as TyperGroup.invoke
    does, less the running): an unknown subcommand or flag, a bad value, a missing or an
    extra argument raises a UsageError."""
    args = shlex.split(command_line)[1:]
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    ctx = group.make_context("rigbench", list(args))
    name, command, rest = group.resolve_command(ctx, [*ctx._protected_args, *ctx.args])
    assert command is not None, command_line
    return command.make_context(name or "", rest, parent=ctx)


def test_the_doc_shows_the_commands_of_a_first_day() -> None:
    shown = {shlex.split(c)[1] for c in COMMANDS}
    assert {
        "deploy",
        "doctor",
        "run",
        "status",
        "results",
        "report",
        "stop",
        "logs",
        "reap",
    } <= shown


@pytest.mark.parametrize("command_line", COMMANDS)
def test_each_command_shown_parses_with_the_real_cli(command_line: str) -> None:
    parse(command_line)


@pytest.mark.parametrize("command_line", sorted(set(INLINE)))
def test_each_command_named_in_the_text_parses_too(command_line: str) -> None:
    # placeholders in capitals (SWEEP, R, N) stand for values
    parse(command_line.replace(" N", " 1"))


def test_a_flag_the_cli_lacks_would_be_caught() -> None:
    with pytest.raises(UsageError):
        parse("rigbench logs first-sweep --instance i-0abc")
    with pytest.raises(UsageError):
        parse("rigbench stop")  # no sweep named
    with pytest.raises(UsageError):
        parse("rigbench logs first-sweep --boot two")


def test_the_sweep_input_shown_parses_and_fits_its_budget() -> None:
    (body,) = [json.loads(b) for lang, b in BLOCKS if lang == "json"]
    sweep = parse_sweep(body)
    assert sweep.deadlines.instance_s >= sweep.deadlines.ready_s + sweep.deadlines.bench_s
    # The doc's arithmetic: 4 boots x g4dn.xlarge's on-demand $0.526/h x 1 h = $2.10 <= $3.
    assert sweep.boot_count() == 4
    assert "4 x\n  $0.526 x 1 h = $2.10" in DOC
    assert 4 * 0.526 * sweep.deadlines.instance_s / 3600 <= sweep.budget_usd


def test_template_parameters_and_quota_codes_named_exist() -> None:
    template = (ROOT / "template.yaml").read_text()
    parameters = template.split("\nParameters:\n", 1)[1].split("\nConditions:", 1)[0]
    declared = set(re.findall(r"^  (\w+):", parameters, flags=re.MULTILINE))
    named = set(re.findall(r"--parameter (\w+)=", DOC))
    assert named
    assert named <= declared, named - declared
    for name in re.findall(r"`(\w+)` is the largest|`(\w+)` \(default", DOC):
        assert {n for n in name if n} <= declared
    codes = set(re.findall(r"L-[0-9A-F]{8}", DOC))
    assert codes == {SPOT_G_VT_QUOTA, ON_DEMAND_G_VT_QUOTA}
