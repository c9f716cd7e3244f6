"""Where a slot-cache decode step spends its time, by cache length (eager + CUDA graphs).

    python benchmarks/torch_slots_gpu_profile.py OUT [--model random:e2b] [--slots 64]

For each cache length L: one CUDA graph of the eager decode step per width, replayed 50
times (ms per step), then torch.profiler's kernel table for the eager step at width 1.
Writes OUT/profile.json and OUT/kernels_L{L}.txt.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from rigs.sources import resolve_model
from rigs.torch.slots import ATTENTION, SlotModel


def step_ms(slot_model: SlotModel, width: int, device: torch.device) -> float:
    ids = torch.zeros((width, 1), dtype=torch.long, device=device)
    positions = torch.full((width,), 600, dtype=torch.long, device=device)
    k_pos = torch.arange(slot_model.max_len, device=device)  # the whole cache
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            slot_model.decode(ids, positions, k_pos)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        slot_model.decode(ids, positions, k_pos)
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(50):
        graph.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / 50 * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--model", default="random:e2b")
    parser.add_argument("--slots", type=int, default=64)
    parser.add_argument("--lengths", default="1024,4096")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    source = resolve_model(args.model)
    model: Any = AutoModelForCausalLM.from_pretrained(
        source.path, dtype=torch.bfloat16, attn_implementation=ATTENTION
    )
    model = model.to(device).eval()
    result: dict[str, Any] = {"slots": args.slots, "step_ms": {}}
    with torch.inference_mode():
        for length in (int(n) for n in args.lengths.split(",")):
            slot_model = SlotModel(model, args.slots, length)
            result["step_ms"][length] = {w: step_ms(slot_model, w, device) for w in (1, 32)}
            print(length, result["step_ms"][length], flush=True)
            ids = torch.zeros((1, 1), dtype=torch.long, device=device)
            positions = torch.full((1,), 600, dtype=torch.long, device=device)
            k_pos = torch.arange(length, device=device)
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    slot_model.decode(ids, positions, k_pos)
                torch.cuda.synchronize()
            table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25)
            (args.out / f"kernels_L{length}.txt").write_text(table)
            del slot_model
            torch.cuda.empty_cache()
    (args.out / "profile.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
