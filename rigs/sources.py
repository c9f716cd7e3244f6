"""Where a rig's model comes from: one checkpoint directory, however it was obtained.

A model spec is one of
- ``random:tiny`` / ``random:e2b``: seeded random weights from a config in ``rigs/configs/``,
  materialised once into the cache as a real checkpoint (no download), in
  ``$RIGBENCH_CACHE/models/<name>-seed<N>-<dtype>-<config digest>/``;
- a local directory holding a transformers checkpoint (config.json, safetensors, tokenizer);
- a Hugging Face repo id, optionally ``@revision`` (``google/gemma-4-E2B-it``), downloaded with
  ``huggingface_hub``; the token comes from ``HF_TOKEN`` or the root-only file the instance
  bootstrap writes, and is never logged.

Every rig (torch, JAX, ...) then loads ``ModelSource.path`` the same way.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

CONFIGS_DIR = Path(__file__).parent / "configs"
RANDOM_PREFIX = "random:"
DEFAULT_TOKEN_FILE = Path("/etc/rigbench/hf_token")
HF_ENDPOINT = "https://huggingface.co"
_HF_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<rev>[\w./-]+))?$")
# What a text-only rig needs from a hub repo; skips e.g. original/ or gguf copies.
_HF_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.jinja", "*.txt"]


class ModelSourceError(ValueError):
    """A model spec that cannot be resolved, with the reason."""


class ModelSource(BaseModel):
    """A resolved model: a checkpoint directory plus what to record about it."""

    model_config = ConfigDict(frozen=True)

    spec: str  # as given, e.g. "random:tiny"
    name: str  # the served model name, e.g. "random:tiny" or "google/gemma-4-E2B-it"
    path: Path  # checkpoint directory: config.json, *.safetensors, tokenizer files
    revision: str  # hub commit; "seed<N>-<dtype>-<config digest>" if random; "local"
    kind: str  # "random", "local" or "hub"


def cache_root() -> Path:
    return Path(os.environ.get("RIGBENCH_CACHE", Path.home() / ".cache" / "rigbench"))


def random_names() -> list[str]:
    return sorted(p.stem for p in CONFIGS_DIR.glob("*.json"))


def random_config(name: str) -> dict[str, Any]:
    """The `Gemma4TextConfig` keyword arguments for `random:<name>`."""
    path = CONFIGS_DIR / f"{name}.json"
    if not path.is_file():
        raise ModelSourceError(
            f"unknown random model {RANDOM_PREFIX}{name!r}; known: "
            + ", ".join(RANDOM_PREFIX + n for n in random_names())
        )
    config: dict[str, Any] = json.loads(path.read_text())
    return config


def default_random_dtype(name: str) -> str:
    # The tiny model runs on CPUs, where float32 is fast and exact; e2b is GPU-sized.
    return "float32" if name == "tiny" else "bfloat16"


def resolve_model(
    spec: str,
    *,
    seed: int = 0,
    dtype: str | None = None,
    cache_dir: Path | None = None,
    token: str | None = None,
) -> ModelSource:
    """Turn a model spec into a checkpoint directory, materialising or downloading it once.

    `seed` and `dtype` apply to random weights only (`dtype` is the stored dtype; rigs may
    cast when loading).
    """
    spec = spec.strip()
    if not spec:
        raise ModelSourceError("empty model spec")
    if spec.startswith(RANDOM_PREFIX):
        name = spec.removeprefix(RANDOM_PREFIX)
        return materialize_random(name, seed=seed, dtype=dtype, cache_dir=cache_dir)
    local = Path(spec).expanduser()
    if local.exists() or spec.startswith((".", "/", "~")):
        return _local_source(spec, local)
    match = _HF_ID.match(spec)
    if match is None:
        raise ModelSourceError(
            f"model spec {spec!r} is neither random:<name>, an existing directory, "
            "nor a Hugging Face id like google/gemma-4-E2B-it[@revision]"
        )
    return _hub_source(spec, match["repo"], match["rev"], cache_dir=cache_dir, token=token)


def check_spec(spec: str) -> None:
    """What resolve_model would refuse, found without materialising or downloading anything:
    a ModelSourceError naming the problem (an unknown random config, a missing directory, a
    malformed hub id)."""
    spec = spec.strip()
    if not spec:
        raise ModelSourceError("empty model spec")
    if spec.startswith(RANDOM_PREFIX):
        random_config(spec.removeprefix(RANDOM_PREFIX))
        return
    local = Path(spec).expanduser()
    if local.exists() or spec.startswith((".", "/", "~")):
        _local_source(spec, local)
        return
    if _HF_ID.match(spec) is None:
        raise ModelSourceError(
            f"model spec {spec!r} is neither random:<name>, an existing directory, "
            "nor a Hugging Face id like google/gemma-4-E2B-it[@revision]"
        )


def hub_repo(spec: str) -> str | None:
    """The Hugging Face repo a spec names without a revision (`google/gemma-4-E2B-it`), else
    None (random weights, a directory, a spec that pins `@revision` itself)."""
    spec = spec.strip()
    if spec.startswith(RANDOM_PREFIX) or spec.startswith((".", "/", "~")):
        return None
    if Path(spec).expanduser().exists():
        return None
    match = _HF_ID.match(spec)
    return match["repo"] if match is not None and match["rev"] is None else None


def pinned_spec(spec: str, revision: str | None) -> str:
    """The spec that loads `revision` of a hub model (`repo@revision`); others as they are."""
    return f"{spec}@{revision}" if revision and hub_repo(spec) else spec


def hub_commit(repo: str, revision: str | None, timeout_s: float = 10.0) -> str | None:
    """The commit `revision` (default: the main branch) of a hub repo is now, asked of the hub's
    API (`HF_ENDPOINT`, else huggingface.co; the standard library only, as the Lambda functions
    carry no hub client); None where the hub cannot be reached (offline, no route) or will not
    say without a token. A repo or revision the hub does not have: ModelSourceError."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return None
    endpoint = (os.environ.get("HF_ENDPOINT") or HF_ENDPOINT).rstrip("/")
    url = f"{endpoint}/api/models/{repo}/revision/{urllib.parse.quote(revision or 'main', '')}"
    request = urllib.request.Request(url)
    if token := read_token():
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            sha = json.load(response).get("sha")
    except urllib.error.HTTPError as err:
        # 401 and 403: a private or gated repo the caller has no token for (the Lambda functions
        # have none; the instances do), so not known here, as where the hub is unreachable.
        if err.code == 404:
            raise ModelSourceError(
                f"the hub has no {repo!r} at revision {revision or 'main'!r} (HTTP 404)"
            ) from None
        return None
    except (OSError, ValueError):  # unreachable (no route, no name, a timeout), or not JSON
        return None
    return sha if isinstance(sha, str) and sha else None


def _local_source(spec: str, path: Path) -> ModelSource:
    if not path.is_dir():
        raise ModelSourceError(f"model directory {spec!r} does not exist")
    check_checkpoint_dir(path)
    return ModelSource(
        spec=spec, name=path.name, path=path.resolve(), revision="local", kind="local"
    )


def check_checkpoint_dir(path: Path) -> None:
    missing = [
        what
        for what, ok in (
            ("config.json", (path / "config.json").is_file()),
            ("*.safetensors", any(path.glob("*.safetensors"))),
            ("tokenizer.json", (path / "tokenizer.json").is_file()),
        )
        if not ok
    ]
    if missing:
        raise ModelSourceError(
            f"{path} is not a checkpoint directory: missing {', '.join(missing)}"
        )


def read_token(token_file: Path | None = None) -> str | None:
    """The Hugging Face token from HF_TOKEN, else from the bootstrap's root-only file."""
    if token := os.environ.get("HF_TOKEN"):
        return token
    path = token_file or Path(os.environ.get("RIGBENCH_HF_TOKEN_FILE", DEFAULT_TOKEN_FILE))
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def _hub_source(
    spec: str, repo: str, revision: str | None, *, cache_dir: Path | None, token: str | None
) -> ModelSource:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError

    try:
        path = Path(
            snapshot_download(
                repo,
                revision=revision,
                allow_patterns=_HF_PATTERNS,
                cache_dir=(cache_dir or cache_root()) / "hub",
                token=token or read_token(),
            )
        )
    except (HfHubHTTPError, OSError, ValueError) as err:
        # The message of these errors carries the URL, never the token.
        raise ModelSourceError(f"cannot download {repo!r}: {type(err).__name__}: {err}") from err
    check_checkpoint_dir(path)
    return ModelSource(spec=spec, name=repo, path=path, revision=path.name, kind="hub")


def materialize_random(
    name: str, *, seed: int = 0, dtype: str | None = None, cache_dir: Path | None = None
) -> ModelSource:
    """Write `random:<name>` once as a checkpoint directory; later calls reuse it.

    Written into a temporary directory and renamed, under a file lock, so concurrent
    processes neither collide nor see half a checkpoint.
    """
    config = random_config(name)
    dtype = dtype or default_random_dtype(name)
    # The config's digest is part of the name, so editing a config never reuses stale weights.
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:8]
    device = _init_device()
    # Weights drawn on a GPU differ from the CPU's for the same seed: the revision says which.
    revision = f"seed{seed}-{dtype}-{digest}" + ("" if device == "cpu" else f"-{device}")
    models = (cache_dir or cache_root()) / "models"
    target = models / f"{name}-{revision}"
    source = ModelSource(
        spec=f"{RANDOM_PREFIX}{name}",
        name=f"{RANDOM_PREFIX}{name}",
        path=target,
        revision=revision,
        kind="random",
    )
    if (target / "config.json").is_file():
        return source
    models.mkdir(parents=True, exist_ok=True)
    with _locked(models / f".{target.name}.lock"):
        if (target / "config.json").is_file():
            return source
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=models))
        try:
            _write_random_checkpoint(tmp, config, seed=seed, dtype=dtype, device=device)
            tmp.rename(target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return source


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _init_device() -> str:
    """Where random weights are drawn: a GPU when there is one (e2b takes minutes on a CPU)."""
    if os.environ.get("RIGBENCH_RANDOM_INIT_DEVICE"):
        return os.environ["RIGBENCH_RANDOM_INIT_DEVICE"]
    try:
        import torch
    except ImportError:
        return "cpu"  # _write_random_checkpoint says what is missing
    return "cuda" if torch.cuda.is_available() else "cpu"


def _write_random_checkpoint(
    out: Path, config: dict[str, Any], *, seed: int, dtype: str, device: str
) -> None:
    # Heavy imports stay here: resolving a directory or hub id needs neither torch nor
    # transformers (the vllm rig's launcher runs without them).
    try:
        import torch
        from transformers import Gemma4ForCausalLM, Gemma4TextConfig, GenerationConfig

        from rigs.random_tokenizer import build_tokenizer
    except ImportError as err:
        raise ModelSourceError(
            f"random models are built with torch and transformers ({err}); "
            "install the project's torch extra"
        ) from err

    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype) or not torch_dtype.is_floating_point:
        raise ModelSourceError(f"unknown floating dtype {dtype!r}")
    text_config = Gemma4TextConfig(**config)
    # Built directly in the target dtype (e2b in bf16 is ~9 GB; float32 would double it).
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch_dtype)
    try:
        torch.manual_seed(seed)
        with torch.device(device):
            model = Gemma4ForCausalLM(text_config).eval()
    finally:
        torch.set_default_dtype(previous)
    model.generation_config = GenerationConfig(
        bos_token_id=text_config.bos_token_id,
        eos_token_id=text_config.eos_token_id,
        pad_token_id=text_config.pad_token_id,
        do_sample=False,
    )
    model.save_pretrained(out, safe_serialization=True, max_shard_size="2GB")
    del model
    from rigs.random_tokenizer import build_tokenizer  # transformers: heavy, import on use

    build_tokenizer(
        vocab_size=text_config.vocab_size,
        pad_id=_single_id(text_config.pad_token_id, "pad_token_id"),
        eos_id=_single_id(text_config.eos_token_id, "eos_token_id"),
        bos_id=_single_id(text_config.bos_token_id, "bos_token_id"),
        model_max_length=text_config.max_position_embeddings,
    ).save_pretrained(out)


def _single_id(value: int | list[int] | None, what: str) -> int:
    if isinstance(value, list):
        value = value[0] if value else None
    if value is None:
        raise ModelSourceError(f"random model config has no {what}")
    return value
