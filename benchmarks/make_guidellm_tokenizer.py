"""Write a byte-level tokenizer directory that GuideLLM can load without the Hugging Face Hub.

GuideLLM's synthetic data needs a tokenizer (`--tokenizer kind=hf_auto,model=DIR`) to cut prompts
to an exact token count, and resolves it with `AutoTokenizer.from_pretrained`, which downloads
unless given a local directory. Here every UTF-8 byte is one token (id = byte value; no merges),
so a prompt of N tokens is N bytes of text, and encoding then decoding is lossless.

Run it with an interpreter that has `tokenizers` and `transformers` (GuideLLM's venv has both):
    /work/venv-guidellm/bin/python benchmarks/make_guidellm_tokenizer.py DIR
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EOS_TOKEN = "<|endoftext|>"


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (what ByteLevel expects)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def make_tokenizer(directory: Path) -> Path:
    """Build the byte-level tokenizer and save it with `save_pretrained` into `directory`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {char: byte for byte, char in byte_to_unicode().items()}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([EOS_TOKEN])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token=EOS_TOKEN, model_max_length=1 << 20
    )
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(directory))
    return directory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path, help="where to write the tokenizer files")
    args = parser.parse_args(argv)
    make_tokenizer(args.directory)

    from transformers import AutoTokenizer

    loaded = AutoTokenizer.from_pretrained(str(args.directory))
    sample = "Hello, world: 42 tokens?"
    ids = loaded.encode(sample, add_special_tokens=False)
    if ids != list(sample.encode()) or loaded.decode(ids) != sample:
        print(f"tokenizer in {args.directory} does not round-trip bytes: {ids}", file=sys.stderr)
        return 1
    print(args.directory)
    return 0


if __name__ == "__main__":
    sys.exit(main())
