"""The OpenAI-compatible request and response bodies the shared server speaks.

Requests are strict (a string where a number belongs is a 400, not a coercion); unknown
fields are ignored as OpenAI clients send many; fields that would change the output but
that the server does not implement (`UNHONOURED`) are refused rather than silently ignored,
unless they carry the value that changes nothing.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

TokenIds = list[StrictInt]


class _Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


# OpenAI and vLLM request fields that change the output and that this server does not
# implement, each with the values that change nothing (clients send some by default).
UNHONOURED: dict[str, tuple[Any, ...]] = {
    "logit_bias": (None, {}),
    "top_k": (None, 0, -1),
    "min_p": (None, 0, 0.0),
    "top_a": (None, 0, 0.0),
    "typical_p": (None, 1, 1.0),
    "best_of": (None, 1),
    "use_beam_search": (None, False),
    "length_penalty": (None, 1, 1.0),
    "repetition_penalty": (None, 1, 1.0),
    "suffix": (None, ""),
    "response_format": (None, {"type": "text"}),
    "guided_json": (None,),
    "guided_regex": (None,),
    "guided_choice": (None,),
    "guided_grammar": (None,),
    "structured_outputs": (None,),
    "tools": (None, []),
    "tool_choice": (None, "none", "auto"),
    "functions": (None, []),
    "function_call": (None, "none", "auto"),
    "top_logprobs": (None, 0),  # on completions; chat declares it
    "prompt_logprobs": (None, 0),
    "stop_token_ids": (None, []),
    "bad_words": (None, []),
    "allowed_token_ids": (None,),
    "prediction": (None,),
    "audio": (None,),
    "modalities": (None, ["text"]),
    "reasoning_effort": (None,),
    "skip_special_tokens": (None, True),
    "add_special_tokens": (None,),
    "truncate_prompt_tokens": (None,),
    "chat_template": (None,),
    "chat_template_kwargs": (None, {}),
    "continue_final_message": (None, False),
    "add_generation_prompt": (None, True),
}


def _neutral(value: Any, allowed: tuple[Any, ...]) -> bool:
    # type-exact: `True == 1` must not pass for best_of
    return any(type(value) is type(ok) and value == ok for ok in allowed)


class StreamOptions(_Request):
    include_usage: bool = False


class _Sampling(_Request):
    # Extra fields are kept (not validated) so that `unhonoured` can name them.
    model_config = ConfigDict(strict=True, extra="allow")

    model: str | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    min_tokens: Annotated[int, Field(ge=0)] = 0
    ignore_eos: bool = False
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 1.0
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    seed: Annotated[int, Field(ge=-(2**63), lt=2**64)] | None = None
    n: Literal[1] = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    user: str | None = None
    # As vLLM: also return the generated token ids (non-streaming responses).
    return_token_ids: bool = False

    @field_validator("presence_penalty", "frequency_penalty")
    @classmethod
    def _no_penalties(cls, value: float) -> float:
        if value != 0:
            raise ValueError("penalties are not supported by this rig; send 0 or omit it")
        return value

    @field_validator("stop")
    @classmethod
    def _no_stop(cls, value: str | list[str] | None) -> None:
        if value:
            raise ValueError("stop sequences are not supported by this rig")
        return None

    def unhonoured(self) -> dict[str, tuple[Any, ...]]:
        """Fields this request sets that the server would not honour, with what it accepts."""
        extra = self.model_extra or {}
        return {
            name: UNHONOURED[name]
            for name, value in extra.items()
            if name in UNHONOURED and not _neutral(value, UNHONOURED[name])
        }

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    @model_validator(mode="after")
    def _min_within_max(self) -> _Sampling:
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(
                f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({self.max_tokens})"
            )
        return self


MAX_TOP_LOGPROBS = 20  # as OpenAI's chat API and vLLM


class CompletionRequest(_Sampling):
    prompt: str | TokenIds
    echo: Literal[False] = False
    logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None

    @property
    def top_logprobs_wanted(self) -> int | None:
        """Alternatives per token when logprobs are asked for, else None."""
        return self.logprobs

    @field_validator("prompt", mode="before")
    @classmethod
    def _one_prompt(cls, value: Any) -> Any:
        """Accept a string, a list of token ids, or a batch of exactly one of either."""
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str | list):
            return value[0]
        if isinstance(value, list) and value and isinstance(value[0], str | list):
            raise ValueError("batched prompts are not supported: send one prompt per request")
        if not isinstance(value, str | list):
            raise ValueError("prompt must be a string or a list of token ids")
        return value


class TextPart(_Request):
    type: Literal["text"]
    text: str


class ChatMessage(_Request):
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatCompletionRequest(_Sampling):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None

    @model_validator(mode="after")
    def _completion_tokens_alias(self) -> ChatCompletionRequest:
        if self.max_tokens is None and self.max_completion_tokens is not None:
            self.max_tokens = self.max_completion_tokens
        return self

    @model_validator(mode="after")
    def _top_logprobs_needs_logprobs(self) -> ChatCompletionRequest:
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs requires logprobs: true")
        return self

    @property
    def top_logprobs_wanted(self) -> int | None:
        """Alternatives per token when logprobs are asked for, else None."""
        return (self.top_logprobs or 0) if self.logprobs else None


FinishReason = Literal["stop", "length"]


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


class CompletionLogprobs(BaseModel):
    """The legacy completions shape: parallel lists, one entry per generated token."""

    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[TokenLogprob]


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: FinishReason | None
    token_ids: list[int] | None = None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ChatMessageOut(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int = 0
    message: ChatMessageOut
    logprobs: ChatLogprobs | None = None
    finish_reason: FinishReason | None
    token_ids: list[int] | None = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatChunkChoice(BaseModel):
    index: int = 0
    delta: ChatDelta
    logprobs: None = None
    finish_reason: FinishReason | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class CompletionChunk(CompletionResponse):
    """A streamed piece of a completion: OpenAI gives it the response's very body."""


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "rigbench"
    root: str
    max_model_len: int
    vocab_size: int  # an extension: the harness keeps token-id prompts inside it
    # Extensions: "burst" when the engine hands over several tokens at once (client-side
    # gaps inside a burst are ~0, so ITL means nothing and TPOT is the measure).
    token_delivery: Literal["per_token", "burst"] = "per_token"
    tokens_per_burst: int | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
