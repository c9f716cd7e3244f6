"""Server-sent events as OpenAI streams them: `data: <json>` blocks ending in `data: [DONE]`."""

from collections.abc import AsyncIterator

from pydantic import BaseModel
from starlette.responses import StreamingResponse

DONE = b"data: [DONE]\n\n"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def event(payload: BaseModel) -> bytes:
    return b"data: " + payload.model_dump_json().encode() + b"\n\n"


def response(events: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream", headers=HEADERS)
