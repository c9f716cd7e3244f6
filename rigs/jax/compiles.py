"""Counting XLA compilations, from JAX's own monitoring events.

Every executable JAX builds (compiled, or loaded from the persistent compilation cache)
records a backend-compile event; loads from the cache also record a cache hit."""

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import jax

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
CACHE_HIT = "/jax/compilation_cache/cache_hits"


@dataclass
class CompileCounter:
    executables: int = 0  # built, compiled or loaded from the persistent cache
    cache_hits: int = 0
    seconds: float = 0.0
    by_function: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def compiled(self) -> int:
        return self.executables - self.cache_hits

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "executables": self.executables,
                "compiled": self.compiled,
                "persistent_cache_hits": self.cache_hits,
                "compile_seconds": round(self.seconds, 3),
                "by_function": dict(self.by_function),
            }


COUNTER = CompileCounter()
_registered = False


def _on_duration(event: str, duration_secs: float, **kwargs: str | int) -> None:
    if event == BACKEND_COMPILE:
        with COUNTER.lock:
            COUNTER.executables += 1
            COUNTER.seconds += duration_secs
            COUNTER.by_function[str(kwargs.get("fun_name", "?"))] += 1


def _on_event(event: str, **kwargs: str | int) -> None:
    if event == CACHE_HIT:
        with COUNTER.lock:
            COUNTER.cache_hits += 1


def install() -> CompileCounter:
    """Start counting (idempotent); returns the process-wide counter."""
    global _registered
    if not _registered:
        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        jax.monitoring.register_event_listener(_on_event)
        _registered = True
    return COUNTER
