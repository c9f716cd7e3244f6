"""The OpenAI-compatible HTTP app every Python rig serves, over any `Engine`.

`/health` answers 200 only once the engine has produced real tokens (a warm-up generation
after loading) and the last generation did not fail; 503 before, with the phase.

Bounds a benchmark never meets: the server holds at most its engine's slots plus
`max_waiting` generation requests (running or waiting for a slot, default 1,024 waiting, at
least a sweep's highest concurrency); one more is refused at once, before its body is read,
with 503 and `Retry-After`. A request still generating `request_timeout_s` after it was
admitted is ended (504, or an error event on a stream). Errors name what was wrong; an
engine's own exception text stays in the rig's log, behind a reference the client gets.

The event loop only moves bytes: a body over `max_body_bytes` is refused (413) before it is
read, a text longer than the context could hold is refused before it is tokenised, and
parsing and tokenising run on a worker thread, so one huge request never stalls the other
streams or `/health`. A request whose client has gone away is cancelled (streaming or not),
which stops the engine's work for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rigs.serving import marks, sse
from rigs.serving.engine import Engine, SamplingParams, ScoredToken, ScoringEngine
from rigs.serving.errors import APIError, ErrorResponse, bad_request, from_validation_error
from rigs.serving.logprobs import chat_logprobs, completion_logprobs
from rigs.serving.protocol import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatDelta,
    ChatMessageOut,
    CompletionChoice,
    CompletionChunk,
    CompletionRequest,
    CompletionResponse,
    FinishReason,
    ModelCard,
    ModelList,
    Usage,
    new_id,
    now,
)
from rigs.serving.tokenizer import ServingTokenizer

log = logging.getLogger("rigs.serving")

Loader = Callable[[], tuple[Engine, ServingTokenizer]]
DEFAULT_COMPLETION_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
DEFAULT_MAX_BODY_BYTES = 8 * 2**20
DEFAULT_MAX_WAITING = 1024  # the sweep schema's highest concurrency (cells.concurrency le)
# No request of a benchmark runs this long: the harness's own bench deadline is 3,600 s.
DEFAULT_REQUEST_TIMEOUT_S = 3600.0
RETRY_AFTER_S = 1
WARMUP_PROMPT = "Hello"
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a request whose client went away


@dataclass
class ServerState:
    """What the app knows about its engine; `phase` is loading, warming, ready or failed."""

    served_names: list[str] = field(default_factory=list)
    engine: Engine | None = None
    tokenizer: ServingTokenizer | None = None
    phase: str = "loading"
    error: str | None = None
    last_generation_failed: bool = False
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_waiting: int = DEFAULT_MAX_WAITING
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    in_flight: int = 0  # generation requests admitted and not yet answered
    # parsing and tokenising: off the event loop, two at a time at most
    workers: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(2, thread_name_prefix="rig-tokenize")
    )

    @property
    def healthy(self) -> bool:
        return self.phase == "ready" and not self.last_generation_failed

    @property
    def max_in_flight(self) -> int:
        """The engine's slots (its optional `slots` attribute, else 1) plus `max_waiting`."""
        return int(getattr(self.engine, "slots", 1)) + self.max_waiting


class _Admission:
    """One admitted request's place in `ServerState.in_flight`, given back once."""

    def __init__(self, state: ServerState) -> None:
        self._state: ServerState | None = state
        state.in_flight += 1

    def release(self) -> None:
        if self._state is not None:
            self._state.in_flight -= 1
            self._state = None


def _admit(state: ServerState) -> _Admission:
    if state.in_flight >= state.max_in_flight:
        raise APIError(
            503,
            f"the server holds {state.in_flight} requests, its most ({state.max_waiting} "
            "waiting for a slot and every slot busy): retry later",
            type="overloaded_error",
            code="server_overloaded",
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    return _Admission(state)


class RequestTimedOut(Exception):
    """The request was still generating `request_timeout_s` after it was admitted."""


@dataclass(frozen=True)
class _Job:
    prompt_ids: list[int]
    params: SamplingParams
    model: str
    include_usage: bool
    top_logprobs: int | None = None  # logprobs asked for, with this many alternatives


def build_app(
    engine: Engine,
    tokenizer: ServingTokenizer,
    *,
    served_model_names: Sequence[str] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_waiting: int = DEFAULT_MAX_WAITING,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
) -> Starlette:
    """An app over an already-loaded engine (it still warms up before /health says 200)."""
    return build_lazy_app(
        lambda: (engine, tokenizer),
        served_model_names=served_model_names,
        max_body_bytes=max_body_bytes,
        max_waiting=max_waiting,
        request_timeout_s=request_timeout_s,
    )


def build_lazy_app(
    loader: Loader,
    *,
    served_model_names: Sequence[str] = (),
    on_failure: Callable[[str], None] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_waiting: int = DEFAULT_MAX_WAITING,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
) -> Starlette:
    """An app that starts answering at once and loads the engine in the background.

    `on_failure(reason)` is called if loading or warm-up fails (e.g. to stop the server so
    a supervisor restarts it). A request body over `max_body_bytes` gets a 413.
    """
    if max_waiting < 0 or request_timeout_s <= 0:
        raise ValueError(
            f"max_waiting must be >= 0 and request_timeout_s > 0, not {max_waiting} and "
            f"{request_timeout_s}"
        )
    state = ServerState(
        served_names=list(served_model_names),
        max_body_bytes=max_body_bytes,
        max_waiting=max_waiting,
        request_timeout_s=request_timeout_s,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(_load_and_warm(state, loader, on_failure))
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        state.workers.shutdown(wait=False, cancel_futures=True)

    app = Starlette(
        routes=[
            Route("/health", _endpoint(state, health), methods=["GET"]),
            Route("/v1/models", _endpoint(state, models), methods=["GET"]),
            Route("/provenance", _endpoint(state, provenance), methods=["GET"]),
            Route("/boot", _endpoint(state, boot), methods=["GET"]),
            Route("/v1/completions", _admitted(state, completions), methods=["POST"]),
            Route("/v1/chat/completions", _admitted(state, chat_completions), methods=["POST"]),
        ],
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
        lifespan=lifespan,
    )
    app.state.rig = state
    return app


async def _load_and_warm(
    state: ServerState, loader: Loader, on_failure: Callable[[str], None] | None
) -> None:
    marks.start()
    try:
        engine, tokenizer = await asyncio.to_thread(loader)
        state.engine, state.tokenizer = engine, tokenizer
        if not state.served_names:
            state.served_names = [engine.model_name]
        state.phase = "warming"
        params = SamplingParams(max_tokens=2, min_tokens=2, ignore_eos=True)
        generated = [t async for t in engine.generate(tokenizer.encode(WARMUP_PROMPT), params)]
        if len(generated) != 2:
            raise RuntimeError(f"warm-up generated {len(generated)} tokens, expected 2")
        tokenizer.decode(generated)
        marks.mark("ready")  # the first real completion
        state.phase = "ready"
        log.info("ready: %s", dict(engine.provenance()))
    except Exception as err:
        state.phase, state.error = "failed", f"{type(err).__name__}: {err}"
        log.exception("engine failed to load or warm up")
        if on_failure is not None:
            on_failure(state.error)


Handler = Callable[[ServerState, Request], Awaitable[Response]]


def _endpoint(state: ServerState, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            return await handler(state, request)
        except APIError as err:
            return _error_response(err)

    return endpoint


def _admitted(state: ServerState, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """`handler` for requests admitted under the server's bound; a stream holds its place
    until it ends, however it ends."""

    async def endpoint(request: Request) -> Response:
        try:
            admission = _admit(state)
        except APIError as err:
            return _error_response(err)
        try:
            response = await handler(state, request)
        except APIError as err:
            admission.release()
            return _error_response(err)
        except BaseException:
            admission.release()
            raise
        if isinstance(response, sse.EventStream):
            response.on_close = admission.release
        else:
            admission.release()
        return response

    return endpoint


def _error_response(err: APIError) -> JSONResponse:
    return JSONResponse(err.body.model_dump(), status_code=err.status, headers=err.headers)


def _reference(what: str) -> str:
    """Logs the exception being handled under a fresh reference; returns the reference."""
    ref = uuid.uuid4().hex[:12]
    log.exception("%s (reference %s)", what, ref)
    return ref


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    return _error_response(APIError(exc.status_code, str(exc.detail), type=kind))


async def _internal_error(request: Request, exc: Exception) -> Response:
    ref = _reference("unhandled error")
    message = f"internal error in the rig server (its log has the details under {ref})"
    return _error_response(APIError(500, message, type="internal_error"))


async def health(state: ServerState, request: Request) -> Response:
    body = {"status": state.phase, "error": state.error}
    if state.healthy:
        return JSONResponse({"status": "ok"})
    if state.phase == "ready":
        body["error"] = "the last generation failed"
    return JSONResponse(body, status_code=503)


async def models(state: ServerState, request: Request) -> Response:
    engine = _require_engine(state)
    declared = _provenance(engine)
    delivery = "burst" if declared["token_delivery"] == "burst" else "per_token"
    burst = int(declared["tokens_per_burst"]) if "tokens_per_burst" in declared else None
    cards = [
        ModelCard(
            id=name,
            created=now(),
            root=engine.model_name,
            max_model_len=engine.max_model_len,
            vocab_size=engine.vocab_size,
            token_delivery=delivery,
            tokens_per_burst=burst,
        )
        for name in state.served_names
    ]
    return _json(ModelList(data=cards))


def _provenance(engine: Engine) -> dict[str, str]:
    """The engine's provenance; an engine that does not declare `token_delivery` yields each
    token as it is produced ("per_token")."""
    return {"token_delivery": "per_token", **engine.provenance()}


async def provenance(state: ServerState, request: Request) -> Response:
    return JSONResponse(_provenance(_require_engine(state)))


async def boot(state: ServerState, request: Request) -> Response:
    """When this process reached each step of its start (rigs.serving.marks), in epoch seconds,
    with its phase now; answered while loading too."""
    return JSONResponse({"phase": state.phase, "marks": marks.snapshot()})


_R = TypeVar("_R", bound=BaseModel)
_T = TypeVar("_T")
_P = ParamSpec("_P")


async def _off_loop(
    state: ServerState, func: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs
) -> _T:
    """`func(*args)` on a worker thread, so the event loop keeps serving meanwhile."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(state.workers, functools.partial(func, *args, **kwargs))


def _too_large(size: str, limit: int) -> APIError:
    return APIError(
        413,
        f"request body is {size} bytes; this server accepts at most {limit} bytes",
        code="request_too_large",
    )


async def _read_body(state: ServerState, request: Request) -> bytes:
    """The body, refused with a 413 as soon as it (or its Content-Length) passes the limit."""
    limit = state.max_body_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(declared, limit)
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size > limit:
            raise _too_large(f"more than {limit}", limit)
        parts.append(part)
    return b"".join(parts)


async def _parse(state: ServerState, request: Request, model: type[_R]) -> _R:
    body = await _read_body(state, request)
    try:
        parsed = await _off_loop(state, model.model_validate_json, body)
    except ValidationError as err:
        raise from_validation_error(err) from None
    if isinstance(parsed, CompletionRequest | ChatCompletionRequest):
        _refuse_unhonoured(parsed)
    return parsed


def _refuse_unhonoured(request: CompletionRequest | ChatCompletionRequest) -> None:
    """A 400 naming every field the request sets that the rig would silently not honour."""
    refused = request.unhonoured()
    if not refused:
        return
    problems = "; ".join(
        f"{name}: not supported by this rig (omit it, or send "
        f"{' or '.join(json.dumps(v) for v in neutral)})"
        for name, neutral in refused.items()
    )
    param = next(iter(refused))
    raise APIError(400, problems, param=param, code="unsupported_parameter")


def _require_engine(state: ServerState) -> Engine:
    if state.engine is None or state.phase not in ("ready", "warming"):
        detail = f": {state.error}" if state.error else ""
        raise APIError(503, f"model is {state.phase}{detail}", type="service_unavailable")
    return state.engine


def _plan(
    state: ServerState,
    request: CompletionRequest | ChatCompletionRequest,
    prompt_ids: list[int],
    default_max_tokens: int | None,
) -> _Job:
    engine = _require_engine(state)
    model = _check_model(state, request)
    if not prompt_ids:
        raise bad_request("prompt is empty", param="prompt")
    room = engine.max_model_len - len(prompt_ids)
    if room < 1:
        raise _context_exceeded(f"prompt has {len(prompt_ids)} tokens", engine)
    bad = next((t for t in prompt_ids if not 0 <= t < engine.vocab_size), None)
    if bad is not None:
        raise bad_request(f"token id {bad} is out of range [0, {engine.vocab_size})", "prompt")
    max_tokens = request.max_tokens or default_max_tokens or room
    if max_tokens > room:
        raise bad_request(
            f"This model's maximum context length is {engine.max_model_len} tokens. However, "
            f"you requested {len(prompt_ids) + max_tokens} tokens ({len(prompt_ids)} in the "
            f"prompt, {max_tokens} in the completion).",
            param="max_tokens",
            code="context_length_exceeded",
        )
    params = SamplingParams(
        max_tokens=max_tokens,
        min_tokens=min(request.min_tokens, max_tokens),
        ignore_eos=request.ignore_eos,
        temperature=request.temperature,
        top_p=request.top_p,
        seed=request.seed,
    )
    return _Job(prompt_ids, params, model, request.include_usage, _top_logprobs(engine, request))


def _top_logprobs(engine: Engine, request: CompletionRequest | ChatCompletionRequest) -> int | None:
    """The alternatives per token the request asks for, refused where this rig cannot."""
    wanted = request.top_logprobs_wanted
    if wanted is None:
        return None
    param = "logprobs" if isinstance(request, CompletionRequest) else "top_logprobs"
    if not isinstance(engine, ScoringEngine):
        raise bad_request("logprobs are not supported by this rig's engine", param=param)
    if request.stream:
        raise bad_request(
            "logprobs are returned without streaming only on this rig: send stream: false",
            param="stream",
        )
    if wanted > engine.max_top_logprobs:
        raise bad_request(
            f"this rig returns at most {engine.max_top_logprobs} alternatives per token, "
            f"not {wanted}",
            param=param,
        )
    return wanted


def _check_model(state: ServerState, request: CompletionRequest | ChatCompletionRequest) -> str:
    model = request.model or state.served_names[0]
    if model not in state.served_names:
        raise APIError(
            404,
            f"The model `{model}` does not exist.",
            type="NotFoundError",
            param="model",
            code="model_not_found",
        )
    return model


def _context_exceeded(what: str, engine: Engine, param: str = "prompt") -> APIError:
    return bad_request(
        f"{what}; this model's maximum context length is {engine.max_model_len} tokens",
        param=param,
        code="context_length_exceeded",
    )


def _check_text_length(state: ServerState, text: str, param: str) -> None:
    """Refuse, without tokenising it, a text too long for the context whatever it encodes to."""
    engine = _require_engine(state)
    assert state.tokenizer is not None
    at_least = state.tokenizer.min_tokens(text)
    if at_least >= engine.max_model_len:
        raise _context_exceeded(
            f"{param} has {len(text)} characters, at least {at_least} tokens", engine, param
        )


async def completions(state: ServerState, request: Request) -> Response:
    req = await _parse(state, request, CompletionRequest)
    _require_engine(state)
    _check_model(state, req)
    tokenizer = state.tokenizer
    assert tokenizer is not None
    if isinstance(req.prompt, list):
        ids = list(req.prompt)
    elif not req.prompt:
        ids = []
    else:
        _check_text_length(state, req.prompt, "prompt")
        ids = await _off_loop(state, tokenizer.encode, req.prompt)
    job = _plan(state, req, ids, DEFAULT_COMPLETION_MAX_TOKENS)
    if req.stream:
        return sse.response(_stream_completion(state, job))
    if job.top_logprobs is None:
        ids_out = await _unless_abandoned(_generate_all(state, job), request)
        logprobs = None
    else:
        scored = await _unless_abandoned(_generate_scored(state, job), request)
        ids_out = [s.token for s in scored]
        logprobs = completion_logprobs(tokenizer, scored)
    choice = CompletionChoice(
        text=tokenizer.decode(ids_out),
        logprobs=logprobs,
        finish_reason=_finish(job, len(ids_out)),
        token_ids=ids_out if req.return_token_ids else None,
    )
    return _json(
        CompletionResponse(
            id=new_id("cmpl"),
            created=now(),
            model=job.model,
            choices=[choice],
            usage=_usage(job, len(ids_out)),
        )
    )


async def chat_completions(state: ServerState, request: Request) -> Response:
    req = await _parse(state, request, ChatCompletionRequest)
    _require_engine(state)
    _check_model(state, req)
    tokenizer = state.tokenizer
    assert tokenizer is not None
    messages = [{"role": m.role, "content": m.text()} for m in req.messages]
    _check_text_length(state, "".join(m["content"] for m in messages), "messages")
    try:
        ids = await _off_loop(state, tokenizer.encode_chat, messages)
    except Exception as err:  # a template that rejects the conversation, e.g. bad role order
        raise bad_request(f"cannot apply the chat template: {err}", param="messages") from err
    job = _plan(state, req, ids, None)
    if req.stream:
        return sse.response(_stream_chat(state, job))
    if job.top_logprobs is None:
        ids_out = await _unless_abandoned(_generate_all(state, job), request)
        chat_lp = None
    else:
        scored = await _unless_abandoned(_generate_scored(state, job), request)
        ids_out = [s.token for s in scored]
        chat_lp = chat_logprobs(tokenizer, scored)
    choice = ChatChoice(
        message=ChatMessageOut(content=tokenizer.decode(ids_out)),
        logprobs=chat_lp,
        finish_reason=_finish(job, len(ids_out)),
        token_ids=ids_out if req.return_token_ids else None,
    )
    return _json(
        ChatCompletionResponse(
            id=new_id("chatcmpl"),
            created=now(),
            model=job.model,
            choices=[choice],
            usage=_usage(job, len(ids_out)),
        )
    )


def _usage(job: _Job, completion_tokens: int) -> Usage:
    prompt = len(job.prompt_ids)
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion_tokens,
        total_tokens=prompt + completion_tokens,
    )


def _finish(job: _Job, count: int) -> FinishReason:
    return "length" if count >= job.params.max_tokens else "stop"


def _tokens(state: ServerState, job: _Job) -> AsyncIterator[int]:
    """The engine's tokens, recording whether generation works (for /health)."""
    assert state.engine is not None
    return _recorded(state, state.engine.generate(job.prompt_ids, job.params))


async def _recorded(state: ServerState, stream: AsyncIterator[_T]) -> AsyncIterator[_T]:
    """`stream`'s items until the request's deadline, recording whether generation works
    (for /health); past the deadline, `RequestTimedOut` (not a failure of the engine)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + state.request_timeout_s
    try:
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    token = await anext(stream)
            except StopAsyncIteration:
                break
            except TimeoutError:
                if loop.time() < deadline:
                    raise  # the engine's own timeout, not the request's deadline
                raise RequestTimedOut(
                    f"the request was still generating after {state.request_timeout_s:g} s, "
                    "the server's limit (request_timeout_s)"
                ) from None
            yield token
    except RequestTimedOut:
        raise
    except Exception:
        state.last_generation_failed = True
        raise
    finally:
        # Stops the engine's work for this request if the client went away.
        if (aclose := getattr(stream, "aclose", None)) is not None:
            await aclose()
    state.last_generation_failed = False


def _generation_error(err: Exception) -> APIError:
    """What a client is told of a failed generation: the deadline by name, an engine's own
    error only by the reference under which the rig's log has it."""
    if isinstance(err, RequestTimedOut):
        return APIError(504, str(err), type="timeout_error", code="request_timeout")
    ref = _reference("generation failed")
    return APIError(
        500,
        f"generation failed in the engine (the rig's log has the details under {ref})",
        type="internal_error",
    )


async def _generate_all(state: ServerState, job: _Job) -> list[int]:
    try:
        return [t async for t in _tokens(state, job)]
    except Exception as err:
        raise _generation_error(err) from err


async def _generate_scored(state: ServerState, job: _Job) -> list[ScoredToken]:
    engine = state.engine
    assert isinstance(engine, ScoringEngine)
    assert job.top_logprobs is not None
    stream = engine.generate_scored(job.prompt_ids, job.params, job.top_logprobs)
    try:
        return [t async for t in _recorded(state, stream)]
    except Exception as err:
        raise _generation_error(err) from err


async def _disconnected(request: Request) -> None:
    """Returns once the client has gone away (the body has been read by then)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _unless_abandoned(work: Awaitable[_T], request: Request) -> _T:
    """`work`'s result (all generated tokens); if the client disconnects first, cancel the
    generation (which stops the engine's work for it) and answer 499 to nobody."""
    generation = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({generation, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not generation.done():
            generation.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await generation
    if generation.cancelled():
        log.info("client went away: generation cancelled")
        raise APIError(CLIENT_CLOSED_REQUEST, "the client closed the request", code=None)
    return generation.result()


async def _text_deltas(state: ServerState, job: _Job) -> AsyncIterator[tuple[str, int]]:
    """(text delta, tokens so far) per generated token; the delta may be empty."""
    assert state.tokenizer is not None
    detok = state.tokenizer.detokenizer()
    count = 0
    async for token in _tokens(state, job):
        count += 1
        yield detok.push(token), count
    if tail := detok.flush():
        yield tail, count


async def _stream_completion(state: ServerState, job: _Job) -> AsyncIterator[bytes]:
    rid, created = new_id("cmpl"), now()

    def chunk(text: str, finish: FinishReason | None) -> bytes:
        choice = CompletionChoice(text=text, finish_reason=finish)
        return sse.event(
            CompletionChunk(id=rid, created=created, model=job.model, choices=[choice]),
            with_usage=job.include_usage,
        )

    count = 0
    try:
        async for text, produced in _text_deltas(state, job):
            count = produced
            if text:
                yield chunk(text, None)
    except Exception as err:
        yield _stream_error(err)
        yield sse.DONE
        return
    yield chunk("", _finish(job, count))
    if job.include_usage:
        yield sse.event(
            CompletionChunk(
                id=rid, created=created, model=job.model, choices=[], usage=_usage(job, count)
            )
        )
    yield sse.DONE


async def _stream_chat(state: ServerState, job: _Job) -> AsyncIterator[bytes]:
    rid, created = new_id("chatcmpl"), now()

    def chunk(delta: ChatDelta, finish: FinishReason | None = None) -> bytes:
        choice = ChatChunkChoice(delta=delta, finish_reason=finish)
        return sse.event(
            ChatCompletionChunk(id=rid, created=created, model=job.model, choices=[choice]),
            with_usage=job.include_usage,
        )

    yield chunk(ChatDelta(role="assistant", content=""))
    count = 0
    try:
        async for text, produced in _text_deltas(state, job):
            count = produced
            if text:
                yield chunk(ChatDelta(content=text))
    except Exception as err:
        yield _stream_error(err)
        yield sse.DONE
        return
    yield chunk(ChatDelta(), _finish(job, count))
    if job.include_usage:
        yield sse.event(
            ChatCompletionChunk(
                id=rid, created=created, model=job.model, choices=[], usage=_usage(job, count)
            )
        )
    yield sse.DONE


def _stream_error(err: Exception) -> bytes:
    return sse.event(ErrorResponse(error=_generation_error(err).body.error))


def _json(payload: BaseModel, status: int = 200) -> Response:
    return Response(payload.model_dump_json(), status_code=status, media_type="application/json")
