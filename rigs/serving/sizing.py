"""How the continuous-batching rigs (JAX, torch) size their decode programs, alike.

Slots: for a setting of 'auto', as many as half the device's free memory holds in KV cache
after the weights are loaded (the other half for the programs' temporaries: a prefill batch's
activations), at most AUTO_SLOTS_CAP, so neither rig queues at a concurrency the other serves.
Widths and context buckets: ladders of sizes, one compiled program each."""

AUTO = 0  # a slots setting given as 'auto'
AUTO_SLOTS_CAP = 64  # one compiled decode program per power of two up to it
AUTO_SLOTS_NO_STATS = 32  # a CPU reports no memory


def slots_arg(value: str) -> int:
    """A slots option, already checked against rig.toml's declaration: 'auto' as AUTO, else
    the number."""
    return AUTO if value == "auto" else int(value)


def auto_slots(free_bytes: int | None, bytes_per_slot: int) -> int:
    """Slots whose KV cache fits in half of `free_bytes`, from 1 to AUTO_SLOTS_CAP;
    AUTO_SLOTS_NO_STATS where the device reports no free memory (None)."""
    if free_bytes is None:
        return AUTO_SLOTS_NO_STATS
    return max(1, min(AUTO_SLOTS_CAP, free_bytes // 2 // bytes_per_slot))


def ladder(top: int, start: int, factor: int) -> tuple[int, ...]:
    """start, start * factor, ... below `top`, then `top` itself."""
    out = []
    size = start
    while size < top:
        out.append(size)
        size *= factor
    return (*out, top)
