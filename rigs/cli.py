"""`rigbench rig ...`: list rigs, show their definition and scripts, and serve one here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from hardware.instance_types import GPU_TYPES, UnknownInstanceType, get_instance_type
from hardware.local_host import compute_capability
from rigs.contract import RigDefinitionError
from rigs.coverage import DEFAULT_WHEEL_CACHE, check_rig
from rigs.launch import exec_rig, launch_plan
from rigs.registry import discover, get_rig
from rigs.sources import ModelSourceError, check_spec

app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help: paragraphs reflow, flags carry no type tag
    help="Serving runtimes (rigs) and how to run them.",
)


def _parse_settings(pairs: list[str]) -> dict[str, str]:
    settings: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"expected KEY=VALUE, got {pair!r}", param_hint="--set")
        settings[key.replace("-", "_")] = value
    return settings


@app.command("list")
def list_rigs() -> None:
    """The rigs there are, with their runtime and pinned version."""
    for name, rig in discover().items():
        typer.echo(f"{name}\t{rig.runtime} {rig.version}\t{','.join(rig.architectures)}")


@app.command()
def serve(
    name: Annotated[str, typer.Argument(help="the rig, e.g. torch or vllm")],
    model: Annotated[str, typer.Option(help="random:tiny, random:e2b, a directory or a hub id")],
    port: Annotated[int, typer.Option(help="TCP port to serve on")] = 8000,
    host: Annotated[
        str,
        typer.Option(
            help="address to listen on: 127.0.0.1 (this machine only, as on an instance, "
            "where the harness runs beside the rig) or 0.0.0.0 (every interface)"
        ),
    ] = "127.0.0.1",
    dtype: Annotated[str | None, typer.Option(help="default: the rig's, or the GPU's")] = None,
    setting: Annotated[
        list[str] | None, typer.Option("--set", help="rig setting KEY=VALUE (repeatable)")
    ] = None,
    rig_venv: Annotated[Path | None, typer.Option(help="where the rig is installed")] = None,
    dry_run: Annotated[bool, typer.Option(help="print the command instead of running it")] = False,
) -> None:
    """Serve MODEL with rig NAME on this machine, exactly as an instance does."""
    try:
        rig = get_rig(name)
        check_spec(model)  # before the rig starts: its own error would be a traceback
        argv, env = launch_plan(
            rig,
            model=model,
            port=port,
            host=host,
            dtype=dtype,
            settings=rig.settings_from_text(_parse_settings(setting or [])),
            rig_venv=rig_venv,
            gpu_compute_capability=compute_capability(),
        )
        if dry_run:
            typer.echo(json.dumps({"argv": argv, "env": {k: env[k] for k in rig.serve.env}}))
            return
        exec_rig(argv, env)
    except (RigDefinitionError, ModelSourceError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None


@app.command()
def check(
    names: Annotated[list[str] | None, typer.Argument(help="rigs to check (default: all)")] = None,
    instance_type: Annotated[
        list[str] | None,
        typer.Option(help=f"repeatable (default: every GPU type: {', '.join(GPU_TYPES)})"),
    ] = None,
    wheels: Annotated[
        Path, typer.Option(help="where benchmarks/wheel_kernels.py downloaded the wheels")
    ] = DEFAULT_WHEEL_CACHE,
    venv: Annotated[
        Path | None, typer.Option(help="read this installed tree instead (builder, instance)")
    ] = None,
) -> None:
    """Which GPU architectures each rig's pinned install provides, and whether each instance
    type can run it. Exit 1 when a checked pair does not run."""
    try:
        rigs = [get_rig(n) for n in names] if names else list(discover().values())
        types = [get_instance_type(t) for t in instance_type or GPU_TYPES]
    except (RigDefinitionError, UnknownInstanceType) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    if venv is not None and not venv.is_dir():
        typer.echo(f"error: {venv} is not a directory", err=True)
        raise typer.Exit(2)
    failed = False
    for rig in rigs:
        for itype in types:
            if itype.arch not in rig.architectures:
                continue
            result = check_rig(rig, itype, cache=wheels, installed=venv)
            gpu = f"{itype.gpu} cc {itype.compute_capability}"
            typer.echo(f"{rig.name} on {itype.name} ({itype.arch}, {gpu}): {result.verdict}")
            for source in result.sources:
                typer.echo(f"  {source.source}: {source.provides} -> {source.verdict}")
                if source.detail:
                    typer.echo(f"    {source.detail}")
            failed = failed or result.verdict == "does not run"
    if failed:
        raise typer.Exit(1)
