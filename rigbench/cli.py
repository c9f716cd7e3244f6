"""The `rigbench` command: each subcommand lives with the part of the project it drives."""

import os
from typing import Annotated

import typer

from rigs.cli import app as rig_app

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # plain help: paragraphs reflow, flags carry no type tag
)
app.add_typer(rig_app, name="rig")


def _print_version(value: bool) -> None:
    if value:
        from rigbench import version

        typer.echo(f"rigbench {version()}")
        raise typer.Exit()


@app.callback()
def main(
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the version (package + harness code hash) and exit",
        ),
    ] = False,
) -> None:
    """Benchmark LLM serving runtimes with one shared client-side harness. Start with
    `rigbench demo`: a local sweep, no AWS account needed."""
    problem = aws_profile_problem(os.environ.get("AWS_PROFILE"))
    if problem:
        typer.echo(f"error: {problem}", err=True)
        raise typer.Exit(2)


def aws_profile_problem(profile: str | None) -> str | None:
    """An AWS_PROFILE that names no profile fails deep in an import (botocore's
    ProfileNotFound from the X-Ray SDK): say so in one line first."""
    if profile is None:
        return None
    if not profile.strip():
        return "AWS_PROFILE is set but empty: unset it, or name a profile of ~/.aws/config"
    import botocore.session

    known = botocore.session.Session(profile=None).available_profiles
    if profile not in known:
        return (
            f"AWS_PROFILE names the profile {profile!r}, which the AWS config does not have "
            f"(it has: {', '.join(sorted(known)) or 'none'})"
        )
    return None


from harness.cli import BenchCommand, bench  # noqa: E402
from harness.demo import demo  # noqa: E402
from harness.restart import restart_command  # noqa: E402

app.command("bench", cls=BenchCommand)(bench)
# On an instance, after the cells: a warm start of the rig, timed (restarts_per_boot).
app.command("restart-rig")(restart_command)
# The harness alone against its reference server; `demo` is the local sweep (make sweep).
app.command("bench-demo")(demo)

from rigbench import cloud  # noqa: E402
from rigbench.commands.deploy import deploy_command  # noqa: E402
from rigbench.commands.local import demo_command  # noqa: E402
from rigbench.commands.logs import logs_command  # noqa: E402
from rigbench.commands.regressions import regressions_command  # noqa: E402
from rigbench.commands.stop import stop_command  # noqa: E402

cloud.register(app)  # run (with --local / --dry-run), status, results (with --local), reap
app.command("stop")(stop_command)
app.command("logs")(logs_command)
app.command("deploy")(deploy_command)
app.command("demo")(demo_command)
app.command("regressions")(regressions_command)

from rigbench.commands.report import compare_command, report_command  # noqa: E402

app.command("report")(report_command)
app.command("compare")(compare_command)

from rigbench.bake import bake_command  # noqa: E402

app.command("bake")(bake_command)

from rigbench.commands.doctor import doctor_command  # noqa: E402
from rigbench.mcp.cli import mcp_command  # noqa: E402

app.command("doctor")(doctor_command)

app.command("mcp")(mcp_command)
