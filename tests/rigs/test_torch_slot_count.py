"""The torch rig's continuous engine sized by 'auto': from free GPU memory on CUDA, 32 slots on
a CPU (which reports none), and a KV cache of exactly that many slots' bytes."""

from rigs.serving.slot_count import AUTO, AUTO_SLOTS_NO_STATS
from rigs.sources import ModelSource
from rigs.torch.continuous import ContinuousEngine
from rigs.torch.slots import SlotBuffers


def test_auto_slots_on_a_cpu_fill_the_cache_with_32_slots(tiny: ModelSource) -> None:
    engine = ContinuousEngine(
        tiny, device="cpu", slots=AUTO, compile="off", admit_gap_s=0, admit_wait_s=0
    )
    assert engine.slots == AUTO_SLOTS_NO_STATS
    assert engine.widths[-1] == AUTO_SLOTS_NO_STATS
    assert engine.provenance()["max_batch"] == str(AUTO_SLOTS_NO_STATS)
    per_slot = SlotBuffers.bytes_per_slot(
        engine.model.get_decoder(), engine.max_model_len, engine.model.dtype
    )
    assert engine.slot_model.buffers.nbytes() == AUTO_SLOTS_NO_STATS * per_slot
