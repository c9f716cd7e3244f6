"""Prompts from a JSONL file, one request a line, for benchmarking with real traffic.

Each line is a JSON object with either `prompt` (text) or `messages` (chat messages, for the
chat endpoint), and optionally `output_tokens` (or `output_len`), the tokens to force for that
request (the run's `--output-len` otherwise):

    {"prompt": "Summarise the plot of Hamlet.", "output_tokens": 128}
    {"messages": [{"role": "user", "content": "Hello"}]}

A dataset is named by a path, by an `s3://bucket/key` URI (downloaded with boto3 and the
environment's credentials), or by the name of one bundled in harness/data (`sample-chat`,
`sample-prompts`). What was used is recorded exactly: `open_dataset` returns the file's
sha256 and row count beside the entries.

A cell takes the next `requests` lines after those the warm-up and earlier cells took,
starting again at the top when the file runs out, so no two requests in a row repeat a
prompt that a server's prefix cache still holds (unless the file is that short).
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.schemas import DatasetProvenance, Endpoint

BUNDLED = Path(__file__).resolve().parent / "data"
BUNDLED_NAMES = ("sample-chat", "sample-prompts")
_S3_URI = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(?P<key>.+)$")


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
    output_len: int | None = Field(
        default=None, ge=1, validation_alias=AliasChoices("output_tokens", "output_len")
    )

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


def bundled_path(name: str) -> Path | None:
    """The file of a bundled dataset's name, None for any other name."""
    return BUNDLED / f"{name}.jsonl" if name in BUNDLED_NAMES else None


def is_s3_uri(name: str) -> bool:
    return name.startswith("s3://")


def _download(uri: str, folder: Path) -> Path:
    import boto3  # only a run reading S3 needs it
    from botocore.exceptions import BotoCoreError, ClientError

    found = _S3_URI.match(uri)
    if found is None:
        raise DatasetError(f"{uri}: give s3://BUCKET/KEY")
    path = folder / "dataset.jsonl"
    try:
        boto3.client("s3").download_file(found["bucket"], found["key"], str(path))
    except (BotoCoreError, ClientError) as exc:
        raise DatasetError(f"{uri}: cannot download ({exc})") from exc
    return path


def open_dataset(name: str, endpoint: Endpoint) -> tuple[list[DatasetEntry], DatasetProvenance]:
    """A dataset by bundled name, path or s3 URI: its entries, and what it was (rows_used 0,
    for the run to fill in)."""
    with tempfile.TemporaryDirectory(prefix="rigbench-dataset-") as folder:
        path = bundled_path(name) or (
            _download(name, Path(folder)) if is_s3_uri(name) else Path(name)
        )
        entries = load_dataset(path, endpoint, shown=name)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return entries, DatasetProvenance(name=name, sha256=digest, rows=len(entries), rows_used=0)


def load_dataset(path: Path, endpoint: Endpoint, shown: str | None = None) -> list[DatasetEntry]:
    """Every request of the file; DatasetError names the first line that is not one (and the
    file as `shown`, when given)."""
    where = shown or str(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DatasetError(f"{where}: cannot read ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{where}: not UTF-8 text") from exc
    entries: list[DatasetEntry] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entry = DatasetEntry.model_validate(json.loads(line))
        except ValueError as exc:
            detail = _first_error(exc) if isinstance(exc, ValidationError) else "not JSON"
            raise DatasetError(f"{where} line {number}: {detail}") from exc
        if entry.messages is not None and endpoint != "chat":
            raise DatasetError(
                f"{where} line {number}: messages need --endpoint chat (completions takes prompt)"
            )
        entries.append(entry)
    if not entries:
        raise DatasetError(f"{where}: no requests in the file")
    return entries


def take(entries: list[DatasetEntry], start: int, count: int) -> list[DatasetEntry]:
    """`count` entries from position `start` on, wrapping round the end of the file."""
    return [entries[(start + i) % len(entries)] for i in range(count)]
