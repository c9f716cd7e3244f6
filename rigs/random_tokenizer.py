"""A byte-level BPE tokenizer built in code, sized to a random model's vocabulary.

Every id in ``[0, vocab_size)`` is a real token (specials, the 256 byte symbols, then
synthetic merges of letters and the space symbol), so whatever a random model generates
decodes, and any text encodes. Built deterministically: no training corpus, no download.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>")
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<start_of_turn>{{ message['role'] }}\n{{ message['content'] }}<end_of_turn>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (what ByteLevel uses)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars, strict=True)}


def _merged_tokens(alphabet: list[str]) -> Iterator[tuple[str, str]]:
    """(left, right) pairs whose concatenations are new tokens, shortest first."""
    level = list(alphabet)
    while True:
        nxt = []
        for left, right in itertools.product(level, alphabet):
            yield left, right
            nxt.append(left + right)
        level = nxt


def build_tokenizer(
    *, vocab_size: int, pad_id: int = 0, eos_id: int = 1, bos_id: int = 2, model_max_length: int
) -> PreTrainedTokenizerFast:
    if (pad_id, eos_id, bos_id) != (0, 1, 2):
        raise ValueError("the built-in tokenizer puts <pad>, <eos>, <bos> at ids 0, 1, 2")
    byte_symbols = list(bytes_to_unicode().values())
    if vocab_size < len(SPECIALS) + len(byte_symbols):
        raise ValueError(f"vocab_size {vocab_size} is too small for a byte-level tokenizer")
    vocab: dict[str, int] = {}
    for token in (*SPECIALS, *byte_symbols):
        vocab[token] = len(vocab)
    space = bytes_to_unicode()[ord(" ")]
    alphabet = [space, *"etaoinshrdlucmfwypvbgkjqxz"]
    merges: list[tuple[str, str]] = []
    for left, right in _merged_tokens(alphabet):
        if len(vocab) >= vocab_size:
            break
        vocab[left + right] = len(vocab)
        merges.append((left, right))

    core = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.decoder = decoders.ByteLevel()
    core.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", bos_id)]
    )
    core.add_special_tokens(list(SPECIALS))
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        eos_token="<eos>",
        bos_token="<bos>",
        unk_token="<unk>",
        additional_special_tokens=["<start_of_turn>", "<end_of_turn>"],
        model_max_length=model_max_length,
        chat_template=CHAT_TEMPLATE,
    )
