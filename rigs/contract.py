"""The rig contract in code: `rigs/<name>/rig.toml` parsed into a `RigDefinition`.

A rig folder declares how to install its runtime (a bash template), how to serve (a
command line templated with the model, port, dtype and the rig's settings), its
environment, and how to tell it is ready. Every rig serves the API of docs/design.md on
`port` (8000).

Serve command placeholders: `{model}` (the spec as given, also the served name),
`{model_path}` (the resolved checkpoint directory; naming it makes the launcher resolve
the model first), `{host}`, `{port}`, `{dtype}`, `{python}` (the rig venv's interpreter),
`{rig_venv}`, and every key of `[serve.settings]` (each declared with its type, bounds and
default: rigs/settings.py).
"""

from __future__ import annotations

import string
import tomllib
from pathlib import Path
from typing import Annotated, Literal

import jinja2
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rigs.settings import Scalar, SettingError, SettingSpec, check_values

# The context every rig must hold for the harness's agreement probe (harness/agreement.py): its
# longest prompt (199 tokens with the random:* tokenizer, which splits text finer than Gemma's
# own) and answer fit (tests/harness/test_agreement.py); small, so that rigs on a CPU need not
# compile longer buckets for it. Here, not in the harness, so that a boot's plan (functions/)
# sizes a rig for it without the harness.
PROBE_CONTEXT_TOKENS = 256

Architecture = Literal["x86_64", "aarch64"]
Accelerator = Literal["cuda", "cpu"]
BUILTIN_PLACEHOLDERS = frozenset(
    {"model", "model_path", "host", "port", "dtype", "python", "rig_venv"}
)


class RigDefinitionError(ValueError):
    """A rig folder whose definition is missing or invalid."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


AmiRef = Annotated[str, Field(pattern=r"^(ami-[0-9a-f]{8,17}|/[\w/.-]+)$")]
# Where an architecture's GPU code comes from, for `rigbench rig check`:
#   "wheel:torch==2.14.0"  a PyPI wheel (its fatbins read by benchmarks/wheel_kernels.py)
#   "built:7.5"            compiled from source for these capabilities (at bake time)
#   "image:/opt/pytorch"   shipped by the instance's AMI (read on the instance)
GpuCodeSource = Annotated[
    str, Field(pattern=r"^(wheel:[\w.-]+==[\w.+-]+|built:[\d.,]+|image:/\S+)$")
]


class InstallSpec(_Strict):
    script: str  # a Jinja2 template of a bash script, relative to the rig folder
    # Pinned versions and sources the script reads, e.g. torch_version, git_url.
    vars: dict[str, Scalar] = Field(default_factory=dict)
    # Per architecture, an AMI with this rig already installed (its marker file present, so
    # the script is a no-op): an AMI id or an SSM parameter name that `rigbench bake` writes
    # and the launcher resolves. An architecture listed here has no other way to install:
    # a sweep refuses to launch it until the image exists.
    prebuilt_ami: dict[Architecture, AmiRef] = Field(default_factory=dict)
    # Per architecture, what provides the GPU code (see GpuCodeSource).
    gpu_code: dict[Architecture, list[GpuCodeSource]] = Field(default_factory=dict)
    # The binaries the runtime cannot work without (fnmatch patterns on their paths): each
    # must carry code the GPU runs. Others (FlashAttention for sm_80+, ...) may lack it.
    gpu_core: list[str] = Field(default_factory=list)


class ServeSpec(_Strict):
    command: Annotated[list[str], Field(min_length=1)]
    env: dict[str, str] = Field(default_factory=dict)
    dtypes: Annotated[list[str], Field(min_length=1)]
    default_dtype: str = "auto"
    # e.g. {"7.5" = "float16"}: Turing has no bfloat16, so "auto" must not pick it there.
    dtype_for_compute_capability: dict[str, str] = Field(default_factory=dict)
    settings: dict[str, SettingSpec] = Field(default_factory=dict)
    # The setting that bounds how many sequences the rig serves at once (vLLM's
    # max_num_seqs, ...): a sweep sets it to the same value for every rig.
    concurrency_setting: str | None = None


class ReadinessSpec(_Strict):
    health_path: str = "/health"
    completion_path: str = "/v1/completions"
    timeout_s: Annotated[float, Field(gt=0)] = 1800.0
    poll_s: Annotated[float, Field(gt=0)] = 5.0
    probe_max_tokens: Annotated[int, Field(ge=1)] = 4


class RigDefinition(_Strict):
    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]*$")]
    description: str
    runtime: str  # the package that does the serving, e.g. "vllm" or "transformers"
    version: str  # its pinned version
    architectures: Annotated[list[Architecture], Field(min_length=1)]
    accelerators: Annotated[list[Accelerator], Field(min_length=1)]
    port: int = 8000
    install: InstallSpec
    serve: ServeSpec
    readiness: ReadinessSpec = ReadinessSpec()
    folder: Path = Field(exclude=True)

    @field_validator("port")
    @classmethod
    def _port_8000(cls, value: int) -> int:
        if value != 8000:
            raise ValueError("every rig serves on port 8000 (the contract)")
        return value

    def placeholders(self) -> set[str]:
        return {
            name
            for part in self.serve.command
            for _, name, _, _ in string.Formatter().parse(part)
            if name is not None
        }

    def needs_model_path(self) -> bool:
        return "model_path" in self.placeholders()

    def pick_dtype(self, requested: str | None, compute_capability: str | None) -> str:
        """The dtype to serve: the request, else one forced by the GPU, else the default."""
        if requested is not None:
            if requested not in self.serve.dtypes:
                raise RigDefinitionError(
                    f"rig {self.name} serves dtypes {self.serve.dtypes}, not {requested!r}"
                )
            return requested
        if compute_capability in self.serve.dtype_for_compute_capability:
            return self.serve.dtype_for_compute_capability[compute_capability]
        return self.serve.default_dtype

    def setting_defaults(self) -> dict[str, Scalar]:
        return {key: spec.default for key, spec in self.serve.settings.items()}

    def check_settings(self, settings: dict[str, Scalar]) -> None:
        """RigDefinitionError naming an unknown key, or rig, key and value of one its
        declaration refuses."""
        unknown = set(settings) - set(self.serve.settings)
        if unknown:
            raise RigDefinitionError(
                f"rig {self.name} has no setting(s) {sorted(unknown)}; "
                f"known: {sorted(self.serve.settings)}"
            )
        try:
            check_values(self.name, self.serve.settings, settings)
        except SettingError as err:
            raise RigDefinitionError(str(err)) from None

    def settings_from_text(self, settings: dict[str, str]) -> dict[str, Scalar]:
        """Settings given as text (`--set max_batch=8`), each read as its declared type (an
        unknown key stays text, for `check_settings` to name)."""
        specs = self.serve.settings
        return {k: specs[k].from_text(v) if k in specs else v for k, v in settings.items()}

    def render_serve_command(
        self,
        *,
        model: str,
        port: int,
        dtype: str,
        python: str,
        rig_venv: str,
        host: str = "127.0.0.1",
        model_path: str | None = None,
        settings: dict[str, Scalar] | None = None,
    ) -> list[str]:
        overrides = settings or {}
        self.check_settings(overrides)
        values: dict[str, Scalar] = {**self.setting_defaults(), **overrides}
        values.update(model=model, port=port, dtype=dtype, python=python, rig_venv=rig_venv)
        values["host"] = host
        if model_path is not None:
            values["model_path"] = model_path
        elif self.needs_model_path():
            raise RigDefinitionError(f"rig {self.name} needs the resolved model path")
        return [
            part.format(**{k: _text(v) for k, v in values.items()}) for part in self.serve.command
        ]

    def render_install(self, **context: Scalar) -> str:
        """The install script, with `version`, `[install.vars]` and `context` filled in."""
        path = self.folder / self.install.script
        env = jinja2.Environment(
            undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False
        )
        template = env.from_string(path.read_text())
        try:
            return template.render(
                rig=self.name, version=self.version, **self.install.vars, **context
            )
        except jinja2.UndefinedError as err:
            raise RigDefinitionError(f"{path}: {err.message}") from err


def _text(value: Scalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def load_definition(folder: Path) -> RigDefinition:
    path = folder / "rig.toml"
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise RigDefinitionError(f"{folder} has no rig.toml") from None
    except tomllib.TOMLDecodeError as err:
        raise RigDefinitionError(f"{path}: {err}") from err
    try:
        rig = RigDefinition.model_validate({**raw, "folder": folder})
    except ValidationError as err:
        raise RigDefinitionError(f"{path}: {err}") from err
    if rig.name != folder.name:
        raise RigDefinitionError(f"{path}: name {rig.name!r} differs from its folder")
    if not (folder / rig.install.script).is_file():
        raise RigDefinitionError(f"{path}: install script {rig.install.script!r} is missing")
    unknown = rig.placeholders() - BUILTIN_PLACEHOLDERS - set(rig.serve.settings)
    if unknown:
        raise RigDefinitionError(f"{path}: serve.command uses unknown {sorted(unknown)}")
    try:
        check_values(rig.name, rig.serve.settings, rig.setting_defaults())
    except SettingError as err:
        raise RigDefinitionError(f"{path}: a default its own declaration refuses: {err}") from None
    concurrency = rig.serve.concurrency_setting
    if concurrency is not None and concurrency not in rig.serve.settings:
        raise RigDefinitionError(f"{path}: concurrency_setting {concurrency!r} is not a setting")
    if rig.serve.default_dtype not in rig.serve.dtypes:
        raise RigDefinitionError(f"{path}: default_dtype is not one of serve.dtypes")
    return rig
