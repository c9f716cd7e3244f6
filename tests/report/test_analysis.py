import pytest

from harness.schemas import cell_label
from rigbench.report.analysis import chosen_cell, metric_series, usd_per_million_tokens
from rigbench.report.data import BootData, SweepData


def _cell(concurrency: int, tok_s: float, ok: int = 4) -> dict[str, object]:
    return {"concurrency": concurrency, "requests_ok": ok, "output_tok_s": tok_s}


def _sweep(*boots: BootData) -> SweepData:
    return SweepData(sweep_id="s", rigs=sorted({b.rig for b in boots}), boots=list(boots))


def test_cost_per_million_tokens_prices_the_instance_time() -> None:
    # $0.30/h at 100 tok/s: 360,000 tokens an hour, so a million cost $0.8333.
    assert usd_per_million_tokens(0.30, 100.0) == pytest.approx(0.30 / 0.36)
    assert usd_per_million_tokens(0.30, 0.0) is None


def test_series_orders_cells_by_load_and_skips_cells_without_requests() -> None:
    data = _sweep(
        BootData(rig="a", boot=1, report={"cells": [_cell(8, 80.0), _cell(1, 10.0)]}),
        BootData(rig="a", boot=2, report={"cells": [_cell(8, 90.0), _cell(1, 0.0, ok=0)]}),
    )
    (points,) = metric_series(data, "output_tok_s").values()
    assert [(p.cell, p.boots) for p in points] == [
        ("c=1", [(1, 10.0)]),
        ("c=8", [(1, 80.0), (2, 90.0)]),
    ]
    assert points[1].aggregate.value == pytest.approx((80.0 * 90.0) ** 0.5)  # geometric mean
    assert points[1].aggregate.interval_words == "range of 2 boots"


def test_chosen_cell_is_the_highest_load_every_rig_measured() -> None:
    data = _sweep(
        BootData(rig="a", boot=1, report={"cells": [_cell(1, 1.0), _cell(4, 1.0)]}),
        BootData(rig="b", boot=1, report={"cells": [_cell(1, 1.0), _cell(4, 1.0, ok=0)]}),
    )
    assert chosen_cell(data) == "c=1"
    assert chosen_cell(data, "c=4") == "c=4"
    with pytest.raises(ValueError, match=r"no cell 'c=9' in this sweep \(cells: c=1, c=4\)"):
        chosen_cell(data, "c=9")
    assert cell_label(_cell(4, 1.0)) == "c=4"


def test_log_axes_are_labelled_at_decades_or_one_two_five() -> None:
    from rigbench.report.figures import log_ticks

    assert log_ticks([3.0, 4_500.0]) == [1.0, 10.0, 100.0, 1000.0, 10000.0]
    assert log_ticks([12.0, 90.0]) == [10.0, 20.0, 50.0, 100.0, 200.0, 500.0]
    assert log_ticks([0.0, -1.0]) == []
