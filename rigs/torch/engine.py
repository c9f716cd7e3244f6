"""A thin `Engine` over transformers' AutoModelForCausalLM and `generate`.

One worker thread runs `model.generate` with a streamer. Batching modes:
- "serial": one request at a time, so greedy output is `generate`'s output
  token for token;
- "batched": a wave of requests (closed by an idle gap, see `gather_wave`; up to
  `max_batch`, with the same sampling settings) runs as one left-padded `generate` batch;
  a request arriving meanwhile waits for the next batch (static batching).
Continuous batching is `continuous.py` (transformers' own cannot serve Gemma 4: its paged
cache assumes one head_dim, and Gemma 4 has 256 on sliding layers and 512 on global ones).
"""

from __future__ import annotations

import asyncio
import platform
import queue
import threading
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import transformers
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
)
from transformers.generation.streamers import BaseStreamer

from rigs.serving import marks
from rigs.serving.engine import SamplingParams, ScoredStreams, ScoredToken
from rigs.sources import ModelSource

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
Batching = Literal["serial", "batched"]
MAX_TOP_LOGPROBS = 20
Item = int | ScoredToken | BaseException | None


@dataclass(eq=False)
class _Request:
    prompt_ids: list[int]
    params: SamplingParams
    loop: asyncio.AbstractEventLoop
    top_n: int | None = None  # logprobs wanted, with this many alternatives
    out: asyncio.Queue[Item] = field(default_factory=asyncio.Queue)
    cancel: threading.Event = field(default_factory=threading.Event)

    def send(self, item: Item) -> None:
        """From the worker thread to the request's event loop (gone if the caller is)."""
        try:
            self.loop.call_soon_threadsafe(self.out.put_nowait, item)
        except RuntimeError:  # the loop was closed: nobody is waiting any more
            self.cancel.set()

    def batch_key(self) -> tuple[object, ...]:
        """Requests sharing a generate() call must share its sampling settings."""
        p = self.params
        if p.temperature <= 0:
            return ("greedy",)
        return ("sample", p.temperature, p.top_p, p.seed, id(self) if p.seed is not None else 0)


class _Rows:
    """Per-row stop rules of one batch: EOS (unless ignore_eos), max_tokens, cancellation."""

    def __init__(self, batch: list[_Request], prompt_len: int, eos: frozenset[int]) -> None:
        self.batch, self.prompt_len, self.eos = batch, prompt_len, eos
        self.finished = [False] * len(batch)
        # this step's log-probabilities, for the rows that asked for logprobs
        self.logprobs: list[torch.Tensor | None] = [None] * len(batch)

    def produced(self, input_ids: torch.Tensor) -> int:
        return int(input_ids.shape[1]) - self.prompt_len


class _BatchStop(StoppingCriteria):
    def __init__(self, rows: _Rows) -> None:
        self.rows = rows

    def __call__(
        self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any
    ) -> torch.Tensor:
        rows, produced = self.rows, self.rows.produced(input_ids)
        last = input_ids[:, -1].tolist()
        for i, request in enumerate(rows.batch):
            params = request.params
            rows.finished[i] = (
                rows.finished[i]
                or request.cancel.is_set()
                or produced >= params.max_tokens
                or (not params.ignore_eos and last[i] in rows.eos)
            )
        return torch.tensor(rows.finished, dtype=torch.bool, device=input_ids.device)


class _MinTokens(LogitsProcessor):
    """Masks EOS for rows that have not produced `min_tokens` yet (as vLLM does)."""

    def __init__(self, rows: _Rows) -> None:
        self.rows = rows
        self.eos = sorted(rows.eos)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        produced = self.rows.produced(input_ids)
        masked = [
            i
            for i, r in enumerate(self.rows.batch)
            if not r.params.ignore_eos and produced < r.params.min_tokens
        ]
        if masked and self.eos:
            scores = scores.clone()
            scores[torch.tensor(masked, device=scores.device)[:, None], self.eos] = -float("inf")
        return scores


class _Perturb(LogitsProcessor):
    """Adds a fixed random vector to the logits: makes a rig wrong on purpose, for tests of
    the agreement check only (`--test-logit-perturbation`)."""

    def __init__(self, scale: float, vocab_size: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.bias = scale * torch.randn(vocab_size, generator=generator)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        return scores + self.bias[: scores.shape[-1]].to(scores.device, scores.dtype)


class _Logprobs(LogitsProcessor):
    """Keeps this step's log-softmax for the rows that asked for logprobs (the raw
    distribution: it runs before `_MinTokens` masks EOS)."""

    def __init__(self, rows: _Rows) -> None:
        self.rows = rows
        self.wanted = [i for i, r in enumerate(rows.batch) if r.top_n is not None]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.wanted:
            logprobs = torch.log_softmax(scores[self.wanted].float(), dim=-1)
            for j, i in enumerate(self.wanted):
                self.rows.logprobs[i] = logprobs[j]
        return scores


def scored(token: int, logprobs: torch.Tensor, top_n: int) -> ScoredToken:
    """`token` with its log-probability and the `top_n` most likely tokens, from a [V] row."""
    values, ids = torch.topk(logprobs, top_n) if top_n else (logprobs[:0], logprobs[:0])
    return ScoredToken(
        token=token,
        logprob=float(logprobs[token]),
        top=tuple(zip(ids.tolist(), values.tolist(), strict=True)),
    )


class _BatchStreamer(BaseStreamer):
    """Hands each row's new token to its request, up to the row's own stop.

    Keeps its own count rather than reading `_Rows.finished`, so it does not depend on
    whether generate() calls the streamer before or after the stopping criteria.
    """

    def __init__(self, rows: _Rows) -> None:
        self.rows = rows
        self._prompt_seen = False
        self._sent = [0] * len(rows.batch)
        self._done = [False] * len(rows.batch)

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate() first streams the prompt itself
            self._prompt_seen = True
            return
        for i, token in enumerate(value.reshape(-1).tolist()):
            request = self.rows.batch[i]
            if self._done[i]:
                continue
            logprobs = self.rows.logprobs[i]
            if request.top_n is not None and logprobs is not None:
                request.send(scored(int(token), logprobs, request.top_n))
            else:
                request.send(int(token))
            self._sent[i] += 1
            self._done[i] = self._sent[i] >= request.params.max_tokens or (
                not request.params.ignore_eos and int(token) in self.rows.eos
            )

    def end(self) -> None:
        pass


class TorchEngine(ScoredStreams):
    """transformers `generate` on one device, serially or in static batches."""

    def __init__(
        self,
        source: ModelSource,
        *,
        dtype: str = "auto",
        device: str | None = None,
        max_model_len: int | None = None,
        attn_implementation: str | None = None,
        batching: Batching,
        max_batch: int,
        batch_gap_s: float,
        batch_wait_s: float,
        logit_perturbation: float = 0.0,
    ) -> None:
        if dtype != "auto" and dtype not in DTYPES:
            raise ValueError(f"dtype must be auto or one of {sorted(DTYPES)}, not {dtype!r}")
        if batching not in ("serial", "batched"):
            raise ValueError(f"batching must be serial or batched, not {batching!r}")
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, not {max_batch}")
        self.source = source
        self.batching = batching
        self.max_batch = 1 if batching == "serial" else max_batch
        self.slots = self.max_batch  # requests generated at once (the server's bound adds to it)
        self.batch_gap_s, self.batch_wait_s = batch_gap_s, batch_wait_s
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        model: Any = AutoModelForCausalLM.from_pretrained(
            source.path,
            dtype="auto" if dtype == "auto" else DTYPES[dtype],
            attn_implementation=attn_implementation,
        )
        self.model = model.to(self.device).eval()
        marks.mark("weights_loaded")
        text_config = self.model.config.get_text_config()
        generation_eos = self.model.generation_config.eos_token_id
        self.eos_token_ids = frozenset(_ids(generation_eos) | _ids(text_config.eos_token_id))
        # EOS is a per-request rule here (_BatchStop). generate() fills an unset eos_token_id
        # from the model's generation_config, which would stop `ignore_eos` requests early.
        self.model.generation_config.eos_token_id = None
        self.vocab_size = int(text_config.vocab_size)
        # Capped by the model's own positions (random:tiny has 1,024); None: those.
        limit = int(text_config.max_position_embeddings)
        self.max_model_len = min(limit, max_model_len or limit)
        self.model_name = source.spec
        self.pad_token_id = int(text_config.pad_token_id or 0)
        self.batch_sizes: list[int] = []  # rows per generate() call, most recent last
        self.max_top_logprobs = MAX_TOP_LOGPROBS
        self.logit_perturbation = logit_perturbation
        self._perturb = (
            _Perturb(logit_perturbation, self.vocab_size) if logit_perturbation else None
        )
        self._pending: queue.Queue[_Request] = queue.Queue()
        self._worker = threading.Thread(target=self._serve_forever, daemon=True, name="generate")
        self._worker.start()

    def provenance(self) -> Mapping[str, str]:
        return {
            **base_provenance(self.source, self.model, self.device, self.max_model_len),
            "attn_implementation": str(self.model.config._attn_implementation),
            "batching": self.batching,
            "max_batch": str(self.max_batch),
            "recent_batches": ",".join(map(str, self.batch_sizes[-64:])),
            **perturbation_provenance(self.logit_perturbation),
        }

    async def _stream(
        self, prompt_ids: list[int], params: SamplingParams, top_n: int | None
    ) -> AsyncIterator[int | ScoredToken]:
        request = _Request(list(prompt_ids), params, asyncio.get_running_loop(), top_n)
        self._pending.put(request)
        produced = 0
        try:
            while produced < params.max_tokens:
                item = await request.out.get()
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                token = item.token if isinstance(item, ScoredToken) else item
                if token in self.eos_token_ids and not params.ignore_eos:
                    break
                produced += 1
                yield item
        finally:
            request.cancel.set()  # stops its row if the client went away mid-generation

    def _serve_forever(self) -> None:
        while True:
            batch = self._next_batch()
            try:
                self._run_batch(batch)
            except Exception as err:
                for request in batch:
                    request.send(err)
            finally:
                for request in batch:
                    request.send(None)

    def _next_batch(self) -> list[_Request]:
        """The first waiting request plus the compatible ones of its wave (see `gather_wave`)."""
        first = self._pending.get()
        if self.max_batch == 1:
            return [first]
        batch, others = gather_wave(
            self._pending, first, self.max_batch, self.batch_gap_s, self.batch_wait_s
        )
        for request in others:
            self._pending.put(request)
        return batch

    def _run_batch(self, batch: list[_Request]) -> None:
        live = [r for r in batch if not r.cancel.is_set()]
        if not live:
            return
        self.batch_sizes.append(len(live))
        del self.batch_sizes[:-256]
        prompt_len = max(len(r.prompt_ids) for r in live)
        input_ids = torch.full((len(live), prompt_len), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for i, request in enumerate(live):  # left padding: every row ends at the same column
            n = len(request.prompt_ids)
            input_ids[i, prompt_len - n :] = torch.tensor(request.prompt_ids)
            attention_mask[i, prompt_len - n :] = 1
        params = live[0].params
        sampling = params.temperature > 0
        config = GenerationConfig(
            max_new_tokens=max(r.params.max_tokens for r in live),
            do_sample=sampling,
            temperature=params.temperature if sampling else None,
            top_p=params.top_p if sampling else None,
            top_k=None,
            eos_token_id=None,  # EOS is a per-row rule in _BatchStop
            pad_token_id=self.pad_token_id,
        )
        rows = _Rows(live, prompt_len, self.eos_token_ids)
        if sampling and params.seed is not None:
            torch.manual_seed(params.seed)
        with torch.inference_mode():
            self.model.generate(
                input_ids.to(self.device),
                attention_mask=attention_mask.to(self.device),
                generation_config=config,
                logits_processor=LogitsProcessorList(
                    [*([self._perturb] if self._perturb else []), _Logprobs(rows), _MinTokens(rows)]
                ),
                stopping_criteria=StoppingCriteriaList([_BatchStop(rows)]),
                streamer=_BatchStreamer(rows),
            )


def base_provenance(
    source: ModelSource, model: Any, device: torch.device, max_model_len: int
) -> dict[str, str]:
    """What every torch engine reports: versions, device, dtype, model."""
    return {
        "rig": "torch",
        "runtime": "transformers",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "device": _device_name(device),
        "dtype": str(model.dtype).removeprefix("torch."),
        "model": source.name,
        "model_revision": source.revision,
        "max_model_len": str(max_model_len),
        "python": platform.python_version(),
    }


def perturbation_provenance(scale: float) -> dict[str, str]:
    """Says so in provenance when a rig was made wrong on purpose (tests only)."""
    return {"test_logit_perturbation": f"{scale:g}"} if scale else {}


def gather_wave(
    pending: queue.Queue[_Request],
    first: _Request,
    limit: int,
    gap_s: float,
    wait_s: float,
) -> tuple[list[_Request], list[_Request]]:
    """`first` plus the requests that keep arriving less than `gap_s` apart.

    A batch closes when no request arrived for `gap_s` (an idle gap), when it holds `limit`
    requests, or `wait_s` after `first`, whichever comes first: a wave of concurrent
    requests is never split by a window counted from its first arrival. Returns the batch
    (requests with `first`'s sampling settings) and the incompatible requests taken meanwhile.
    """
    batch: list[_Request] = [first]
    others: list[_Request] = []
    deadline = time.monotonic() + wait_s
    while len(batch) < limit:
        timeout = min(gap_s, deadline - time.monotonic())
        if timeout <= 0:
            break
        try:
            request = pending.get(timeout=timeout)
        except queue.Empty:
            break
        (batch if request.batch_key() == first.batch_key() else others).append(request)
    return batch, others


def _ids(value: int | list[int] | None) -> set[int]:
    if value is None:
        return set()
    return {value} if isinstance(value, int) else set(value)


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return f"cpu:{platform.machine()}"
