"""Token-id prompts stay inside the vocabulary a rig advertises (random:tiny has 2,048 ids)."""

import numpy as np

from harness.prompts import TOKEN_ID_RANGE, token_id_prompts


def test_prompts_fit_a_small_advertised_vocabulary() -> None:
    ids = np.array(token_id_prompts(64, 32, seed=3, vocab_size=2048))
    assert ids.shape == (64, 32)
    assert ids.min() >= 512
    assert ids.max() < 2048


def test_prompts_keep_the_default_range_without_a_smaller_vocabulary() -> None:
    for vocab in (None, 262_144):
        ids = np.array(token_id_prompts(16, 8, seed=1, vocab_size=vocab))
        assert ids.min() >= TOKEN_ID_RANGE[0]
        assert ids.max() < TOKEN_ID_RANGE[1]
    assert token_id_prompts(4, 8, seed=1) == token_id_prompts(4, 8, seed=1, vocab_size=None)
