"""The JAX rig's engine: continuous batching over a fixed number of slots.

One background thread owns the device. Each turn it admits every waiting request that a
free slot can take (prompts padded to a bucket; requests of one bucket share prefill
calls of a few batch sizes, so a burst of arrivals fills the batch in a few calls), then
runs one chunk of `steps_per_call` decode steps over the occupied slots (width rounded
up to a slot bucket; attention reads the cache rows up to a context bucket above every
position in the chunk) while it hands the previous chunk's tokens to the waiting
requests: one host round trip per chunk, and the device never waits for the host.
Compilations are bounded by the buckets (prompt buckets x prefill batch sizes + 2 x
(slot width, context bucket) pairs + 1) and counted.
Each width has two decode programs: one for chunks where every slot is greedy and none
wants logprobs (no sampling code, no branch, no scoring) and one for the others (it
samples the rows that sample and scores every token).
"""

from __future__ import annotations

import asyncio
import bisect
import importlib.metadata
import os
import platform
import secrets
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rigs.jax import compiles, model, steps
from rigs.jax.executables import ExecutableCache, build
from rigs.serving.engine import SamplingParams, ScoredStreams, ScoredToken
from rigs.serving.sizing import ladder

# tokens (scored for a request that asked for logprobs), a failure, or the end
Item = list[int] | list[ScoredToken] | BaseException | None


@dataclass(frozen=True)
class EngineOptions:
    max_slots: int = 32
    max_model_len: int = 4096
    steps_per_call: int = 8  # decode steps per device program (per host round trip)
    # Empty: powers of two from 64 to max_model_len (prefill is compute-bound: padding
    # costs up to 2x there). Every bucket is one compiled prefill program.
    prompt_buckets: tuple[int, ...] = ()
    # Empty: 1, 2, 4, ... up to max_slots (decode is bound by streaming the weights, the
    # same at any width, but a wider step reads more KV: concurrency 32 of 64 slots runs
    # at width 32, not 64). Two programs per width (greedy or not) and context bucket.
    slot_widths: tuple[int, ...] = ()
    # Prompts per prefill call: several waiting prompts of one bucket go in one call
    # (padded up to the next size). Sizes above 1 only for buckets up to
    # batched_prefill_max_len, capped at max_slots: one program per (bucket, size).
    prefill_batches: tuple[int, ...] = (1, 2, 4, 8)
    batched_prefill_max_len: int = 1024
    # Cache rows a decode step's attention reads: the smallest bucket above every position
    # in the chunk. Empty: 1024, 4096, ... up to max_model_len. Only widths of at least
    # context_min_width get the smaller buckets (below it KV reads are a few % of a step).
    context_buckets: tuple[int, ...] = ()
    context_min_width: int = 8
    # An idle engine that admits requests waits up to gather_s for each next arrival (at
    # most gather_max_s in all, less than their prefills take) before decoding.
    gather_s: float = 0.002
    gather_max_s: float = 0.008

    def __post_init__(self) -> None:
        if self.max_slots < 1 or self.max_model_len < 2 or self.steps_per_call < 1:
            raise ValueError(f"bad engine options: {self}")
        for name, values, top in (
            ("prompt_buckets", self.buckets, self.max_model_len),
            ("slot_widths", self.widths, self.max_slots),
            ("context_buckets", self.contexts, self.max_model_len),
        ):
            if list(values) != sorted(set(values)) or values[-1] != top or values[0] < 1:
                raise ValueError(f"{name} must rise strictly to {top}, got {values}")
        b = self.prefill_batches
        if not b or b[0] != 1 or list(b) != sorted(set(b)):
            raise ValueError(f"prefill_batches must rise strictly from 1, got {b}")

    def prefill_sizes(self, bucket: int) -> tuple[int, ...]:
        """Batch sizes of the prefill programs for one prompt bucket."""
        if bucket > self.batched_prefill_max_len:
            return (1,)
        return tuple(sorted({min(n, self.max_slots) for n in self.prefill_batches}))

    @property
    def prefill_keys(self) -> tuple[tuple[int, int], ...]:
        """(bucket, batch size) of every prefill program."""
        return tuple((t, n) for t in self.buckets for n in self.prefill_sizes(t))

    @property
    def buckets(self) -> tuple[int, ...]:
        return self.prompt_buckets or ladder(self.max_model_len, min(64, self.max_model_len), 2)

    @property
    def widths(self) -> tuple[int, ...]:
        return self.slot_widths or ladder(self.max_slots, 1, 2)

    @property
    def contexts(self) -> tuple[int, ...]:
        return self.context_buckets or ladder(self.max_model_len, min(1024, self.max_model_len), 4)

    def contexts_for(self, width: int) -> tuple[int, ...]:
        """Context buckets of the decode programs of one width."""
        return self.contexts if width >= self.context_min_width else self.contexts[-1:]

    @property
    def decode_keys(self) -> tuple[tuple[int, int, bool], ...]:
        """(width, context, greedy) of every decode program."""
        return tuple(
            (w, c, g) for g in (True, False) for w in self.widths for c in self.contexts_for(w)
        )


@dataclass(eq=False)
class _Request:
    prompt: list[int]
    params: SamplingParams
    seed: int
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[Item]
    cancelled: bool = False
    finished: bool = False
    budget: int = 0  # decode steps still needed at most (EOS may end it sooner)
    next_pos: int = 0  # position of the next decode step's input (an upper bound)
    top_n: int | None = None  # logprobs wanted, with this many alternatives

    def tokens(self, ids: list[int], scored: list[ScoredToken] | None) -> None:
        """Hand over ids, with their scores if this request asked for logprobs."""
        self.send(ids if self.top_n is None or scored is None else scored)

    def send(self, item: Item) -> None:
        if item is None or isinstance(item, BaseException):
            self.finished = True
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


@dataclass
class _Prefilled:
    rows: list[tuple[_Request, int]]  # request and slot of each real row
    tokens: jax.Array  # [B]
    emitted: jax.Array  # [B]
    active: jax.Array  # [B]
    scores: steps.Scores  # [B, ...]


@dataclass
class _Chunk:
    tokens: jax.Array  # [steps, width]
    emitted: jax.Array  # [steps, width]
    active: jax.Array  # [width]
    scores: steps.Scores | None  # [steps, width, ...]; None from a greedy program
    owners: list[_Request | None]


@dataclass
class Stats:
    prefills: int = 0
    chunks: int = 0
    decode_steps: int = 0
    tokens: int = 0
    warm_up_seconds: float | None = None


class JaxEngine(ScoredStreams):
    """Serves `Engine` (rigs/serving/engine.py) from a Gemma 4 model in JAX."""

    def __init__(
        self,
        params: model.Params,
        cfg: model.Config,
        options: EngineOptions,
        *,
        model_name: str,
        model_revision: str = "unknown",  # the checkpoint's (ModelSource.revision)
        eos_token_ids: frozenset[int] | None = None,
        device: jax.Device | None = None,
        executable_cache: Path | None = None,
    ) -> None:
        self.model_name = model_name
        self.model_revision = model_revision
        self.max_model_len = options.max_model_len
        self.vocab_size = cfg.vocab_size
        self.eos_token_ids = frozenset(
            cfg.eos_token_ids if eos_token_ids is None else eos_token_ids
        )
        self.options = options
        self.slots = options.max_slots  # requests generated at once
        self.cfg = cfg
        self.params = params
        self.dtype = jnp.dtype(params.embed.dtype)
        self.device = device or jax.devices()[0]
        self.compiles = compiles.install()
        self.executables = (
            None if executable_cache is None else ExecutableCache(executable_cache, self.device)
        )
        self.stats = Stats()
        self.ready = threading.Event()
        self.failure: BaseException | None = None
        # an id past the vocabulary stands for "no EOS" and is dropped by the scatter
        eos = sorted(self.eos_token_ids) or [cfg.vocab_size]
        self._eos = jax.device_put(np.asarray(eos, np.int32), self.device)
        self._reset_device_state()
        self._prefill_programs: dict[tuple[int, int], Any] = {}
        self._decode_programs: dict[tuple[int, int, bool], Any] = {}
        self._owners: list[_Request | None] = [None] * options.max_slots
        self._pending: deque[_Request] = deque()
        self._wake = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="jax-engine", daemon=True)

    # --- the Engine protocol -----------------------------------------------------------

    def provenance(self) -> Mapping[str, str]:
        c = self.compiles.snapshot()
        return {
            "runtime": "rigbench-jax",
            "model_revision": self.model_revision,
            "jax": jax.__version__,
            "jaxlib": importlib.metadata.version("jaxlib"),
            "python": platform.python_version(),
            "device": str(self.device.device_kind),
            "platform": self.device.platform,
            "dtype": str(self.dtype),
            "batching": f"continuous, {self.options.max_slots} slots",
            "slot_widths": ",".join(map(str, self.options.widths)),
            "context_buckets": ",".join(map(str, self.options.contexts)),
            "prompt_buckets": ",".join(map(str, self.options.buckets)),
            "prefill_batches": ",".join(map(str, self.options.prefill_batches)),
            "batched_prefill_max_len": str(self.options.batched_prefill_max_len),
            "steps_per_call": str(self.options.steps_per_call),
            "kernels": self.cfg.kernels,  # decode steps' weight products (rigs/jax/gemv.py)
            # Each device call decodes steps_per_call tokens per sequence and hands them over
            # together: client-side gaps inside a burst are ~0, so rank on TPOT, not ITL.
            "token_delivery": "burst",
            "tokens_per_burst": str(self.options.steps_per_call),
            "max_model_len": str(self.max_model_len),
            "compilations": str(c["executables"]),
            "compile_seconds": str(c["compile_seconds"]),
            "executables_loaded": str(self.executables.loaded if self.executables else 0),
            "warm_up_seconds": str(self.stats.warm_up_seconds),
        }

    max_top_logprobs = steps.TOP_LOGPROBS

    async def _stream(
        self, prompt_ids: list[int], params: SamplingParams, top_n: int | None
    ) -> AsyncIterator[int | ScoredToken]:
        self.check(prompt_ids, params)
        if self.failure is not None:
            raise RuntimeError(f"JAX engine failed: {self.failure!r}")
        seed = secrets.randbits(32) if params.seed is None else params.seed % 2**32
        request = _Request(
            list(prompt_ids), params, seed, asyncio.get_running_loop(), asyncio.Queue(), top_n=top_n
        )
        with self._wake:
            self._pending.append(request)
            self._wake.notify()
        try:
            while True:
                item = await request.queue.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                for token in item:
                    yield token
        finally:
            if not request.finished:
                request.cancelled = True
                with self._wake:
                    self._wake.notify()

    # --- lifecycle ---------------------------------------------------------------------

    def check(self, prompt_ids: list[int], params: SamplingParams) -> None:
        """Raise ValueError naming what is wrong with a request."""
        if not prompt_ids:
            raise ValueError("prompt is empty")
        bad = [t for t in prompt_ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"token ids {bad[:5]} are outside [0, {self.vocab_size})")
        if params.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {params.max_tokens}")
        if len(prompt_ids) + params.max_tokens > self.max_model_len:
            raise ValueError(
                f"prompt ({len(prompt_ids)} tokens) + max_tokens ({params.max_tokens}) exceeds"
                f" max_model_len {self.max_model_len}"
            )
        if not 0 <= params.min_tokens <= params.max_tokens:
            raise ValueError(f"min_tokens must be in [0, max_tokens], got {params.min_tokens}")
        if params.temperature < 0 or not 0 < params.top_p <= 1:
            raise ValueError("temperature must be >= 0 and top_p in (0, 1]")

    def start(self) -> None:
        """Warm up (compile every bucket) on the device thread, then serve."""
        self._thread.start()

    def wait_ready(self, timeout: float | None = None) -> None:
        if not self.ready.wait(timeout):
            raise TimeoutError("JAX engine did not finish warming up")
        if self.failure is not None:
            raise RuntimeError("JAX engine failed to warm up") from self.failure

    def close(self) -> None:
        with self._wake:
            self._stop = True
            self._wake.notify()
        if self._thread.is_alive():
            self._thread.join(timeout=60)

    # --- the device thread -------------------------------------------------------------

    def _reset_device_state(self) -> None:
        o = self.options
        cache = model.init_cache(self.cfg, o.max_slots, o.max_model_len, self.dtype)
        self._cache = jax.device_put(cache, self.device)
        self._slots = jax.device_put(steps.empty_slots(o.max_slots), self.device)

    def _run(self) -> None:
        try:
            self._warm_up()
        except BaseException as e:
            self.failure = e
            self._fail_everyone(e)
            return
        finally:
            self.ready.set()
        inflight: _Chunk | None = None
        while True:
            with self._wake:
                if self._stop:
                    break
                idle = inflight is None and not self._pending and not any(self._owners)
                if idle:
                    self._wake.wait(timeout=0.5)
                    continue
            try:
                self._drop_cancelled()
                admitted = self._admit()
                if admitted and inflight is None:
                    admitted += self._gather()
                nxt = self._dispatch()  # queued behind the prefills: no wait for them
                if inflight is not None:
                    self._collect(inflight)
                self._deliver(admitted)  # first tokens before any of nxt's
                inflight = nxt
            except Exception as e:  # a device failure: fail the requests, keep serving
                inflight = None
                self._fail_everyone(e)
                self._owners = [None] * self.options.max_slots
                self._reset_device_state()
        self._fail_everyone(RuntimeError("JAX engine stopped"))

    def _fail_everyone(self, error: BaseException) -> None:
        with self._wake:
            waiting = list(self._pending)
            self._pending.clear()
        for r in [*waiting, *self._owners]:
            if r is not None and not r.finished:
                r.send(error)

    def _warm_up(self) -> None:
        """Compile every program the engine can run, in parallel, then run each once.

        The engine calls only these compiled executables: a shape they were not built for
        is an error, never a silent recompilation."""
        start = time.perf_counter()
        o = self.options
        probe = [(SamplingParams(max_tokens=1), 0)]

        def prefill_program(key: tuple[int, int]) -> Any:
            bucket, size = key
            return build(
                steps.prefill_slots,
                self.executables,
                self.params,
                cfg=self.cfg,
                cache=self._cache,
                slots=self._slots,
                tokens=np.zeros((size, bucket), np.int32),
                lengths=np.ones(size, np.int32),
                slot_ids=np.zeros(size, np.int32),
                request=self._request_arrays(probe * size),
                eos_ids=self._eos,
            )

        def decode_program(key: tuple[int, int, bool]) -> Any:
            width, context, greedy = key
            return build(
                steps.decode_chunk,
                self.executables,
                self.params,
                cfg=self.cfg,
                cache=self._cache,
                slots=self._slots,
                eos_ids=self._eos,
                width=width,
                steps=o.steps_per_call,
                greedy=greedy,
                context=context,
            )

        decode_keys = o.decode_keys

        # XLA compiles one program on about one core: one worker per core
        with ThreadPoolExecutor(max_workers=min(16, os.cpu_count() or 1)) as pool:
            # the biggest programs first, so the slowest compile does not start last
            order = sorted(o.prefill_keys, key=lambda k: -k[0] * k[1])
            prefills = pool.map(prefill_program, order)
            decodes = pool.map(decode_program, decode_keys)
            self._prefill_programs = dict(zip(order, prefills, strict=True))
            self._decode_programs = dict(zip(decode_keys, decodes, strict=True))
        for bucket, size in o.prefill_keys:
            # padding rows (slot ids past the last slot) write nothing
            slot_ids = [0] + [o.max_slots] * (size - 1)
            prompts = [[0] * bucket] * size
            jax.block_until_ready(self._prefill(bucket, prompts, probe * size, slot_ids))
        for width, context, greedy in decode_keys:
            jax.block_until_ready(self._chunk(width, greedy, context).tokens)
        self._slots = steps.deactivate(self._slots, np.int32(0))
        jax.block_until_ready(self._slots)
        self.stats.warm_up_seconds = time.perf_counter() - start

    @staticmethod
    def _request_arrays(rows: list[tuple[SamplingParams, int]]) -> steps.Request:
        """[B] arrays of the sampling settings of (params, seed) rows."""
        return steps.Request(
            max_tokens=np.asarray([p.max_tokens for p, _ in rows], np.int32),
            min_tokens=np.asarray([p.min_tokens for p, _ in rows], np.int32),
            ignore_eos=np.asarray([p.ignore_eos for p, _ in rows], np.bool_),
            temperature=np.asarray([p.temperature for p, _ in rows], np.float32),
            top_p=np.asarray([p.top_p for p, _ in rows], np.float32),
            seed=np.asarray([s for _, s in rows], np.uint32),
        )

    def _bucket(self, n: int) -> int:
        return self.options.buckets[bisect.bisect_left(self.options.buckets, n)]

    def _prefill(
        self,
        bucket: int,
        prompts: list[list[int]],
        rows: list[tuple[SamplingParams, int]],
        slot_ids: list[int],
    ) -> tuple[jax.Array, jax.Array, jax.Array, steps.Scores]:
        """One prefill call: prompts (all in `bucket`, as many as a compiled batch size)
        into slot_ids; a slot id of max_slots marks a padding row."""
        size = len(prompts)
        tokens = np.zeros((size, bucket), np.int32)
        for row, prompt in enumerate(prompts):
            tokens[row, : len(prompt)] = prompt
        program = self._prefill_programs[(bucket, size)]
        token, emitted, active, scored, self._cache, self._slots = program(
            self.params,
            cache=self._cache,
            slots=self._slots,
            tokens=tokens,
            lengths=np.asarray([len(p) for p in prompts], np.int32),
            slot_ids=np.asarray(slot_ids, np.int32),
            request=self._request_arrays(rows),
            eos_ids=self._eos,
        )
        self.stats.prefills += 1
        return token, emitted, active, scored

    def _admit(self) -> list[_Prefilled]:
        """Prefill every waiting request that a free slot can take (lowest slots first,
        keeping widths small), those of one bucket together in as few calls as the
        compiled batch sizes allow. Each takes its slot at once (the next chunk decodes
        it); `_deliver` hands over the first tokens and frees the slots of requests the
        prefill already finished."""
        admitted: list[tuple[_Request, int]] = []
        free = [s for s, owner in enumerate(self._owners) if owner is None]
        with self._wake:
            while free and self._pending:
                r = self._pending.popleft()
                if not r.cancelled:
                    admitted.append((r, free.pop(0)))
        if not admitted:
            return []
        by_bucket: dict[int, list[tuple[_Request, int]]] = {}
        for r, slot in admitted:
            by_bucket.setdefault(self._bucket(len(r.prompt)), []).append((r, slot))
        calls = []
        for bucket, group in by_bucket.items():
            sizes = self.options.prefill_sizes(bucket)
            while group:
                # the smallest compiled size that takes them all, else the largest
                size = next((n for n in sizes if n >= len(group)), sizes[-1])
                part, group = group[:size], group[size:]
                pad = size - len(part)
                out = self._prefill(
                    bucket,
                    [r.prompt for r, _ in part] + [[0]] * pad,
                    [(r.params, r.seed) for r, _ in part] + [(part[0][0].params, 0)] * pad,
                    [s for _, s in part] + [self.options.max_slots] * pad,
                )
                calls.append(_Prefilled(part, *out))
        for r, slot in admitted:
            self._owners[slot] = r
            r.budget = r.params.max_tokens - 1
            r.next_pos = len(r.prompt)
        return calls

    def _gather(self) -> list[_Prefilled]:
        """Admit requests arriving right behind those just admitted (a wave of clients)
        before the first decode chunk: a chunk started at a fraction of the final width
        costs nearly what a full one does, and the rest would wait for it. Called only
        while the device has nothing but their prefills to run, so the wait is free."""
        o = self.options
        out: list[_Prefilled] = []
        deadline = time.monotonic() + o.gather_max_s
        while None in self._owners:
            with self._wake:
                left = deadline - time.monotonic()
                if not self._pending and left > 0:
                    self._wake.wait(timeout=min(o.gather_s, left))
                if not self._pending:
                    return out
            out += self._admit()
        return out

    def _deliver(self, calls: list[_Prefilled]) -> None:
        firsts = jax.device_get([(c.tokens, c.emitted, c.active) for c in calls])  # one wait
        wanted = [any(r.top_n is not None for r, _ in c.rows) for c in calls]
        scores = iter(jax.device_get([c.scores for c, w in zip(calls, wanted, strict=True) if w]))
        for call, want, (tokens, emitted, active) in zip(calls, wanted, firsts, strict=True):
            scored = next(scores) if want else None  # only when asked for
            for row, (r, slot) in enumerate(call.rows):
                if r.finished:  # cancelled meanwhile
                    continue
                if emitted[row]:
                    token = int(tokens[row])
                    r.tokens(
                        [token],
                        None if scored is None else [_scored(token, scored, row, r.top_n or 0)],
                    )
                    self.stats.tokens += 1
                if not active[row]:  # ended by its first token: a chunk may hold it, idle
                    r.send(None)
                    if self._owners[slot] is r:
                        self._owners[slot] = None

    def _drop_cancelled(self) -> None:
        for slot, r in enumerate(self._owners):
            if r is not None and r.cancelled:
                self._slots = steps.deactivate(self._slots, np.int32(slot))
                self._owners[slot] = None
                r.finished = True

    def _dispatch(self) -> _Chunk | None:
        """Start a decode chunk if some occupied slot may still need tokens."""
        occupied = [s for s, r in enumerate(self._owners) if r is not None and r.budget > 0]
        if not occupied:
            return None
        o = self.options
        width = o.widths[bisect.bisect_left(o.widths, max(occupied) + 1)]
        owners = [r for r in self._owners[:width] if r is not None]
        running = [r for s in occupied if (r := self._owners[s]) is not None]
        # every input position of the chunk is below the context it reads (slots out of
        # budget are inactive on the device: what they read is never used)
        end = max(r.next_pos for r in running) + o.steps_per_call
        contexts = o.contexts_for(width)
        context = contexts[min(bisect.bisect_left(contexts, end), len(contexts) - 1)]
        greedy = all(r.params.temperature == 0 and r.top_n is None for r in owners)
        chunk = self._chunk(width, greedy, context)
        for r in running:
            r.next_pos += o.steps_per_call
            r.budget -= o.steps_per_call
        return chunk

    def _chunk(self, width: int, greedy: bool, context: int) -> _Chunk:
        k = self.options.steps_per_call
        program = self._decode_programs[(width, context, greedy)]
        tokens, emitted, active, scored, self._cache, self._slots = program(
            self.params, cache=self._cache, slots=self._slots, eos_ids=self._eos
        )
        self.stats.chunks += 1
        self.stats.decode_steps += k
        return _Chunk(tokens, emitted, active, scored, list(self._owners[:width]))

    def _collect(self, chunk: _Chunk) -> None:
        tokens, emitted, active = jax.device_get((chunk.tokens, chunk.emitted, chunk.active))
        wanted = any(r is not None and r.top_n is not None for r in chunk.owners)
        scored = jax.device_get(chunk.scores) if wanted else None  # only when asked for
        assert scored is not None or not wanted  # a greedy program serves no one who asks
        for slot, r in enumerate(chunk.owners):
            if r is None or r.finished:
                continue
            rows = np.flatnonzero(emitted[:, slot])
            out = tokens[rows, slot].tolist()
            if out:
                r.tokens(
                    out,
                    None
                    if scored is None
                    else [
                        _scored(t, scored, (step, slot), r.top_n or 0)
                        for t, step in zip(out, rows.tolist(), strict=True)
                    ],
                )
                self.stats.tokens += len(out)
            if not active[slot]:
                r.send(None)
                if self._owners[slot] is r:
                    self._owners[slot] = None


def _scored(token: int, scored: steps.Scores, at: Any, top_n: int) -> ScoredToken:
    """`token` with its Scores at index `at` (a prefill row, or (step, slot) of a chunk),
    read from host arrays."""
    ids, values = scored.top_ids[at][:top_n], scored.top[at][:top_n]
    return ScoredToken(
        token=token,
        logprob=float(scored.chosen[at]),
        top=tuple(zip(ids.tolist(), values.tolist(), strict=True)),
    )
