"""The alpha spending of sequential boots: each design spends exactly alpha by the cap, the
Pocock-type early, the O'Brien-Fleming-type late and Hwang-Shih-DeCani (the adaptive boots')
between them."""

import math

import pytest

from analysis.sequential import Spending, look_levels, spent
from analysis.stats import ALPHA

LOOKS = list(range(2, 11))


@pytest.mark.parametrize("kind", list(Spending))
def test_the_levels_spend_alpha_by_the_cap_and_none_is_negative(kind: Spending) -> None:
    levels = look_levels(kind, LOOKS)
    assert len(levels) == len(LOOKS)
    assert math.fsum(levels) == pytest.approx(ALPHA, abs=1e-12)
    assert all(level > 0 for level in levels)
    assert spent(kind, 1.0) == pytest.approx(ALPHA, abs=1e-12)


def test_pocock_spends_early_and_obrien_fleming_late() -> None:
    pocock = look_levels(Spending.POCOCK, LOOKS)
    obf = look_levels(Spending.OBRIEN_FLEMING, LOOKS)
    assert pocock[0] > 100 * obf[0]  # at 2 of 10 boots
    assert obf[-1] > pocock[-1]
    assert math.fsum(obf[len(obf) // 2 :]) > 0.8 * ALPHA  # most of it kept for the later looks


def test_hwang_shih_decani_spends_between_the_two() -> None:
    pocock, obf, hsd = (look_levels(kind, LOOKS) for kind in Spending)
    assert obf[0] < hsd[0] < pocock[0]
    assert pocock[-1] < hsd[-1] < obf[-1]


def test_bad_looks_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="increasing boot counts"):
        look_levels(Spending.POCOCK, [5, 3])
    with pytest.raises(ValueError, match=r"information fraction must be in \(0, 1\]"):
        spent(Spending.POCOCK, 0.0)
