"""Loading transformers checkpoints: the name table refuses anything it cannot place."""

import json
import shutil
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from safetensors.torch import save_file as save_torch

from rigs.jax import checkpoint, model
from tests.rigs.jax.conftest import torch


def copy_with(src: Path, dst: Path, change: Any) -> Path:
    """dst = src's config and tokenizer files plus its tensors passed through `change`."""
    dst.mkdir()
    for f in src.iterdir():
        if f.suffix != ".safetensors":
            shutil.copy(f, dst / f.name)
    tensors = load_file(src / "model.safetensors")
    change(tensors)
    save_file(tensors, dst / "model.safetensors")
    return dst


def test_loads_every_weight_with_its_shape(tiny_checkpoint: Any) -> None:
    directory, reference = tiny_checkpoint
    cfg = checkpoint.load_config(directory)
    params = checkpoint.load_params(directory, cfg, jnp.float32)
    state = reference.state_dict()
    layer = params.layers[0]
    q = state["model.layers.0.self_attn.q_proj.weight"].numpy()
    k = state["model.layers.0.self_attn.k_proj.weight"].numpy()
    np.testing.assert_array_equal(np.asarray(layer.w_qkv[: q.shape[0]]), q)
    np.testing.assert_array_equal(np.asarray(layer.w_qkv[q.shape[0] : q.shape[0] + k.shape[0]]), k)
    assert params.layers[7].k_norm is None  # KV-sharing layer
    assert params.layers[7].w_qkv.shape == (4 * 16, 64)
    assert params.layers[7].w_gate_up.shape == (2 * 256, 64)  # double-wide MLP
    assert float(params.layers[3].scalar[0]) == float(state["model.layers.3.layer_scalar"][0])


def test_unmapped_tensor_is_refused(tiny_checkpoint: Any, tmp_path: Path) -> None:
    directory, _ = tiny_checkpoint

    def add(t: dict[str, np.ndarray]) -> None:
        t["model.layers.0.self_attn.mystery.weight"] = np.zeros(3, np.float32)

    bad = copy_with(directory, tmp_path / "bad", add)
    with pytest.raises(checkpoint.CheckpointError, match="mystery"):
        checkpoint.load_params(bad, checkpoint.load_config(bad), jnp.float32)


def test_missing_tensor_is_refused(tiny_checkpoint: Any, tmp_path: Path) -> None:
    directory, _ = tiny_checkpoint
    bad = copy_with(
        directory, tmp_path / "bad", lambda t: t.pop("model.layers.2.mlp.up_proj.weight")
    )
    with pytest.raises(
        checkpoint.CheckpointError, match=r"lacks 1 weights.*layers\.2\.mlp\.up_proj"
    ):
        checkpoint.load_params(bad, checkpoint.load_config(bad), jnp.float32)


def test_wrong_shape_is_refused(tiny_checkpoint: Any, tmp_path: Path) -> None:
    directory, _ = tiny_checkpoint

    def shrink(t: dict[str, np.ndarray]) -> None:
        t["model.layers.1.self_attn.o_proj.weight"] = t["model.layers.1.self_attn.o_proj.weight"][
            :, :8
        ]

    bad = copy_with(directory, tmp_path / "bad", shrink)
    with pytest.raises(checkpoint.CheckpointError, match=r"o_proj.*shape \(64, 8\)"):
        checkpoint.load_params(bad, checkpoint.load_config(bad), jnp.float32)


def test_tensor_in_two_shards_is_refused(tiny_checkpoint: Any, tmp_path: Path) -> None:
    directory, _ = tiny_checkpoint
    bad = copy_with(directory, tmp_path / "bad", lambda t: None)
    norm = load_file(directory / "model.safetensors")["model.norm.weight"]
    save_file({"model.norm.weight": norm}, bad / "model-extra.safetensors")
    with pytest.raises(checkpoint.CheckpointError, match=r"model\.norm\.weight appears in"):
        checkpoint.load_params(bad, checkpoint.load_config(bad), jnp.float32)


def test_multimodal_checkpoint_names_and_bfloat16(tiny_checkpoint: Any, tmp_path: Path) -> None:
    """A Gemma4ForConditionalGeneration layout (model.language_model.*, vision tower, unused
    k/v of shared layers) stored in bfloat16 loads, the towers skipped."""
    directory, reference = tiny_checkpoint
    out = tmp_path / "mm"
    out.mkdir()
    text = json.loads((directory / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({"model_type": "gemma4", "text_config": text}))
    state = {
        k.replace("model.", "model.language_model.", 1): v.to(torch.bfloat16).contiguous()
        for k, v in reference.state_dict().items()
        if k != "lm_head.weight"
    }
    state["model.vision_tower.patch.weight"] = torch.zeros(2, 2, dtype=torch.bfloat16)
    state["model.language_model.layers.8.self_attn.k_proj.weight"] = torch.zeros(32, 64)
    save_torch(state, str(out / "model.safetensors"))
    cfg = checkpoint.load_config(out)
    params = checkpoint.load_params(out, cfg, jnp.bfloat16)
    assert params.embed.dtype == jnp.bfloat16
    want = reference.state_dict()["model.embed_tokens.weight"].to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(np.asarray(params.embed, np.float32), want)


def test_e2b_config_from_constructor_kwargs() -> None:
    raw = json.loads(Path(__file__).parents[3].joinpath("rigs/configs/e2b.json").read_text())
    cfg = model.Config.from_hf(raw)
    assert cfg.num_layers == 35
    assert cfg.cache_layers == tuple(range(15))
    assert [cfg.head_dims[i] for i in (0, 4, 34)] == [256, 512, 512]
    assert cfg.kv_source[15] == 13
    assert cfg.kv_source[19] == 14
    assert cfg.kv_source[34] == 14
    assert cfg.mlp_width(14) == 6144
    assert cfg.mlp_width(15) == 12288
    assert cfg.rope_full == model.Rope(theta=1e6, partial_factor=0.25)


def test_unsupported_config_is_refused() -> None:
    with pytest.raises(ValueError, match="enable_moe_block"):
        model.Config.from_hf({"model_type": "gemma4_text", "enable_moe_block": True})
