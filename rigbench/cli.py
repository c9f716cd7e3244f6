"""The `rigbench` command: each subcommand lives with the part of the project it drives."""

import typer

from rigs.cli import app as rig_app

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
app.add_typer(rig_app, name="rig")


@app.callback()
def main() -> None:
    """Benchmark LLM serving runtimes with one shared client-side harness."""


from harness.cli import BenchCommand, bench  # noqa: E402
from harness.demo import demo  # noqa: E402

app.command("bench", cls=BenchCommand)(bench)
# The harness alone against its reference server; `demo` is the local sweep (make sweep).
app.command("bench-demo")(demo)

from rigbench import cloud  # noqa: E402
from rigbench.local.cli import demo_command  # noqa: E402

cloud.register(app)  # run (with --local / --dry-run), status, results (with --local), reap, deploy
app.command("demo")(demo_command)

from rigbench.report.cli import compare_command, report_command  # noqa: E402

app.command("report")(report_command)
app.command("compare")(compare_command)

from rigbench.bake import bake_command  # noqa: E402

app.command("bake")(bake_command)

from rigbench.mcp.cli import mcp_command  # noqa: E402

app.command("mcp")(mcp_command)
