"""The rigs there are: every folder under `rigs/` holding a `rig.toml`."""

from __future__ import annotations

from pathlib import Path

from rigs.contract import RigDefinition, RigDefinitionError, load_definition

RIGS_DIR = Path(__file__).parent


def rig_folders(root: Path = RIGS_DIR) -> list[Path]:
    return sorted(p.parent for p in root.glob("*/rig.toml"))


def discover(root: Path = RIGS_DIR) -> dict[str, RigDefinition]:
    return {rig.name: rig for rig in map(load_definition, rig_folders(root))}


def get_rig(name: str, root: Path = RIGS_DIR) -> RigDefinition:
    folder = root / name
    if not (folder / "rig.toml").is_file():
        known = ", ".join(p.name for p in rig_folders(root)) or "none"
        raise RigDefinitionError(f"unknown rig {name!r}; known rigs: {known}")
    return load_definition(folder)
