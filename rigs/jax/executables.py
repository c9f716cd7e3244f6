"""Compiled programs kept on disk and loaded again without tracing, lowering or compiling.

JAX's persistent compilation cache skips XLA's compile, keyed by each program's HLO, but
tracing and lowering the model to get that HLO is most of a warm start on a CPU
(random:tiny: 8 of 17 CPU-s). A program serialized after it is first built loads in
milliseconds instead. Its key is everything the program is built from: this package's
source, the JAX, jaxlib, numpy and ml_dtypes versions, the device, the XLA_* and JAX_*
settings in the environment, and the structure, shapes, dtypes and static values of the
arguments it is lowered for. A change in any of them builds it anew; a file that does not
load is built anew and replaced.

It takes the place of that persistent cache, which must be off while programs are kept: a
program the persistent cache loaded serializes without its code on a CPU ("Function ... not
found" when the next start runs it), so none is kept while it is on.

Loading unpickles: only files this cache wrote under its own directory are read.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import pickle
import tempfile
import threading
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.experimental import serialize_executable

log = logging.getLogger("rigs.jax")

SOURCES = Path(__file__).parent
SUFFIX = ".jaxexe"


def fingerprint(device: jax.Device) -> str:
    """What every program built on `device` by this process depends on besides its arguments."""
    digest = hashlib.sha256()
    for source in sorted(SOURCES.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    versions = {d: importlib.metadata.version(d) for d in ("jax", "jaxlib", "numpy", "ml_dtypes")}
    backend = (device.platform, device.client.platform_version, device.device_kind, device.id)
    flags = {k: v for k, v in os.environ.items() if k.startswith(("XLA_", "JAX_"))}
    digest.update(repr((versions, backend, sorted(flags.items()))).encode())
    digest.update(repr(jax.config.values["jax_enable_x64"]).encode())
    return digest.hexdigest()


def _describe(leaf: Any) -> str:
    """An argument as the program sees it: an array's dtype and shape, any other value itself."""
    if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
        return f"{np.dtype(leaf.dtype).str}{tuple(leaf.shape)}"
    return repr(leaf)


class ExecutableCache:
    """`fn.lower(*args, **kwargs).compile()` for jitted functions, kept under `root`."""

    def __init__(self, root: Path, device: jax.Device) -> None:
        self.root = root
        self.device = device
        self._fingerprint = fingerprint(device)
        self._lock = threading.Lock()
        self.loaded = 0  # programs read back from disk rather than built
        settings = jax.config.values
        self.keeps = not (
            settings["jax_enable_compilation_cache"] and settings["jax_compilation_cache_dir"]
        )
        if not self.keeps:
            log.warning("JAX's persistent compilation cache is on: no program is kept in %s", root)

    def compiled(self, fn: Any, /, *args: Any, **kwargs: Any) -> jax.stages.Compiled:
        path = self.root / f"{self._key(fn, args, kwargs)}{SUFFIX}"
        program = self._load(path)
        if program is not None:
            return program
        program = fn.lower(*args, **kwargs).compile()
        if self.keeps:
            self._store(path, program)
        return program

    def _key(self, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        leaves, structure = jax.tree.flatten((args, kwargs))
        name = f"{fn.__module__}.{fn.__qualname__}"
        signature = repr((name, str(structure), [_describe(leaf) for leaf in leaves]))
        return hashlib.sha256(f"{self._fingerprint}\0{signature}".encode()).hexdigest()

    def _load(self, path: Path) -> jax.stages.Compiled | None:
        try:
            with path.open("rb") as handle:
                serialized, in_tree, out_tree = pickle.load(handle)
            program = serialize_executable.deserialize_and_load(
                serialized, in_tree, out_tree, execution_devices=[self.device]
            )
        except FileNotFoundError:
            return None
        except Exception as err:  # a file cut short or from an incompatible build: rebuild
            log.warning("building %s again: it did not load (%r)", path.name, err)
            return None
        with self._lock:
            self.loaded += 1
        return program

    def _store(self, path: Path, program: jax.stages.Compiled) -> None:
        """Keep `program` at `path`; one that cannot be kept (a backend that cannot serialize,
        a folder that cannot be written) is only logged: the rig serves it all the same."""
        try:
            self._write(path, pickle.dumps(serialize_executable.serialize(program)))
        except (ValueError, NotImplementedError, OSError) as err:
            log.warning("cannot keep %s in %s: %s", path.name, self.root, err)

    def _write(self, path: Path, data: bytes) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        # written whole under another name, then renamed: a concurrent start never reads half
        fd, partial = tempfile.mkstemp(dir=self.root, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(partial, path)
        except BaseException:
            Path(partial).unlink(missing_ok=True)
            raise


def build(fn: Any, executables: ExecutableCache | None, /, *args: Any, **kwargs: Any) -> Any:
    """`fn`'s program for these arguments: kept in `executables` when given, else compiled."""
    if executables is None:
        return fn.lower(*args, **kwargs).compile()
    return executables.compiled(fn, *args, **kwargs)
