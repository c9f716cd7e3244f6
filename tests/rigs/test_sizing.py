"""'auto' slots, shared by the JAX and torch rigs: half the free device memory's worth of KV
cache, from 1 to 64, 32 where the device reports no memory."""

from rigs.serving.sizing import auto_slots, slots_arg


def test_auto_slots_fill_half_the_free_memory_up_to_64() -> None:
    per_slot = 31_457_280  # e2b at max_model_len 4096 in bfloat16
    assert auto_slots(116 << 30, per_slot) == 64  # H200 after the weights
    assert auto_slots(1 << 30, per_slot) == 17  # a T4G with 1 GiB left
    assert auto_slots(10 << 20, per_slot) == 1
    assert auto_slots(None, per_slot) == 32  # a CPU reports no memory
    assert slots_arg("auto") == 0
    assert slots_arg("48") == 48
