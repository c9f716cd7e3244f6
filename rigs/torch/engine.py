"""A thin `Engine` over transformers' AutoModelForCausalLM and `generate`.

Requests are served one at a time (batching mode "serial") by a single worker thread that
runs `model.generate` with a streamer, so greedy output is `generate`'s output token for
token. transformers' continuous batching cannot serve Gemma 4: its paged cache assumes
one head_dim, and Gemma 4 has 256 on sliding layers and 512 on global ones (see README).
"""

from __future__ import annotations

import asyncio
import platform
import threading
from collections.abc import AsyncIterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
import transformers
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    LogitsProcessorList,
    MinNewTokensLengthLogitsProcessor,
    StoppingCriteria,
    StoppingCriteriaList,
)
from transformers.generation.streamers import BaseStreamer

from rigs.serving.engine import SamplingParams
from rigs.sources import ModelSource

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEFAULT_MAX_MODEL_LEN = 8192


class _Cancelled(Exception):
    pass


class _QueueStreamer(BaseStreamer):
    """Hands each new token id from the worker thread to the request's event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[int | None]) -> None:
        self._loop, self._queue = loop, queue
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate() first streams the prompt itself
            self._prompt_seen = True
            return
        for token in value.reshape(-1).tolist():
            self._loop.call_soon_threadsafe(self._queue.put_nowait, int(token))

    def end(self) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, None)


class _StopAt(StoppingCriteria):
    """EOS handling and cancellation, outside generate()'s own EOS logic.

    generate() is run with no EOS id so that `ignore_eos` is just a flag here; `min_tokens`
    is enforced by masking EOS logits, as vLLM does.
    """

    def __init__(
        self, prompt_len: int, eos: frozenset[int], params: SamplingParams, cancel: threading.Event
    ) -> None:
        self._prompt_len, self._eos, self._params, self._cancel = prompt_len, eos, params, cancel

    def __call__(
        self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any
    ) -> torch.Tensor:
        stop = self._cancel.is_set() or (
            not self._params.ignore_eos and int(input_ids[0, -1]) in self._eos
        )
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)


class TorchEngine:
    """transformers `generate`, one request at a time on one device."""

    batching = "serial"

    def __init__(
        self,
        source: ModelSource,
        *,
        dtype: str = "auto",
        device: str | None = None,
        max_model_len: int | None = None,
        attn_implementation: str | None = None,
    ) -> None:
        if dtype != "auto" and dtype not in DTYPES:
            raise ValueError(f"dtype must be auto or one of {sorted(DTYPES)}, not {dtype!r}")
        self.source = source
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        model: Any = AutoModelForCausalLM.from_pretrained(
            source.path,
            dtype="auto" if dtype == "auto" else DTYPES[dtype],
            attn_implementation=attn_implementation,
        )
        self.model = model.to(self.device).eval()
        text_config = self.model.config.get_text_config()
        generation_eos = self.model.generation_config.eos_token_id
        self.eos_token_ids = frozenset(_ids(generation_eos) | _ids(text_config.eos_token_id))
        self.vocab_size = int(text_config.vocab_size)
        # Capped by the model's own positions (random:tiny has 1,024).
        limit = int(text_config.max_position_embeddings)
        self.max_model_len = min(limit, max_model_len or DEFAULT_MAX_MODEL_LEN)
        self.model_name = source.spec
        self.pad_token_id = text_config.pad_token_id
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torch-generate")

    def provenance(self) -> Mapping[str, str]:
        return {
            "rig": "torch",
            "runtime": "transformers",
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "cuda": str(torch.version.cuda),
            "device": _device_name(self.device),
            "dtype": str(self.model.dtype).removeprefix("torch."),
            "attn_implementation": str(self.model.config._attn_implementation),
            "batching": self.batching,
            "model": self.source.name,
            "model_revision": self.source.revision,
            "max_model_len": str(self.max_model_len),
            "python": platform.python_version(),
        }

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> AsyncIterator[int]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[int | None] = asyncio.Queue()
        cancel = threading.Event()
        done = loop.run_in_executor(
            self._worker,
            self._generate_blocking,
            prompt_ids,
            params,
            _QueueStreamer(loop, queue),
            cancel,
        )
        produced = 0
        try:
            while produced < params.max_tokens:
                token = await queue.get()
                if token is None:
                    break
                if token in self.eos_token_ids and not params.ignore_eos:
                    break
                produced += 1
                yield token
            await done  # re-raises a failure inside generate()
        finally:
            cancel.set()

    def _generate_blocking(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        streamer: _QueueStreamer,
        cancel: threading.Event,
    ) -> None:
        try:
            if cancel.is_set():
                return
            input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
            sampling = params.temperature > 0
            config = GenerationConfig(
                max_new_tokens=params.max_tokens,
                do_sample=sampling,
                temperature=params.temperature if sampling else None,
                top_p=params.top_p if sampling else None,
                top_k=None,
                eos_token_id=None,
                pad_token_id=self.pad_token_id,
            )
            processors = LogitsProcessorList()
            if params.min_tokens and not params.ignore_eos and self.eos_token_ids:
                processors.append(
                    MinNewTokensLengthLogitsProcessor(
                        prompt_length_to_skip=len(prompt_ids),
                        min_new_tokens=params.min_tokens,
                        eos_token_id=sorted(self.eos_token_ids),
                        device=str(self.device),
                    )
                )
            if sampling and params.seed is not None:
                torch.manual_seed(params.seed)
            with torch.inference_mode():
                self.model.generate(
                    input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    generation_config=config,
                    logits_processor=processors,
                    stopping_criteria=StoppingCriteriaList(
                        [_StopAt(len(prompt_ids), self.eos_token_ids, params, cancel)]
                    ),
                    streamer=streamer,
                )
        finally:
            streamer.end()


def _ids(value: int | list[int] | None) -> set[int]:
    if value is None:
        return set()
    return {value} if isinstance(value, int) else set(value)


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return f"cpu:{platform.machine()}"
