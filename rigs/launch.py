"""Start a rig on this machine from its definition: what `rigbench rig serve` and the
instance's systemd unit both run.

The rig's serve command replaces this process (exec), so a supervisor sees the runtime's
own exit status and signals reach it directly.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import NoReturn

from rigs.contract import RigDefinition, RigDefinitionError, Scalar
from rigs.sources import resolve_model

REPO_ROOT = Path(__file__).resolve().parent.parent
VENV_ROOT_ENV = "RIGBENCH_RIG_VENV_ROOT"  # the instance sets /opt/rigbench/venvs


def default_rig_venv(rig: RigDefinition) -> Path:
    """The rig's own venv on an instance, else the interpreter running this code."""
    root = os.environ.get(VENV_ROOT_ENV)
    if root and (Path(root) / rig.name).is_dir():
        return Path(root) / rig.name
    return Path(sys.prefix)


def launch_plan(
    rig: RigDefinition,
    *,
    model: str,
    port: int = 8000,
    host: str = "127.0.0.1",
    dtype: str | None = None,
    settings: dict[str, Scalar] | None = None,
    rig_venv: Path | None = None,
    gpu_compute_capability: str | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The exact argv and environment that serve `model` with `rig`."""
    rig.check_settings(settings or {})
    chosen_dtype = rig.pick_dtype(dtype, gpu_compute_capability)
    venv = rig_venv or default_rig_venv(rig)
    model_path = str(resolve_model(model).path) if rig.needs_model_path() else None
    argv = rig.render_serve_command(
        model=model,
        model_path=model_path,
        port=port,
        host=host,
        dtype=chosen_dtype,
        python=str(venv / "bin" / "python"),
        rig_venv=str(venv),
        settings=settings,
    )
    env = dict(os.environ)
    env.update(rig.serve.env)
    # The rig's code (rigs.torch.server, ...) runs from this checkout or bundle.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    return argv, env


def exec_rig(argv: list[str], env: dict[str, str]) -> NoReturn:
    program = argv[0]
    if shutil.which(program, path=env.get("PATH")) is None:
        raise RigDefinitionError(f"{program} is not installed here; install the rig first")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(program, argv, env)
