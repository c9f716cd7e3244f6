"""OpenAI-style errors: one exception type, rendered as `{"error": {...}}` with its status."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None  # as OpenAI: a string such as "context_length_exceeded", or null


class ErrorResponse(BaseModel):
    error: ErrorBody


class APIError(Exception):
    """A request the server refuses; `status` is the HTTP status code."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers
        self.body = ErrorResponse(
            error=ErrorBody(message=message, type=type, param=param, code=code)
        )


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def from_validation_error(err: ValidationError) -> APIError:
    """A 400 naming every field that failed, e.g. `max_tokens: Input should be ...`."""
    problems = [f"{_location(e)}: {e['msg']}" for e in err.errors()]
    first = err.errors()[0] if err.errors() else None
    return bad_request("; ".join(problems), param=_location(first) if first else None)


def _location(error: Any) -> str:
    return ".".join(str(part) for part in error["loc"]) or "body"
