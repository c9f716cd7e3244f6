"""A tiny Gemma 4 checkpoint written by transformers, shared by the JAX rig's tests.

Every weight is randomised (norm scales around 1, layer scalars in [0.5, 1.5]) so that a
wrong convention (1 + w norms, a missing scalar) shows up in the logits."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# XLA's CPU codegen at -O0 compiles about twice as fast; these tiny models run in
# milliseconds either way. Read when JAX first initialises its backend.
os.environ.setdefault("XLA_FLAGS", "--xla_backend_optimization_level=0")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
# On a small shared CPU, torch's thread pool fighting XLA's makes generate 10x slower.
torch.set_num_threads(1)

WINDOW = 8  # sliding window: prompts of 20-40 tokens cross it several times
TINY = {
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 10,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "global_head_dim": 32,
    "sliding_window": WINDOW,
    "layer_types": (["sliding_attention"] * 4 + ["full_attention"]) * 2,
    "num_kv_shared_layers": 4,  # layers 6-9 read layers 5 (sliding) and 4 (global)
    "hidden_size_per_layer_input": 16,
    "vocab_size_per_layer_input": 512,
    "final_logit_softcapping": 30.0,
    "use_double_wide_mlp": True,
    "tie_word_embeddings": True,
}


def make_reference(directory: Path, seed: int = 0, dtype: str = "float32") -> object:
    """Save a randomised Gemma4ForCausalLM to `directory` and return it (eval mode)."""
    config = transformers.Gemma4TextConfig(**TINY, attn_implementation="eager")
    torch.manual_seed(seed)
    model = transformers.Gemma4ForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.3 * torch.randn_like(p))
            else:
                p.normal_(0, 0.15)
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                b.copy_(0.5 + torch.rand_like(b))
    model = model.to(getattr(torch, dtype))
    model.save_pretrained(directory)
    return model


@pytest.fixture(scope="session", autouse=True)
def jax_compile_cache(shared_rig_cache: Path) -> None:
    """This process's compiles kept between runs, as the rig's are (keyed by each program's
    HLO and options, so changed code compiles anew); its own folder: these run at -O0."""
    import jax

    jax.config.update("jax_compilation_cache_dir", str(shared_rig_cache / "jax-in-tests"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, object]]:
    directory = tmp_path_factory.mktemp("gemma4-tiny")
    model = make_reference(directory)
    return directory, model
