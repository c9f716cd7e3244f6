"""Continuous batching over transformers' `forward` and a static slot cache.

One worker thread owns the model. Between decode steps it admits waiting requests into free
slots (one batched prefill for all of them) and drops finished or cancelled ones, so
sequences join and leave a running batch as in the JAX engine. A decode step runs slots
0..W-1, W the smallest served width (1, 2, 4, ... up to `slots`) holding every live slot;
slots are handed out lowest first so W stays small.

`compile` picks how a decode step runs: "inductor" (the CUDA default) compiles it with
`torch.compile` and captures one CUDA graph for every served width at start-up, before the
server reports ready, so serving never waits on a compile and a step costs one graph
launch; "graphs" captures the eager step in CUDA graphs (no compile); "off" (the CPU
default) runs it eagerly. The outputs are the same.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from rigs.serving import marks
from rigs.serving.engine import SamplingParams, ScoredStreams, ScoredToken
from rigs.serving.sizing import AUTO, auto_slots, ladder
from rigs.sources import ModelSource
from rigs.torch.engine import (
    DTYPES,
    MAX_TOP_LOGPROBS,
    _ids,
    _Request,
    base_provenance,
    gather_wave,
    scored,
)
from rigs.torch.slots import ATTENTION, SlotBuffers, SlotModel

log = logging.getLogger("rigs.torch")
COMPILE_MODES = ("auto", "inductor", "graphs", "off")
Step = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
# Widths from this one up read a context bucket (a narrower step streams far more weight
# bytes than KV rows, so it reads the whole cache and keeps one program), as the JAX rig.
CONTEXT_MIN_WIDTH = 8


@dataclass(eq=False)
class _Slot:
    request: _Request
    position: int  # the position of `last`
    last: int  # the token the next decode step feeds
    produced: int
    generator: torch.Generator | None


class ContinuousEngine(ScoredStreams):
    """Slots that join and leave between decode steps, over one static cache."""

    def __init__(
        self,
        source: ModelSource,
        *,
        dtype: str = "auto",
        device: str | None = None,
        max_model_len: int | None = None,
        slots: int,
        compile: str,
        prefill_tokens: int = 16384,
        context_start: int = 1024,
        admit_gap_s: float,
        admit_wait_s: float,
    ) -> None:
        started = time.monotonic()
        if dtype != "auto" and dtype not in DTYPES:
            raise ValueError(f"dtype must be auto or one of {sorted(DTYPES)}, not {dtype!r}")
        if slots < 1 and slots != AUTO:
            raise ValueError(f"slots must be at least 1 (or AUTO), not {slots}")
        self.source = source
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if compile not in COMPILE_MODES:
            raise ValueError(f"compile must be one of {COMPILE_MODES}, not {compile!r}")
        if compile == "auto":
            compile = "inductor" if self.device.type == "cuda" else "off"
        if compile == "graphs" and self.device.type != "cuda":
            raise ValueError("compile=graphs needs a CUDA device")
        self.compile_mode = compile
        self.compile = compile == "inductor"
        self.graphs = compile == "graphs" or (self.compile and self.device.type == "cuda")
        self.prefill_tokens = prefill_tokens
        self.admit_gap_s, self.admit_wait_s = admit_gap_s, admit_wait_s
        model: Any = AutoModelForCausalLM.from_pretrained(
            source.path,
            dtype="auto" if dtype == "auto" else DTYPES[dtype],
            attn_implementation=ATTENTION,
        )
        self.model = model.to(self.device).eval()
        text_config = self.model.config.get_text_config()
        generation_eos = self.model.generation_config.eos_token_id
        self.eos_token_ids = frozenset(_ids(generation_eos) | _ids(text_config.eos_token_id))
        self._eos = sorted(self.eos_token_ids)
        self.vocab_size = int(text_config.vocab_size)
        limit = int(text_config.max_position_embeddings)
        self.max_model_len = min(limit, max_model_len or limit)
        self.model_name = source.spec
        self.max_top_logprobs = MAX_TOP_LOGPROBS
        self.load_s = time.monotonic() - started
        marks.mark("weights_loaded")
        self.slots = self._auto_slots() if slots == AUTO else slots
        self.slot_model = SlotModel(self.model, self.slots, self.max_model_len)
        self.widths = ladder(self.slots, 1, 2)
        self.contexts = ladder(self.max_model_len, min(context_start, self.max_model_len), 4)
        self.prefill_batches: list[int] = []  # requests per prefill, most recent last
        self._pending: queue.Queue[_Request] = queue.Queue()
        self._live: list[_Slot | None] = [None] * self.slots
        self._k_pos = torch.arange(self.max_model_len, device=self.device)
        compile_start = time.monotonic()
        self._steps = self._build_steps()
        self.compile_s = time.monotonic() - compile_start
        marks.mark("compiled")
        self.ready_s = time.monotonic() - started
        log.info(
            "continuous engine ready in %.1f s (load %.1f s, compile and capture %.1f s, "
            "widths %s, contexts %s, cache %.2f GB)",
            self.ready_s,
            self.load_s,
            self.compile_s,
            self.widths,
            self.contexts,
            self.slot_model.buffers.nbytes() / 1e9,
        )
        self._worker = threading.Thread(target=self._serve_forever, daemon=True, name="slots")
        self._worker.start()

    # -- start-up ---------------------------------------------------------------------

    def _auto_slots(self) -> int:
        """Slots from the GPU's free memory after the weights (rigs/serving/sizing.py)."""
        free = torch.cuda.mem_get_info(self.device)[0] if self.device.type == "cuda" else None
        per_slot = SlotBuffers.bytes_per_slot(
            self.model.get_decoder(), self.max_model_len, self.model.dtype
        )
        slots = auto_slots(free, per_slot)
        log.info("max_batch auto: %d slots (%s bytes free, %d per slot)", slots, free, per_slot)
        return slots

    def contexts_for(self, width: int) -> tuple[int, ...]:
        """The context buckets of one width's decode steps."""
        return self.contexts if width >= CONTEXT_MIN_WIDTH else self.contexts[-1:]

    def _build_steps(self) -> dict[tuple[int, int], Step]:
        """A decode callable per served (width, context bucket): eager, compiled, or a
        replayed CUDA graph."""
        decode: Step = self.slot_model.decode
        keys = [(w, c) for w in sorted(self.widths, reverse=True) for c in self.contexts_for(w)]
        if self.compile:
            torch._dynamo.config.cache_size_limit = max(
                torch._dynamo.config.cache_size_limit, 4 * len(keys)
            )
            self.slot_model.buffers.mark_static()
            decode = torch.compile(decode, dynamic=None)
        steps: dict[tuple[int, int], Step] = {}
        pool = torch.cuda.graph_pool_handle() if self.graphs else None
        with torch.inference_mode():
            for width, context in keys:
                ids = torch.zeros((width, 1), dtype=torch.long, device=self.device)
                positions = torch.zeros(width, dtype=torch.long, device=self.device)
                k_pos = torch.arange(context, device=self.device)
                if self.compile:
                    for tensor in (ids, positions, k_pos):
                        torch._dynamo.maybe_mark_dynamic(tensor, 0)
                    t0 = time.monotonic()
                    decode(ids, positions, k_pos)  # compiles here, at start-up
                    log.info(
                        "width %d, context %d: first compiled step %.1f s",
                        width,
                        context,
                        time.monotonic() - t0,
                    )
                steps[width, context] = (
                    self._capture(decode, ids, positions, k_pos, pool) if self.graphs else decode
                )
        return steps

    def _capture(
        self,
        decode: Step,
        ids: torch.Tensor,
        positions: torch.Tensor,
        k_pos: torch.Tensor,
        pool: Any,
    ) -> Step:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                decode(ids, positions, k_pos)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            logits = decode(ids, positions, k_pos)

        def replay(
            new_ids: torch.Tensor, new_positions: torch.Tensor, _k_pos: torch.Tensor
        ) -> torch.Tensor:
            ids.copy_(new_ids, non_blocking=True)
            positions.copy_(new_positions, non_blocking=True)
            graph.replay()
            return logits

        return replay

    # -- the Engine protocol ----------------------------------------------------------

    def provenance(self) -> Mapping[str, str]:
        return {
            **base_provenance(self.source, self.model, self.device, self.max_model_len),
            "attn_implementation": ATTENTION,
            "batching": "continuous",
            "max_batch": str(self.slots),
            "decode_widths": ",".join(map(str, self.widths)),
            "context_buckets": ",".join(map(str, self.contexts)),
            "compile": self.compile_mode,
            "cuda_graphs": str(self.graphs).lower(),
            "load_s": f"{self.load_s:.1f}",
            "compile_s": f"{self.compile_s:.1f}",
            "ready_s": f"{self.ready_s:.1f}",
            "recent_prefill_batches": ",".join(map(str, self.prefill_batches[-64:])),
        }

    async def _stream(
        self, prompt_ids: list[int], params: SamplingParams, top_n: int | None
    ) -> AsyncIterator[int | ScoredToken]:
        if len(prompt_ids) + params.max_tokens > self.max_model_len:
            raise ValueError(
                f"{len(prompt_ids)} prompt tokens + max_tokens {params.max_tokens} exceed "
                f"max_model_len {self.max_model_len}"
            )
        request = _Request(list(prompt_ids), params, asyncio.get_running_loop(), top_n)
        self._pending.put(request)
        try:
            while True:
                item = await request.out.get()
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            request.cancel.set()  # frees its slot at the next step if the client went away

    # -- the worker -------------------------------------------------------------------

    def _serve_forever(self) -> None:
        while True:
            try:
                self._admit()
                if any(self._live):
                    self._step()
            except Exception as err:  # fail the live requests, keep serving
                log.exception("decode step failed")
                for index, slot in enumerate(self._live):
                    if slot is not None:
                        slot.request.send(err)
                        self._finish(index)

    def _admit(self) -> None:
        free = [i for i, s in enumerate(self._live) if s is None]
        if not free:
            return
        waiting: list[_Request] = []
        if not any(self._live):  # idle: block for a request, then take its whole wave
            first = self._pending.get()
            batch, others = gather_wave(
                self._pending, first, len(free), self.admit_gap_s, self.admit_wait_s
            )
            waiting = batch + others
        while len(waiting) < len(free):
            try:
                waiting.append(self._pending.get_nowait())
            except queue.Empty:
                break
        waiting = [r for r in waiting if not r.cancel.is_set()]
        while waiting:  # prefill in groups of at most `prefill_tokens` padded tokens
            group = [waiting.pop(0)]
            longest = len(group[0].prompt_ids)
            while waiting:
                longest_next = max(longest, len(waiting[0].prompt_ids))
                if longest_next * (len(group) + 1) > self.prefill_tokens:
                    break
                longest = longest_next
                group.append(waiting.pop(0))
            self._prefill(group, free[: len(group)])
            free = free[len(group) :]

    def _prefill(self, group: list[_Request], slots: list[int]) -> None:
        self.prefill_batches.append(len(group))
        del self.prefill_batches[:-256]
        try:
            with torch.inference_mode():
                logits = self.slot_model.prefill(slots, [r.prompt_ids for r in group])
        except Exception as err:
            for request in group:
                request.send(err)
                request.send(None)
            return
        for request, index in zip(group, slots, strict=True):
            generator = None
            if request.params.temperature > 0 and request.params.seed is not None:
                generator = torch.Generator(device=self.device).manual_seed(request.params.seed)
            self._live[index] = _Slot(request, len(request.prompt_ids) - 1, 0, 0, generator)
        self._emit(slots, logits)

    def _step(self) -> None:
        top = max(i for i, s in enumerate(self._live) if s is not None)
        width = next(w for w in self.widths if w > top)
        ids = torch.zeros((width, 1), dtype=torch.long)
        positions = torch.zeros(width, dtype=torch.long)
        for index, slot in enumerate(self._live[:width]):
            if slot is not None:
                ids[index, 0], positions[index] = slot.last, slot.position
        top_position = max(s.position for s in self._live[:width] if s is not None)
        context = next(c for c in self.contexts_for(width) if c > top_position)
        k_pos = self._k_pos[:context]
        with torch.inference_mode():
            step = self._steps[width, context]
            logits = step(ids.to(self.device), positions.to(self.device), k_pos)
        live = [i for i, s in enumerate(self._live[:width]) if s is not None]
        if len(live) < width:
            logits = logits[torch.tensor(live, device=logits.device)]
        self._emit(live, logits)

    def _emit(self, indices: list[int], logits: torch.Tensor) -> None:
        """Pick the next token of each slot in `indices` (row i of `logits` is slot
        indices[i]), send it, and free the slots that are done."""
        # the raw distribution, before EOS is masked for min_tokens (as the batched engine scores)
        wanted = [r for r, i in enumerate(indices) if self._wants_scores(i)]
        logprobs = (
            dict(zip(wanted, torch.log_softmax(logits[wanted].float(), dim=-1), strict=True))
            if wanted
            else {}
        )
        tokens = self._pick(indices, logits)
        for row, (index, token) in enumerate(zip(indices, tokens, strict=True)):
            slot = self._live[index]
            assert slot is not None
            request, params = slot.request, slot.request.params
            if request.cancel.is_set():
                self._finish(index)
                continue
            if token in self.eos_token_ids and not params.ignore_eos:
                self._finish(index)
                continue
            top_n = request.top_n
            request.send(token if top_n is None else scored(token, logprobs[row], top_n))
            slot.produced += 1
            slot.last, slot.position = token, slot.position + 1
            if slot.produced >= params.max_tokens or slot.position >= self.max_model_len:
                self._finish(index)

    def _wants_scores(self, index: int) -> bool:
        slot = self._live[index]
        return slot is not None and slot.request.top_n is not None

    def _pick(self, indices: list[int], logits: torch.Tensor) -> list[int]:
        live = [self._live[i] for i in indices]
        masked = [
            r
            for r, slot in enumerate(live)
            if slot is not None
            and not slot.request.params.ignore_eos
            and slot.produced < slot.request.params.min_tokens
        ]
        if masked and self._eos:
            logits = logits.clone()
            logits[torch.tensor(masked, device=logits.device)[:, None], self._eos] = -float("inf")
        picked = logits.argmax(-1)
        for r, slot in enumerate(live):
            if slot is not None and slot.request.params.temperature > 0:
                picked[r] = _sample(logits[r], slot.request.params, slot.generator)
        return [int(t) for t in picked.tolist()]

    def _finish(self, index: int) -> None:
        slot = self._live[index]
        self._live[index] = None
        if slot is not None:
            slot.request.send(None)


def _sample(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None
) -> torch.Tensor:
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        keep = sorted_probs.cumsum(-1) - sorted_probs < params.top_p
        probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_probs[keep])
    return torch.multinomial(probs, 1, generator=generator)[0]
