"""The rig + harness bundle instances fetch: a reproducible tar.gz named by its SHA-256.

`rigbench deploy` (and the local emulation) upload it to `bundle/<sha256>.tar.gz` with a
manifest at `bundle/current.json`; the first state reads the manifest to know which rigs
exist, and the hash goes into every result's provenance.
"""

import gzip
import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rigbench.project_files import REPO_ROOT

BUNDLED = ("harness", "hardware", "rigs", "rigbench", "functions", "pyproject.toml", "README.md")
RIG_DEFINITION = "rig.toml"
MANIFEST_KEY = "bundle/current.json"
SKIPPED_PARTS = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"}


@dataclass(frozen=True)
class Bundle:
    sha256: str
    data: bytes
    rigs: list[str]

    @property
    def key(self) -> str:
        return f"bundle/{self.sha256}.tar.gz"

    def manifest(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "key": self.key, "rigs": self.rigs}


def rig_names(root: Path = REPO_ROOT) -> list[str]:
    """Rigs are the folders under rigs/ that hold a definition."""
    rigs_dir = root / "rigs"
    if not rigs_dir.is_dir():
        return []
    return sorted(p.parent.name for p in rigs_dir.glob(f"*/{RIG_DEFINITION}"))


def _files(root: Path) -> list[Path]:
    found: list[Path] = []
    for name in BUNDLED:
        path = root / name
        if path.is_file():
            found.append(path)
        elif path.is_dir():
            found.extend(
                p
                for p in path.rglob("*")
                if p.is_file()
                and not SKIPPED_PARTS & set(p.relative_to(root).parts)
                and p.suffix != ".pyc"
            )
    return sorted(found)


def build_bundle(root: Path = REPO_ROOT) -> Bundle:
    """The same tree always gives the same bytes: sorted entries, zeroed times and owners."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in _files(root):
            info = tarfile.TarInfo(str(path.relative_to(root)))
            data = path.read_bytes()
            info.size = len(data)
            info.mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            tar.addfile(info, io.BytesIO(data))
    compressed = gzip.compress(raw.getvalue(), mtime=0)
    return Bundle(
        sha256=hashlib.sha256(compressed).hexdigest(), data=compressed, rigs=rig_names(root)
    )


def upload_bundle(s3: Any, bucket: str, bundle: Bundle) -> dict[str, Any]:
    s3.put_object(Bucket=bucket, Key=bundle.key, Body=bundle.data)
    manifest = bundle.manifest()
    s3.put_object(
        Bucket=bucket,
        Key=MANIFEST_KEY,
        Body=json.dumps(manifest).encode(),
        ContentType="application/json",
    )
    return manifest
