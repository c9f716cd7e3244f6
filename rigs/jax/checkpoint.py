"""Load a transformers Gemma 4 checkpoint directory into `model.Params`.

Tensors are read one at a time from memory-mapped safetensors files and copied straight
to the device, so the host never holds a second copy of the weights. The name table maps
every transformers parameter to a place in the tree and fails loudly on an unmapped,
missing or duplicated key, and on any shape that differs from the config's.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from rigs.jax.model import Config, Layer, Params, layer_shapes, param_shapes

SAFETENSORS_DTYPES = {
    "F64": np.dtype(np.float64),  # float64 parity experiments on a CPU
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
}

# Prefixes of the text decoder in a Gemma4ForCausalLM and a Gemma4ForConditionalGeneration.
TEXT_PREFIXES = ("model.language_model.", "model.")
# Multimodal towers that a text-only port skips on purpose.
IGNORED_PREFIXES = (
    "model.vision_tower.",
    "model.audio_tower.",
    "model.embed_vision.",
    "model.embed_audio.",
)


class CheckpointError(ValueError):
    """The checkpoint does not match the config or the name table."""


@dataclass(frozen=True)
class Tensor:
    file: Path
    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    start: int  # byte offset of the data in the file
    end: int


def read_index(directory: Path) -> dict[str, Tensor]:
    """Every tensor's location across the directory's *.safetensors files."""
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"no *.safetensors files in {directory}")
    index: dict[str, Tensor] = {}
    for path in files:
        with path.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            if name in index:
                raise CheckpointError(f"tensor {name} appears in {index[name].file} and {path}")
            if entry["dtype"] not in SAFETENSORS_DTYPES:
                raise CheckpointError(f"tensor {name} has unsupported dtype {entry['dtype']}")
            start, end = entry["data_offsets"]
            index[name] = Tensor(
                path,
                SAFETENSORS_DTYPES[entry["dtype"]],
                tuple(entry["shape"]),
                8 + size + start,
                8 + size + end,
            )
    return index


def read_tensor(t: Tensor) -> np.ndarray[Any, Any]:
    """A read-only view of the tensor's bytes in the memory-mapped file (no copy)."""
    count = int(np.prod(t.shape)) if t.shape else 1
    if t.end - t.start != count * t.dtype.itemsize:
        raise CheckpointError(f"{t.file}: byte range does not match shape {t.shape}")
    data = np.memmap(t.file, dtype=t.dtype, mode="r", offset=t.start, shape=(count,))
    return data.reshape(t.shape)


# --- the name table ---------------------------------------------------------------------

# transformers name (after the text prefix) -> (tree field, part of a fused weight or None)
LAYER_NAMES = {
    "self_attn.q_proj.weight": ("w_qkv", 0),
    "self_attn.k_proj.weight": ("w_qkv", 1),
    "self_attn.v_proj.weight": ("w_qkv", 2),
    "self_attn.q_norm.weight": ("q_norm", None),
    "self_attn.k_norm.weight": ("k_norm", None),
    "self_attn.o_proj.weight": ("w_o", None),
    "mlp.gate_proj.weight": ("w_gate_up", 0),
    "mlp.up_proj.weight": ("w_gate_up", 1),
    "mlp.down_proj.weight": ("w_down", None),
    "input_layernorm.weight": ("ln_attn_in", None),
    "post_attention_layernorm.weight": ("ln_attn_out", None),
    "pre_feedforward_layernorm.weight": ("ln_mlp_in", None),
    "post_feedforward_layernorm.weight": ("ln_mlp_out", None),
    "per_layer_input_gate.weight": ("w_ple_gate", None),
    "per_layer_projection.weight": ("w_ple_proj", None),
    "post_per_layer_input_norm.weight": ("ln_ple", None),
    "layer_scalar": ("scalar", None),
}
TOP_NAMES = {
    "embed_tokens.weight": "embed",
    "embed_tokens_per_layer.weight": "ple_embed",
    "per_layer_model_projection.weight": "ple_proj",
    "per_layer_projection_norm.weight": "ple_norm",
    "norm.weight": "final_norm",
}
# Shared layers read another layer's cache; checkpoints may still carry these (unused).
SHARED_LAYER_UNUSED = {"self_attn.k_proj.weight", "self_attn.v_proj.weight"}
SHARED_LAYER_UNUSED |= {"self_attn.k_norm.weight", "self_attn.v_norm.weight"}
LAYER_KEY = re.compile(r"layers\.(\d+)\.(.+)")


@dataclass(frozen=True)
class Target:
    layer: int | None  # None: a top-level weight
    field: str
    part: int | None  # index within a fused weight
    shape: tuple[int, ...]  # expected shape of this checkpoint tensor


def part_shapes(cfg: Config, i: int, name: str) -> list[tuple[int, ...]]:
    """Shapes of the checkpoint tensors that make up one fused layer weight."""
    d, h, k, e, f = (
        cfg.hidden_size,
        cfg.num_heads,
        cfg.num_kv_heads[i],
        cfg.head_dims[i],
        cfg.mlp_width(i),
    )
    if name == "w_qkv":
        return [(h * e, d)] if cfg.is_shared(i) else [(h * e, d), (k * e, d), (k * e, d)]
    assert name == "w_gate_up"
    return [(f, d), (f, d)]


def build_table(cfg: Config, names: list[str]) -> tuple[dict[str, Target], list[str]]:
    """Map checkpoint names to targets. Returns the table and the names deliberately skipped;
    raises on an unmapped name or an expected weight that the checkpoint lacks."""
    prefix = next(
        (p for p in TEXT_PREFIXES if any(n.startswith(p + "layers.") for n in names)), None
    )
    if prefix is None:
        raise CheckpointError("no decoder layers found (expected model.layers.* names)")
    expected: dict[str, Target] = {}
    for short, field in TOP_NAMES.items():
        shape = param_shapes(cfg)[field]
        if shape is not None:
            expected[prefix + short] = Target(None, field, None, shape)
    if not cfg.tie_word_embeddings:
        expected["lm_head.weight"] = Target(
            None, "lm_head", None, (cfg.vocab_size, cfg.hidden_size)
        )
    for i in range(cfg.num_layers):
        shapes = layer_shapes(cfg, i)
        for short, (field, part) in LAYER_NAMES.items():
            if shapes[field] is None:
                continue
            if part is None:
                shape = shapes[field]
                assert shape is not None
            else:
                parts = part_shapes(cfg, i, field)
                if part >= len(parts):
                    continue  # k/v of a shared layer
                shape = parts[part]
            expected[f"{prefix}layers.{i}.{short}"] = Target(i, field, part, shape)

    table: dict[str, Target] = {}
    skipped: list[str] = []
    for name in names:
        if name in expected:
            table[name] = expected[name]
        elif (
            name.startswith(IGNORED_PREFIXES)
            or (cfg.tie_word_embeddings and name == "lm_head.weight")
            or (
                (m := LAYER_KEY.fullmatch(name.removeprefix(prefix)))
                and (cfg.is_shared(int(m[1])) and m[2] in SHARED_LAYER_UNUSED)
            )
        ):
            skipped.append(name)
        else:
            raise CheckpointError(f"checkpoint tensor {name!r} has no place in the JAX model")
    missing = sorted(set(expected) - set(table))
    if missing:
        raise CheckpointError(f"checkpoint lacks {len(missing)} weights, e.g. {missing[:5]}")
    return table, skipped


# --- loading --------------------------------------------------------------------------


def load_config(directory: str | Path) -> Config:
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{path} not found")
    return Config.from_hf(json.loads(path.read_text()))


def load_params(
    directory: str | Path,
    cfg: Config,
    dtype: Any,
    device: jax.Device | None = None,
    on_tensor: Callable[[str], None] | None = None,
) -> Params:
    """Read the checkpoint into device arrays of `dtype`, one tensor at a time."""
    index = read_index(Path(directory))
    table, _ = build_table(cfg, list(index))
    device = device or jax.devices()[0]
    top: dict[str, jax.Array] = {}
    layers: list[dict[str, Any]] = [{} for _ in range(cfg.num_layers)]
    parts: dict[tuple[int, str], dict[int, jax.Array]] = {}
    for name, target in _in_file_order(table, index):
        t = index[name]
        if t.shape != target.shape:
            raise CheckpointError(f"{name}: shape {t.shape}, config expects {target.shape}")
        array = jax.device_put(read_tensor(t), device).astype(dtype)
        if on_tensor is not None:
            on_tensor(name)
        if target.layer is None:
            top[target.field] = array
        elif target.part is None:
            layers[target.layer][target.field] = array
        else:
            got = parts.setdefault((target.layer, target.field), {})
            got[target.part] = array
            if len(got) == len(part_shapes(cfg, target.layer, target.field)):
                fused = jnp.concatenate([got[p] for p in sorted(got)], axis=0)
                layers[target.layer][target.field] = fused
                del parts[(target.layer, target.field)]
    assert not parts, f"fused weights left incomplete: {sorted(parts)}"
    built = []
    for i, fields in enumerate(layers):
        for field, shape in layer_shapes(cfg, i).items():
            if shape is None:
                fields[field] = None
            elif fields[field].shape != shape:  # the fused ones, checked once more
                raise CheckpointError(f"layer {i} {field}: {fields[field].shape} != {shape}")
        built.append(Layer(**fields))
    for field, shape in param_shapes(cfg).items():
        top.setdefault(field, None)  # type: ignore[arg-type]
        assert (top[field] is None) == (shape is None), field
    return Params(**top, layers=tuple(built))


def _in_file_order(
    table: dict[str, Target], index: dict[str, Tensor]
) -> Iterator[tuple[str, Target]]:
    """Sequential reads of each file let the page cache stream the checkpoint."""
    yield from sorted(table.items(), key=lambda kv: (str(index[kv[0]].file), index[kv[0]].start))
