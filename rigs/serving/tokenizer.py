"""Text <-> token ids for the shared server, including incremental detokenisation."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


class ServingTokenizer:
    """Wraps a transformers tokenizer loaded from the checkpoint directory."""

    def __init__(self, hf_tokenizer: Any) -> None:
        self.hf = hf_tokenizer
        self.special_ids = frozenset(int(i) for i in hf_tokenizer.all_special_ids)
        # No token stands for more input characters than its vocabulary entry has (SentencePiece
        # "▁" is one space, a byte-level symbol one byte, "<0xE3>" even fewer), so a text of
        # N characters is at least N / max_token_chars tokens: a check that costs no encoding.
        self.max_token_chars = max(1, *(len(piece) for piece in hf_tokenizer.get_vocab()))

    def min_tokens(self, text: str) -> int:
        """A lower bound on the tokens `text` encodes to, without encoding it."""
        return -(-len(text) // self.max_token_chars)

    @classmethod
    def from_pretrained(cls, path: Path | str) -> ServingTokenizer:
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(str(path)))

    def encode(self, text: str) -> list[int]:
        """A text prompt as the model sees it (with BOS where the tokenizer adds one)."""
        return list(self.hf(text, add_special_tokens=True)["input_ids"])

    def encode_chat(self, messages: Sequence[dict[str, str]]) -> list[int]:
        text = self.hf.apply_chat_template(
            list(messages), add_generation_prompt=True, tokenize=False
        )
        # The template writes BOS itself; don't add a second.
        return list(self.hf(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.hf.decode(list(ids), skip_special_tokens=True))

    def detokenizer(self) -> IncrementalDetokenizer:
        return IncrementalDetokenizer(self)


class IncrementalDetokenizer:
    """Turns a growing list of generated ids into text deltas.

    Decodes a short window of recent ids so each step costs O(1), and holds text back while
    it ends in U+FFFD (a multi-byte character split across tokens). The deltas concatenate
    to `decode(all ids)`; `flush` returns whatever was held back at the end.
    """

    _CONTEXT = 5  # ids before the unread ones, so merges across the boundary decode right

    def __init__(self, tokenizer: ServingTokenizer) -> None:
        self._tok = tokenizer
        self._ids: list[int] = []
        self._prefix = 0  # window start
        self._read = 0  # ids before this index have been emitted as text

    def push(self, token_id: int) -> str:
        self._ids.append(token_id)
        prefix_text = self._tok.decode(self._ids[self._prefix : self._read])
        full_text = self._tok.decode(self._ids[self._prefix :])
        if full_text.endswith("\ufffd") or len(full_text) <= len(prefix_text):
            return ""
        delta = full_text[len(prefix_text) :]
        self._read = len(self._ids)
        self._prefix = max(0, self._read - self._CONTEXT)
        return delta

    def flush(self) -> str:
        if self._read == len(self._ids):
            return ""
        prefix_text = self._tok.decode(self._ids[self._prefix : self._read])
        full_text = self._tok.decode(self._ids[self._prefix :])
        self._read = len(self._ids)
        return full_text[len(prefix_text) :]
