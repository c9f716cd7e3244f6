"""The harness version stamped on every report: package version + hash of the harness code.

The hash changes whenever any harness module changes, so two reports with equal versions were
measured by the same code even between releases.
"""

from __future__ import annotations

import functools
import hashlib
import tomllib
from importlib import metadata
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def _package_version() -> str:
    try:
        return metadata.version("rigbench")
    except metadata.PackageNotFoundError:
        pyproject = _HERE.parent / "pyproject.toml"
        if pyproject.is_file():
            return str(tomllib.loads(pyproject.read_text())["project"]["version"])
        return "0+unknown"


@functools.cache
def harness_version() -> str:
    digest = hashlib.sha256()
    for source in sorted(_HERE.glob("*.py")):
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    return f"{_package_version()}+{digest.hexdigest()[:10]}"
