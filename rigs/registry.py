"""The rigs there are: every folder under `rigs/` holding a `rig.toml`."""

from __future__ import annotations

from pathlib import Path

from rigs.contract import RigDefinition, RigDefinitionError, load_definition

RIGS_DIR = Path(__file__).parent
LABEL_SEP = "@"  # a sweep may list a rig twice, `jax` and `jax@b`: one definition, two labels


def definition_name(entry: str) -> str:
    """The rig a sweep entry runs: `jax@b` runs `jax` (its rows are labelled `jax@b`)."""
    return entry.split(LABEL_SEP, 1)[0]


def rig_folders(root: Path = RIGS_DIR) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/rig.toml"))


def discover(root: Path = RIGS_DIR) -> dict[str, RigDefinition]:
    return {rig.name: rig for rig in map(load_definition, rig_folders(root))}


def get_rig(name: str, root: Path = RIGS_DIR) -> RigDefinition:
    """The definition of a rig, by its name or a sweep entry naming it (`jax@b`)."""
    folder = root / definition_name(name)
    if not (folder / "rig.toml").is_file():
        known = ", ".join(p.name for p in rig_folders(root)) or "none"
        raise RigDefinitionError(f"unknown rig {name!r}; known rigs: {known}")
    return load_definition(folder)
