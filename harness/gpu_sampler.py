"""What the GPU burns during a cell: power, energy, memory and utilisation, from NVML.

NVML through its maintained binding (`nvidia-ml-py`, imported as `pynvml`), sampled on a
thread every `interval_s` while the cell runs. Energy is the driver's own counter where the GPU
has one (Volta and newer: `nvmlDeviceGetTotalEnergyConsumption`), else the power samples
integrated over time. The GPUs are those CUDA_VISIBLE_DEVICES names (by index), else every
GPU NVML sees: on an instance, the one its rig runs on. A machine without the binding, the
driver or a GPU gets no figures and a reason, never zeros.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from harness.schemas import GpuUsage

INTERVAL_S = 0.1


def _handles(nvml: ModuleType, count: int) -> list[Any]:
    """The GPUs CUDA_VISIBLE_DEVICES names, by index or UUID (NVML numbers GPUs in PCI bus
    order, as CUDA does on a host of one GPU model), else every GPU NVML sees."""
    named = os.environ.get("CUDA_VISIBLE_DEVICES")
    if named is None:
        return [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    handles = []
    for part in (p.strip() for p in named.split(",")):
        if part.isdigit() and int(part) < count:
            handles.append(nvml.nvmlDeviceGetHandleByIndex(int(part)))
        elif part.startswith(("GPU-", "MIG-")):
            handles.append(nvml.nvmlDeviceGetHandleByUUID(part))
    return handles


def _open() -> tuple[ModuleType, list[Any]] | str:
    """NVML and the handles of the GPUs to sample, or why there are none."""
    try:
        import pynvml
    except ImportError:
        return "no NVML binding installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as exc:
        return f"no NVIDIA driver or GPU ({exc})"
    try:
        handles = _handles(pynvml, count)
    except pynvml.NVMLError as exc:
        handles, why = [], f" ({exc})"
    else:
        why = ""
    if not handles:
        pynvml.nvmlShutdown()
        return f"no GPU visible to NVML (CUDA_VISIBLE_DEVICES, {count} GPUs){why}"
    return pynvml, handles


@dataclass
class GpuSampler:
    """Samples the GPUs from `start` to `stop`; `stop` returns what they burned."""

    interval_s: float = INTERVAL_S
    _nvml: ModuleType | None = None
    _handles: list[Any] = field(default_factory=list)
    _reason: str = ""
    _power_w: list[tuple[float, float]] = field(default_factory=list)  # (time, watts)
    _memory_mib: list[float] = field(default_factory=list)
    _utilization: list[float] = field(default_factory=list)
    _energy_start_mj: float | None = None
    _started: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        opened = _open()
        if isinstance(opened, str):
            self._reason = opened
            return
        self._nvml, self._handles = opened
        self._energy_start_mj = self._energy_mj()
        self._started = time.perf_counter()
        self._thread = threading.Thread(target=self._sample_until_stopped, daemon=True)
        self._thread.start()

    def _energy_mj(self) -> float | None:
        assert self._nvml is not None
        try:
            return float(
                sum(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h) for h in self._handles)
            )
        except self._nvml.NVMLError:  # a GPU without the counter (before Volta)
            return None

    def _sample(self) -> None:
        nvml = self._nvml
        assert nvml is not None
        now = time.perf_counter()
        try:
            watts = sum(nvml.nvmlDeviceGetPowerUsage(h) for h in self._handles) / 1000
            self._power_w.append((now, watts))
            used = sum(nvml.nvmlDeviceGetMemoryInfo(h).used for h in self._handles)
            self._memory_mib.append(used / 2**20)
            busy = [nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self._handles]
            self._utilization.append(sum(busy) / len(busy))
        except nvml.NVMLError:
            pass  # one lost sample; the mean is of those taken

    def _sample_until_stopped(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)

    def stop(self) -> GpuUsage:
        if self._nvml is None or self._thread is None:
            return GpuUsage(available=False, reason=self._reason or "not started")
        self._stop.set()
        self._thread.join()
        self._sample()
        elapsed = time.perf_counter() - self._started
        end_mj = self._energy_mj()
        names = [_text(self._nvml.nvmlDeviceGetName(h)) for h in self._handles]
        self._nvml.nvmlShutdown()
        if self._energy_start_mj is not None and end_mj is not None:
            energy_j: float | None = (end_mj - self._energy_start_mj) / 1000
            source = "energy counter"
        else:
            energy_j = _integrate(self._power_w)
            source = "power samples"
        power = [w for _, w in self._power_w]
        mean_power = energy_j / elapsed if energy_j is not None and elapsed > 0 else None
        return GpuUsage(
            available=True,
            devices=names,
            samples=len(power),
            mean_power_w=_round(mean_power),
            energy_j=_round(energy_j),
            energy_source=source,
            max_memory_used_mib=_round(max(self._memory_mib)) if self._memory_mib else None,
            mean_utilization_pct=_round(sum(self._utilization) / len(self._utilization))
            if self._utilization
            else None,
        )


def _integrate(samples: list[tuple[float, float]]) -> float | None:
    """Joules from (time, watts) samples, by the trapezoid rule."""
    if len(samples) < 2:
        return None
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in itertools.pairwise(samples))


def _text(name: str | bytes) -> str:
    return name.decode() if isinstance(name, bytes) else name  # bytes from older bindings


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
