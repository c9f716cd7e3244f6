"""Prompts with known behaviour on random:tiny (seed 0)."""

import numpy as np


def eos_prompt() -> list[int]:
    """128 ids after which random:tiny's greedy output hits its real EOS (id 1) at step 20.

    Row 8 of the harness's token-id prompts with seed 0, where this was first seen."""
    return [int(i) for i in np.random.default_rng(0).integers(1_000, 30_000, size=(20, 128))[8]]
