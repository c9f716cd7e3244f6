"""Programs kept by rigs/jax/executables.py, each step in a new process as a rig start is
(this worker's JAX has the tests' persistent compilation cache on, which keeps nothing)."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
PROGRAM = """
import json, sys
from pathlib import Path
import jax, jax.numpy as jnp
from rigs.jax.executables import ExecutableCache, build

@jax.jit
def step(x, w):
    return jnp.tanh(x @ w).sum(axis=1)

cache = ExecutableCache(Path(sys.argv[1]), jax.devices()[0])
outputs = {}
for rows in map(int, sys.argv[2:]):
    x = jnp.arange(rows * 8, dtype=jnp.float32).reshape(rows, 8) / 64
    outputs[rows] = build(step, cache, x, jnp.eye(8) * 0.5)(x, jnp.eye(8) * 0.5).tolist()
print(json.dumps({"loaded": cache.loaded, "kept": cache.keeps, "outputs": outputs}))
"""


def run(cache: Path, *rows: int, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The program run once in a new process; JAX's persistent cache off unless `env` says."""
    if env is None:
        env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(cache), *map(str, rows)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["log"] = done.stderr
    return result


def test_kept_programs_load_in_a_new_process_and_compute_the_same(tmp_path: Path) -> None:
    first = run(tmp_path, 2, 3)
    assert first["loaded"] == 0
    kept = sorted(tmp_path.glob("*.jaxexe"), key=lambda p: p.stat().st_mtime_ns)
    assert len(kept) == 2  # one per argument shape
    again = run(tmp_path, 2, 3, 5)
    assert again["loaded"] == 2  # the 5-row program is new: built and kept
    assert len(list(tmp_path.glob("*.jaxexe"))) == 3
    assert {k: again["outputs"][k] for k in ("2", "3")} == first["outputs"]

    whole = kept[0].read_bytes()
    kept[0].write_bytes(whole[:100])  # a file cut short is built again and replaced
    rebuilt = run(tmp_path, 2, 3)
    assert rebuilt["loaded"] == 1
    assert "did not load" in rebuilt["log"]
    assert rebuilt["outputs"] == first["outputs"]
    assert len(kept[0].read_bytes()) == len(whole)


def test_nothing_is_kept_while_the_persistent_compilation_cache_is_on(tmp_path: Path) -> None:
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "xla")}
    done = run(tmp_path / "programs", 2, env=env)
    assert done["kept"] is False
    assert not (tmp_path / "programs").exists()


def test_a_folder_that_cannot_be_written_keeps_nothing_and_loses_nothing(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    done = run(not_a_folder, 2)
    assert done["loaded"] == 0
    assert "cannot keep" in done["log"]
    assert done["outputs"] == run(tmp_path / "programs", 2)["outputs"]
