import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import safe_open

from rigs.sources import (
    ModelSource,
    ModelSourceError,
    hub_commit,
    hub_repo,
    pinned_spec,
    random_config,
    resolve_model,
)
from tests.fake_hub import FakeHub, serve_hub


def _tensor_digest(path: Path) -> dict[str, str]:
    import hashlib

    digests = {}
    for shard in sorted(path.glob("*.safetensors")):
        with safe_open(str(shard), "pt") as handle:
            for key in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                digests[key] = hashlib.sha256(handle.get_tensor(key).numpy().tobytes()).hexdigest()
    return digests


def test_random_tiny_is_a_real_checkpoint(tiny: ModelSource) -> None:
    assert tiny.kind == "random"
    assert re.fullmatch(r"seed0-float32-[0-9a-f]{8}", tiny.revision)
    assert tiny.path.name == f"tiny-{tiny.revision}"
    config = json.loads((tiny.path / "config.json").read_text())
    assert config["model_type"] == "gemma4_text"
    assert set(config["layer_types"]) == {"sliding_attention", "full_attention"}
    assert config["num_kv_shared_layers"] > 0
    for name in ("tokenizer.json", "tokenizer_config.json", "model.safetensors"):
        assert (tiny.path / name).is_file(), name
    # No leftover temporary directory of this checkpoint beside it (the cache is the run's,
    # so other models may sit there too).
    assert not list(tiny.path.parent.glob(f".{tiny.path.name}.*/"))


@pytest.mark.slow
def test_random_weights_are_identical_across_processes(tiny: ModelSource, tmp_path: Path) -> None:
    code = (
        "from pathlib import Path; import sys; from rigs.sources import resolve_model; "
        "print(resolve_model('random:tiny', cache_dir=Path(sys.argv[1])).path)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    other = Path(out.stdout.strip().splitlines()[-1])
    assert other != tiny.path
    assert _tensor_digest(other) == _tensor_digest(tiny.path)


def test_second_resolve_reuses_the_cache(tiny: ModelSource, rig_cache: Path) -> None:
    before = (tiny.path / "model.safetensors").stat().st_mtime_ns
    again = resolve_model("random:tiny", cache_dir=rig_cache)
    assert again == tiny
    assert (again.path / "model.safetensors").stat().st_mtime_ns == before


def test_tokenizer_covers_the_vocabulary(tiny: ModelSource) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny.path)
    vocab_size = random_config("tiny")["vocab_size"]
    assert len(tokenizer) == vocab_size
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.bos_token_id) == (0, 1, 2)
    text = "Hello, wörld! 🙂"
    ids = tokenizer(text)["input_ids"]
    assert ids[0] == 2
    assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert tokenizer.decode([vocab_size - 1])  # the last id is a real token


def test_local_directory(tiny: ModelSource) -> None:
    local = resolve_model(str(tiny.path))
    assert (local.kind, local.path, local.revision) == ("local", tiny.path, "local")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("random:huge", "unknown random model"),
        ("", "empty model spec"),
        ("/nonexistent/model", "does not exist"),
        ("not a spec!", "neither random"),
    ],
)
def test_bad_specs_name_the_problem(spec: str, message: str) -> None:
    with pytest.raises(ModelSourceError, match=message):
        resolve_model(spec)


def test_directory_without_weights_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelSourceError, match=r"missing \*\.safetensors, tokenizer\.json"):
        resolve_model(str(tmp_path))


def test_only_a_hub_id_without_a_revision_is_pinned(tiny: ModelSource) -> None:
    assert hub_repo("google/gemma-4-E2B-it") == "google/gemma-4-E2B-it"
    assert hub_repo("google/gemma-4-E2B-it@abc") is None  # pinned already
    assert hub_repo("random:tiny") is None
    assert hub_repo(str(tiny.path)) is None
    assert pinned_spec("google/gemma-4-E2B-it", "abc") == "google/gemma-4-E2B-it@abc"
    assert pinned_spec("google/gemma-4-E2B-it", None) == "google/gemma-4-E2B-it"
    assert pinned_spec("random:tiny", "abc") == "random:tiny"


@pytest.mark.slow
def test_hub_commit_is_what_the_hub_says_now(
    tiny: ModelSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = "1" * 40, "2" * 40
    hub = FakeHub("rigbench/tiny", tiny.path, [first, second], push=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with serve_hub(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        assert hub_commit("rigbench/tiny", None) == first  # main
        assert hub_commit("rigbench/tiny", second) == second
        with pytest.raises(ModelSourceError, match="no 'rigbench/tiny' at revision 'v9'"):
            hub_commit("rigbench/tiny", "v9")
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        assert hub_commit("rigbench/tiny", None) is None  # not asked
        monkeypatch.delenv("HF_HUB_OFFLINE")
    assert hub_commit("rigbench/tiny", None) is None  # no hub there any more: not known
