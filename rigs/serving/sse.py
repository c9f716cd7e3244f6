"""Server-sent events as OpenAI streams them: `data: <json>` blocks ending in `data: [DONE]`.

The stream stops (its generator is closed, which stops the engine's work for the request)
as soon as the client disconnects, whatever ASGI spec version the server speaks.
"""

from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial

import anyio
from pydantic import BaseModel
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

DONE = b"data: [DONE]\n\n"
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def event(payload: BaseModel, *, with_usage: bool = True) -> bytes:
    """One event; `with_usage=False` leaves the `usage` key out (OpenAI sends it, null until
    the last chunk, only when the request asked for `stream_options.include_usage`)."""
    exclude = None if with_usage else {"usage"}
    return b"data: " + payload.model_dump_json(exclude=exclude).encode() + b"\n\n"


class EventStream(StreamingResponse):
    """Streams while listening for the client's disconnect, and cancels the stream on it;
    `on_close` runs once the stream has ended, however it ended.

    Starlette does this only for ASGI spec < 2.4; for 2.4 it notices only when a write
    fails, which can be long after the client left (a long prefill, a quiet detokeniser)."""

    on_close: Callable[[], None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as group:

                async def run_then_cancel(func: Callable[[], Awaitable[None]]) -> None:
                    await func()
                    group.cancel_scope.cancel()

                group.start_soon(run_then_cancel, partial(self.stream_response, send))
                await run_then_cancel(partial(self.listen_for_disconnect, receive))
        finally:
            if self.on_close is not None:
                self.on_close()


def response(events: AsyncIterator[bytes]) -> EventStream:
    return EventStream(events, media_type="text/event-stream", headers=HEADERS)
