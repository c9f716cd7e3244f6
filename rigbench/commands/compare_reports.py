"""`python -m rigbench.commands.compare_reports RIG=REPORT.json ...`: the comparison table of
harness reports given as files (one per boot, boots in order), without a stack: what
`rigbench compare SWEEP` prints for a stored sweep."""

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from analysis.boot_values import bursts_from_reports, shortfalls_from_reports, values_from_reports
from analysis.compare import compare
from analysis.stats import DEFAULT_CONFIDENCE
from rigbench.report.terminal import print_comparison


def _parse_report_arg(arg: str) -> tuple[str, Path]:
    rig, sep, path = arg.partition("=")
    if not sep or not rig or not path:
        raise typer.BadParameter(f"expected RIG=REPORT.json, got {arg!r}")
    return rig, Path(path)


def main(
    reports: Annotated[
        list[str],
        typer.Argument(help="RIG=REPORT.json, once per boot, boots in order", show_default=False),
    ],
    baseline: Annotated[str | None, typer.Option(help="rig to judge the others against")] = None,
    confidence: Annotated[float, typer.Option(min=0.5, max=0.999)] = DEFAULT_CONFIDENCE,
    json_out: Annotated[Path | None, typer.Option("--json", help="also write the model")] = None,
) -> None:
    """Print the comparison table for run reports of several rigs and boots."""
    by_rig: dict[str, list[Mapping[str, Any]]] = {}
    for arg in reports:
        rig, path = _parse_report_arg(arg)
        try:
            by_rig.setdefault(rig, []).append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise typer.BadParameter(f"cannot read report {path}: {exc}") from None
    try:
        comparison = compare(
            values_from_reports(by_rig),
            baseline=baseline,
            confidence=confidence,
            bursts=bursts_from_reports(by_rig),
            load_short=shortfalls_from_reports(by_rig),
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    print_comparison(Console(), comparison)
    if json_out is not None:
        json_out.write_text(comparison.model_dump_json(indent=2))


app = typer.Typer(add_completion=False)
app.command()(main)

if __name__ == "__main__":
    app()
