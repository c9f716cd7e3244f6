"""The user data an instance boots with, and the SSM command that asks whether it is ready.

    render_user_data(BootstrapSpec(...)) -> str   # bash, under EC2's 16 KiB user-data limit
    ready_check_command(spec) -> str              # for SSM RunCommand (AWS-RunShellScript)

The bundle at `bundle_s3_uri` is a .tar.gz of this repository (pyproject.toml at its top).
The instance is expected to be an Ubuntu DLAMI with the NVIDIA driver, aws CLI and python3.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Annotated

import jinja2
from pydantic import BaseModel, ConfigDict, Field, field_validator

from rigs.bootstrap.status import STATUS_FILE
from rigs.contract import Scalar
from rigs.registry import get_rig

USER_DATA_LIMIT = 16 * 1024
INSTANCE_PORT = 8000  # where an instance's rig serves
# The user data's second line: the spec it was rendered from, which a local instance (the
# local fleet) reads back to serve what the instance would.
SPEC_LINE = "# rigbench-bootstrap-spec: "
TEMPLATE = Path(__file__).with_name("user_data.sh.j2")
_SAFE = re.compile(r"^[\w.:/@~+-]+$")  # what may go unquoted into a systemd ExecStart


class InstancePaths(BaseModel):
    """Where the bootstrap writes on the instance (tests point these into a temp dir)."""

    status_file: str = str(STATUS_FILE)
    token_file: str = "/etc/rigbench/hf_token"
    log_file: str = "/var/log/rigbench-bootstrap.log"
    rig_log_file: str = "/var/log/rigbench-rig.log"  # the rig service's journal, when uploaded
    upload_script: str = "/usr/local/sbin/rigbench-upload-logs"
    unit_dir: str = "/etc/systemd/system"


class BootstrapSpec(BaseModel):
    """Everything an instance needs to install and start one rig; no secrets."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rig: str
    model: str
    deadline_epoch: Annotated[int, Field(gt=1_600_000_000)]
    # bundle/<sha256>.tar.gz (rigbench.bundle): the instance checks the file against its key.
    bundle_s3_uri: Annotated[
        str, Field(pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/(.+/)?[0-9a-f]{64}\.tar\.gz$")
    ]
    region: Annotated[str, Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")]
    hf_token_secret_id: str | None = None  # a SecretString holding the bare token
    # Where the instance uploads its bootstrap and rig logs before it ends: this prefix and
    # then its own instance id (functions.report_keys.instances_prefix); None: no upload.
    log_s3_prefix: (
        Annotated[str, Field(pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[\w./:@-]+/$")] | None
    ) = None
    dtype: str | None = None
    settings: dict[str, Scalar] = Field(default_factory=dict)
    expected_compute_capability: str | None = "7.5"  # the T4G; None accepts any GPU
    python_version: str = "3.12"
    root: str = "/opt/rigbench"
    uv_requirement: str = "uv>=0.5,<1"

    @field_validator("model", "dtype")
    @classmethod
    def _safe(cls, value: str | None) -> str | None:
        if value is not None and not _SAFE.match(value):
            raise ValueError(f"{value!r} has characters not allowed in a model spec or dtype")
        return value

    @field_validator("settings")
    @classmethod
    def _safe_settings(cls, value: dict[str, Scalar]) -> dict[str, Scalar]:
        for key, item in value.items():
            if not _SAFE.match(key) or not _SAFE.match(str(item)):
                raise ValueError(f"setting {key}={item!r} has characters not allowed")
        return value

    @property
    def bundle_sha256(self) -> str:
        """The sha256 the bundle's key names (its file name)."""
        return self.bundle_s3_uri.rsplit("/", 1)[1].removesuffix(".tar.gz")

    def serve_argv(
        self, python: str | None = None, port: int = INSTANCE_PORT, host: str | None = None
    ) -> list[str]:
        """The rig's serve command: the instance's unit runs it as is; a local instance with
        this machine's interpreter, on a loopback port of its own."""
        python = python or f"{self.root}/venv/bin/python"
        argv = [python, "-m", "rigbench", "rig", "serve", self.rig]
        argv += ["--model", self.model, "--port", str(port)]
        if host is not None:
            argv += ["--host", host]
        if self.dtype:
            argv += ["--dtype", self.dtype]
        for key, item in sorted(self.settings.items()):
            argv += ["--set", f"{key}={item}"]
        return argv


def render_user_data(spec: BootstrapSpec, paths: InstancePaths | None = None) -> str:
    paths = paths or InstancePaths()
    rig = get_rig(spec.rig)  # unknown rig: RigDefinitionError naming the known ones
    rig.check_settings(spec.settings)
    if spec.dtype is not None:
        rig.pick_dtype(spec.dtype, None)
    install = rig.render_install(
        rig_venv=f"{spec.root}/venvs/{rig.name}",
        bundle_dir=f"{spec.root}/bundle",
        python_version=spec.python_version,
    )
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False
    )
    env.filters["q"] = shlex.quote
    text = env.from_string(TEMPLATE.read_text()).render(
        **spec.model_dump(),
        spec_line=SPEC_LINE + spec.model_dump_json(),
        paths=paths,
        install_script=install.rstrip("\n"),
        serve_command=" ".join(spec.serve_argv()),
        bundle_sha256=spec.bundle_sha256,
    )
    if len(text.encode()) > USER_DATA_LIMIT:
        raise ValueError(f"user data is {len(text.encode())} bytes, over EC2's 16 KiB")
    return text


def read_spec(user_data: str) -> BootstrapSpec:
    """The spec a user data was rendered from (`render_user_data`)."""
    for line in user_data.splitlines()[:3]:
        if line.startswith(SPEC_LINE):
            return BootstrapSpec.model_validate_json(line.removeprefix(SPEC_LINE))
    raise ValueError("the user data names no rigbench bootstrap spec")


def ready_check_command(spec: BootstrapSpec) -> str:
    """A shell command for SSM: prints a ReadyState JSON; exit 0 ready, 3 failed, 1 not yet.

    Works from the first second of boot: before rigbench is installed it reports the
    status file (and a failed install as terminal). Its paths are the instance's unless the
    environment names others (RIGBENCH_HOME, RIGBENCH_PYTHON, RIGBENCH_STATUS_FILE: a local
    instance's workspace and interpreter).
    """
    root, status = shlex.quote(spec.root), shlex.quote(str(STATUS_FILE))
    paths = (
        f'HOME_DIR="${{RIGBENCH_HOME:-{root}}}"; '
        'PY="${RIGBENCH_PYTHON:-$HOME_DIR/venv/bin/python}"; '
        f'STATUS="${{RIGBENCH_STATUS_FILE:-{status}}}"; '
    )
    probe = (
        'cd "$HOME_DIR/bundle" && "$PY" -m rigs.readiness '
        '--status-file "$STATUS" --service rigbench-rig.service'
    )
    fallback = (
        'if grep -q \'"phase": "failed"\' "$STATUS" 2>/dev/null; then cat "$STATUS"; exit 3; fi; '
        'cat "$STATUS" 2>/dev/null || echo \'{"phase": "not started"}\'; exit 1'
    )
    return (
        f'{paths}if [ -x "$PY" ] && [ -d "$HOME_DIR/bundle/rigs" ]; then {probe}; '
        f"else {fallback}; fi"
    )
