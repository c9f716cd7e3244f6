"""Prompts from a JSONL file, one request a line, for benchmarking with real traffic.

Each line is a JSON object with either `prompt` (text) or `messages` (chat messages, for the
chat endpoint), and optionally `output_len`, the tokens to force for that request (the
run's `--output-len` otherwise):

    {"prompt": "Summarise the plot of Hamlet.", "output_len": 128}
    {"messages": [{"role": "user", "content": "Hello"}]}

A cell takes the next `requests` lines after those the warm-up and earlier cells took,
starting again at the top when the file runs out, so no two requests in a row repeat a
prompt that a server's prefix cache still holds (unless the file is that short).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.schemas import Endpoint


class DatasetError(ValueError):
    """A dataset file that cannot be used; the message names the file and line."""


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool calls... go to the server as given

    role: str = Field(min_length=1)
    content: str | list[Any]


class DatasetEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt: str | None = Field(default=None, min_length=1)
    messages: list[ChatMessage] | None = Field(default=None, min_length=1)
    output_len: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _one_prompt(self) -> DatasetEntry:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of prompt and messages")
        return self

    def request_prompt(self) -> str | list[dict[str, Any]]:
        if self.messages is not None:
            return [m.model_dump(exclude_none=True) for m in self.messages]
        assert self.prompt is not None
        return self.prompt


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def load_dataset(path: Path, endpoint: Endpoint) -> list[DatasetEntry]:
    """Every request of the file; DatasetError names the first line that is not one."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text") from exc
    entries: list[DatasetEntry] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entry = DatasetEntry.model_validate(json.loads(line))
        except ValueError as exc:
            detail = _first_error(exc) if isinstance(exc, ValidationError) else "not JSON"
            raise DatasetError(f"{path} line {number}: {detail}") from exc
        if entry.messages is not None and endpoint != "chat":
            raise DatasetError(
                f"{path} line {number}: messages need --endpoint chat (completions takes prompt)"
            )
        entries.append(entry)
    if not entries:
        raise DatasetError(f"{path}: no requests in the file")
    return entries


def take(entries: list[DatasetEntry], start: int, count: int) -> list[DatasetEntry]:
    """`count` entries from position `start` on, wrapping round the end of the file."""
    return [entries[(start + i) % len(entries)] for i in range(count)]
