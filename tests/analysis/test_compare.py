import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from analysis.boot_values import bursts_from_reports, values_from_reports
from analysis.compare import Comparison, compare, ratio_words, rig_setup, setup_warnings
from analysis.metrics import Direction, default_metrics
from analysis.stats import Verdict, verdict
from harness.schemas import cell_label
from rigbench.commands.compare_reports import app
from rigbench.report.terminal import render_text


def _latency(p50: float) -> dict[str, float]:
    return {"mean": p50 * 1.1, "p50": p50, "p90": p50 * 1.5, "p99": p50 * 2.0}


def _cell(ttft: float, itl: float, tok_s: float, **load: float) -> dict[str, Any]:
    tpot = itl * 1.01
    return {
        **load,
        "requests_ok": 32,
        "requests_failed": 0,
        "output_tokens": 2048,
        "duration_s": 2048 / tok_s,
        "output_tok_s": tok_s,
        "ttft_ms": _latency(ttft),
        "itl_ms": _latency(itl),
        "tpot_ms": _latency(tpot),
        "e2e_ms": _latency(ttft + 63 * tpot),
    }


def _report(*cells: dict[str, Any]) -> dict[str, Any]:
    return {
        "harness_version": "0.1.0",
        "url": "http://127.0.0.1:8000",
        "model": "random:tiny",
        "started_at": "2026-12-02T11:00:00Z",
        "cells": list(cells),
    }


# Three boots each of two rigs at c=1 and c=4. At c=1 torch's TTFT (about 50 ms) is 21% below
# jax's (about 61 ms) with a spread under 1%, while their tok/s cross: jax ahead in boots 0 and
# 2, torch in 1.
REPORTS = {
    "torch": [
        _report(_cell(50.1, 68.0, 14.5, concurrency=1), _cell(92.0, 71.0, 50.0, concurrency=4)),
        _report(_cell(50.4, 69.1, 15.1, concurrency=1), _cell(95.0, 70.0, 52.0, concurrency=4)),
        _report(_cell(49.8, 67.5, 14.9, concurrency=1), _cell(90.0, 72.0, 51.0, concurrency=4)),
    ],
    "jax": [
        _report(_cell(61.0, 66.0, 15.0, concurrency=1), _cell(80.0, 60.0, 60.0, concurrency=4)),
        _report(_cell(60.2, 70.2, 14.2, concurrency=1), _cell(82.0, 61.0, 61.0, concurrency=4)),
        _report(_cell(60.7, 65.0, 15.3, concurrency=1), _cell(81.0, 62.0, 62.0, concurrency=4)),
    ],
}


def _by_key(comparison: Comparison, cell: str, metric: str) -> Any:
    cells = {c.cell: c for c in comparison.cells}
    return {m.metric.key: m for m in cells[cell].metrics}[metric]


def test_values_from_reports_reads_the_contract() -> None:
    values = values_from_reports(REPORTS)
    assert list(values) == ["torch", "jax"]
    assert list(values["torch"]) == ["c=1", "c=4"]
    assert set(values["torch"]["c=1"]) == set(default_metrics())
    assert values["torch"]["c=1"]["ttft_ms.p50"] == [50.1, 50.4, 49.8]
    assert values["jax"]["c=4"]["output_tok_s"] == [60.0, 61.0, 62.0]
    assert values["jax"]["c=1"]["tpot_ms.p50"] == pytest.approx([66.66, 70.902, 65.65])


def test_values_from_reports_marks_missing_and_empty_cells() -> None:
    failed = _cell(1.0, 1.0, 1.0, rate=2.5)
    failed["requests_ok"] = 0
    reports = {
        "torch": [
            _report(_cell(50.0, 68.0, 14.5, rate=2.5)),
            _report(failed, _cell(40.0, 60.0, 20.0, rate=5.0)),
            _report(_cell(51.0, 69.0, 14.0, rate=2.5)),
        ]
    }
    values = values_from_reports(reports, metrics=["ttft_ms.p50"])
    assert values["torch"]["rate=2.5/s"]["ttft_ms.p50"] == [50.0, None, 51.0]
    assert values["torch"]["rate=5.0/s"]["ttft_ms.p50"] == [None, 40.0, None]


def test_values_from_reports_null_metric_is_missing() -> None:
    cell = _cell(50.0, 68.0, 14.5, concurrency=1)
    cell["ttft_ms"]["p50"] = None
    values = values_from_reports({"r": [_report(cell)]}, metrics=["ttft_ms.p50"])
    assert values["r"]["c=1"]["ttft_ms.p50"] == [None]


@pytest.mark.parametrize(
    ("reports", "message"),
    [
        ({"r": [{"model": "x"}]}, "rig 'r' boot 0: report has no 'cells'"),
        ({"r": [_report({"requests_ok": 1})]}, "neither 'concurrency' nor 'rate'"),
        ({"r": [_report({"concurrency": 1, "requests_ok": 1})]}, "has no 'ttft_ms.p50'"),
        (
            {"r": [_report({"concurrency": 1, "ttft_ms": {"p50": "fast"}})]},
            "'ttft_ms.p50' is not a number",
        ),
    ],
)
def test_values_from_reports_rejects_malformed(
    reports: dict[str, list[dict[str, Any]]], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        values_from_reports(reports, metrics=["ttft_ms.p50"])


def test_values_from_reports_rejects_unknown_metric() -> None:
    with pytest.raises(ValueError, match=re.escape("unknown metric 'ttft_ms.p95'")):
        values_from_reports(REPORTS, metrics=["ttft_ms.p95"])


def test_cell_label() -> None:
    assert cell_label({"concurrency": 16, "rate": None}) == "c=16"
    assert cell_label({"concurrency": None, "rate": 2.5}) == "rate=2.5/s"


# The worked example's family: the medians (the default adds the tails, 22 verdicts here).
MEDIANS = ("ttft_ms.p50", "itl_ms.p50", "tpot_ms.p50", "e2e_ms.p50", "output_tok_s")


def test_default_comparison_holds_the_tails_in_the_table_s_order() -> None:
    comparison = compare(values_from_reports(REPORTS), baseline="torch")
    assert [m.metric.key for m in comparison.cells[0].metrics] == list(default_metrics())
    assert {"ttft_ms.p90", "ttft_ms.p99", "tpot_ms.p99", "e2e_ms.p99"} <= set(default_metrics())
    assert comparison.family == 2 * len(default_metrics())


def test_compare_worked_example() -> None:
    comparison = compare(values_from_reports(REPORTS, MEDIANS), metrics=MEDIANS, baseline="torch")
    assert comparison.baseline == "torch"
    assert comparison.rigs == ["torch", "jax"]
    assert [c.cell for c in comparison.cells] == ["c=1", "c=4"]
    # metrics appear in the order asked for
    assert [m.metric.key for m in comparison.cells[0].metrics] == list(MEDIANS)

    ttft = _by_key(comparison, "c=1", "ttft_ms.p50")
    torch, jax = ttft.results
    assert torch.verdict is None  # the baseline is not judged against itself
    assert torch.aggregate.value == pytest.approx((50.1 * 50.4 * 49.8) ** (1 / 3))
    assert torch.aggregate.ci_low < 49.8 < 50.4 < torch.aggregate.ci_high
    assert jax.aggregate.value == pytest.approx((61.0 * 60.2 * 60.7) ** (1 / 3))
    assert jax.aggregate.interval_words == "95% interval, 3 boots"
    assert jax.boots == [61.0, 60.2, 60.7]
    assert jax.verdict is Verdict.SLOWER
    assert jax.p_holm is not None
    assert jax.p_holm < 0.05
    assert jax.change_vs_baseline == pytest.approx(jax.aggregate.value / torch.aggregate.value - 1)
    assert not ttft.flips.flipped

    tok_s = _by_key(comparison, "c=1", "output_tok_s")
    assert tok_s.metric.direction is Direction.HIGHER_IS_BETTER
    assert tok_s.results[1].verdict is Verdict.INDISTINGUISHABLE
    assert tok_s.results[1].words.endswith("(within noise; 3 boots could tell 1.23x)")
    assert tok_s.flips.flipped
    assert tok_s.flips.boots == [0, 1, 2]

    # At c=4 jax is ahead on every metric in every boot.
    for key in MEDIANS:
        metric = _by_key(comparison, "c=4", key)
        assert metric.results[1].verdict is Verdict.FASTER, key
        assert not metric.flips.flipped, key
    assert comparison.any_flip
    # Holm over every test of the comparison: 2 cells x 5 metrics x 1 rig pair.
    assert comparison.family == 10
    assert comparison.summary == [
        "torch vs jax: torch better in 1, jax better in 5, no difference shown in 4 of 10 "
        "comparisons"
    ]


def test_compare_default_baseline_is_first_rig_and_metrics_follow_input() -> None:
    values = {
        "b": {"c=1": {"output_tok_s": [10.0, 11.0], "ttft_ms.p99": [5.0, 6.0]}},
        "a": {"c=1": {"output_tok_s": [20.0, 21.0], "ttft_ms.p99": [5.5, 5.6]}},
    }
    comparison = compare(values)
    assert comparison.baseline == "b"
    metrics = comparison.cells[0].metrics
    assert [m.metric.key for m in metrics] == ["ttft_ms.p99", "output_tok_s"]
    assert metrics[1].results[1].verdict is Verdict.FASTER
    assert metrics[0].results[1].verdict is Verdict.INDISTINGUISHABLE


def test_compare_rig_without_data() -> None:
    values: dict[str, dict[str, dict[str, list[float | None]]]] = {
        "a": {"c=1": {"ttft_ms.p50": [5.0, 6.0]}},
        "b": {"c=1": {"ttft_ms.p50": [None, None]}},
        "c": {"c=2": {"ttft_ms.p50": [7.0, 7.5]}},
    }
    comparison = compare(values)
    c1 = _by_key(comparison, "c=1", "ttft_ms.p50")
    assert [r.aggregate is None for r in c1.results] == [False, True, True]
    assert [r.verdict for r in c1.results] == [None, None, None]
    assert c1.flips is None  # only one rig has data
    c2 = _by_key(comparison, "c=2", "ttft_ms.p50")
    assert c2.results[2].aggregate is not None
    assert c2.results[2].verdict is None  # the baseline has no data at c=2
    text = render_text(comparison)
    assert "no data" in text


@pytest.mark.parametrize(
    ("kwargs", "values", "message"),
    [
        ({}, {}, "no rigs"),
        ({"baseline": "vllm"}, {"torch": {}}, "baseline rig 'vllm' is not among the rigs: torch"),
        ({}, {"torch": {"c=1": {"ttfb": [1.0]}}}, "rig 'torch' cell 'c=1': unknown metric"),
        ({"metrics": ["speed"]}, {"torch": {}}, "unknown metric 'speed'"),
        (
            {},
            {"torch": {"c=1": {"ttft_ms.p50": [1.0, float("nan")]}}},
            "rig 'torch' cell 'c=1' metric 'ttft_ms.p50': aggregate_boots: value nan at index 1",
        ),
    ],
)
def test_compare_rejects_bad_input(kwargs: dict[str, Any], values: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        compare(values, **kwargs)


def test_comparison_round_trips_through_json() -> None:
    comparison = compare(values_from_reports(REPORTS))
    assert Comparison.model_validate_json(comparison.model_dump_json()) == comparison


def test_render_text_shows_centres_intervals_verdicts_and_flips() -> None:
    comparison = compare(values_from_reports(REPORTS, MEDIANS), metrics=MEDIANS, baseline="torch")
    text = render_text(comparison, width=240)
    lines = text.splitlines()
    assert "rigbench comparison (baseline torch)" in lines[0]
    ttft_row = next(i for i, line in enumerate(lines) if "c=1" in line and "TTFT p50" in line)
    assert "50.10 [49.36, 50.85]" in lines[ttft_row]
    assert "60.63 [59.64, 61.65]" in lines[ttft_row]
    assert lines[ttft_row + 1].count("95% interval, 3 boots") == 2
    assert "baseline" in lines[ttft_row + 2]
    assert "21% higher TTFT p50 (worse)" in lines[ttft_row + 2]
    assert "torch > jax" in lines[ttft_row]  # the ranking column, best first
    tok_row = next(i for i, line in enumerate(lines) if "c=1" in line and "output (tok/s)" in line)
    assert "torch ≈ jax" in lines[tok_row]
    assert "order flipped between boots: jax/torch (boots 1,2,3)" in text
    assert "within noise; 3 boots could tell" in lines[tok_row + 2]
    flat = " ".join(text.split())
    assert "the geometric mean of its boots [and an interval, named under it" in flat
    assert "Welch's t-test on log boot values, Holm-corrected across the comparison's 10" in flat
    assert "sweep: torch vs jax: torch better in 1, jax better in 5" in flat


def test_two_boots_print_their_range_and_say_so() -> None:
    values = {"a": {"c=1": {"ttft_ms.p50": [5.0, 6.0]}}, "b": {"c=1": {"ttft_ms.p50": [9.0, 9.5]}}}
    text = render_text(compare(values))
    assert "5.48 [5.00, 6.00]" in text
    assert text.count("range of 2 boots") == 3  # each rig, and the caption
    assert "bootstrap" not in text


def test_one_boot_says_no_verdict_possible_and_never_ranks() -> None:
    values = {"a": {"c=1": {"ttft_ms.p50": [5.0, 6.0, 5.5]}}, "b": {"c=1": {"ttft_ms.p50": [31.0]}}}
    comparison = compare(values)
    text = render_text(comparison)
    assert "1 boot, no interval" in text
    assert "5.7x higher TTFT p50 (1 boot: no verdict possible)" in text
    metric = comparison.cells[0].metrics[0]
    assert metric.results[1].verdict is Verdict.NO_VERDICT
    assert metric.ranking == "no ranking: b has 1 boot"
    assert "indistinguishable" not in comparison.model_dump_json()
    assert "≈" not in metric.ranking
    assert ">" not in metric.ranking
    assert comparison.summary == ["a vs b: no verdict possible in any of 1 comparisons"]


def test_setups_are_shown_and_unlike_ones_warned() -> None:
    torch = rig_setup({"batching": "serial", "max_batch": "1", "dtype": "float32"})
    jax = rig_setup({"batching": "continuous, 4 slots", "dtype": "float32"})
    assert (jax.batching, jax.slots, jax.dtype) == ("continuous", "4", "float32")
    warnings = setup_warnings({"torch": torch, "jax": jax})
    assert [w.split(" (")[0] for w in warnings] == [
        "not like for like: the rigs differ in batching",
        "not like for like: the rigs differ in slots",
    ]
    assert setup_warnings({"jax": jax, "jax@b": jax}) == []
    comparison = compare(
        values_from_reports(REPORTS), setups={"torch": torch, "jax": jax}, emulated="ran here"
    )
    text = render_text(comparison, width=240)
    assert "serial batching, 1 slots, float32" in text
    assert "continuous batching, 4 slots, float32" in text
    assert "not like for like: the rigs differ in batching (torch: serial, jax: continuous)" in (
        " ".join(text.split())
    )
    assert "ran here" in text


boot_lists = st.lists(
    st.floats(min_value=1.0, max_value=1000.0, allow_nan=False), min_size=1, max_size=6
)


@settings(max_examples=40, deadline=None)
@given(boot_lists, boot_lists, st.sampled_from(default_metrics()))
def test_compare_agrees_with_verdict_and_is_antisymmetric(
    a: list[float], b: list[float], metric: str
) -> None:
    values = {"a": {"c=1": {metric: a}}, "b": {"c=1": {metric: b}}}
    ab = _by_key(compare(values, baseline="b"), "c=1", metric)
    ba = _by_key(compare(values, baseline="a"), "c=1", metric)
    direct = verdict(a, b, ab.metric.direction)  # one test: Holm leaves its p-value alone
    assert ab.results[0].verdict is direct
    opposite = {Verdict.FASTER: Verdict.SLOWER, Verdict.SLOWER: Verdict.FASTER}
    assert ba.results[1].verdict is opposite.get(direct, direct)


def _write_reports(tmp_path: Path) -> list[str]:
    args = []
    for rig, boots in REPORTS.items():
        for i, report in enumerate(boots):
            path = tmp_path / f"{rig}-{i}.json"
            path.write_text(json.dumps(report))
            args.append(f"{rig}={path}")
    return args


def test_cli_prints_table_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "comparison.json"
    result = CliRunner().invoke(
        app, [*_write_reports(tmp_path), "--baseline", "jax", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "rigbench comparison (baseline jax)" in result.output
    saved = Comparison.model_validate_json(out.read_text())
    assert saved.baseline == "jax"
    ttft = _by_key(saved, "c=1", "ttft_ms.p50")
    assert ttft.results[0].verdict is Verdict.FASTER  # torch against jax


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["torch"], "expected RIG=REPORT.json"),
        (["torch=/nonexistent/report.json"], "cannot read report"),
    ],
)
def test_cli_rejects_bad_arguments(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output


def test_cli_rejects_unknown_baseline(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [*_write_reports(tmp_path), "--baseline", "vllm"])
    assert result.exit_code == 2
    assert "baseline rig 'vllm' is not among the rigs" in result.output


@pytest.mark.parametrize(
    ("ratio", "words"),
    [
        (2.345, "2.3x higher throughput"),
        (88.916, "89x higher throughput"),
        (1.41, "41% higher throughput"),
        (0.59, "41% lower throughput"),
        (0.144, "6.9x lower throughput"),
        (0.5, "2.0x lower throughput"),
        (0.0, "no throughput"),
        (1.0, "same throughput"),
    ],
)
def test_ratio_words(ratio: float, words: str) -> None:
    assert ratio_words(ratio, "throughput") == words


def test_ratio_words_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="ratio must be a finite number >= 0"):
        ratio_words(float("nan"), "TTFT")


def _demo_reports(
    *, declared: bool, share_c1: float, jax_itl_c1: float = 0.040
) -> dict[str, list[dict[str, Any]]]:
    """The demo's shape (rigbench demo: torch and jax, 3 boots, its concurrency cells) with the
    fresh-clone figures of 2026-12-07 at c=1: jax ITL p50 0.040 ms, TPOT p50 0.364 ms (jax
    writes 8 tokens per call), torch ITL p50 2.16 ms (streamed), a 54x "difference"."""
    from rigbench.commands.local_sweep import DEMO_CELLS

    def jax_cell(c: int, boot: int) -> dict[str, Any]:
        cell = _cell(1.0 + boot / 10, 0.364 + boot / 1000, 2600.0, concurrency=c)
        share = share_c1 if c == 1 else 0.875
        cell["itl_ms"] = _latency((jax_itl_c1 if c == 1 else 0.02) + boot / 1000)
        cell.update(burst_share=share, delivery="burst" if share > 0.5 else "streamed")
        return cell

    def torch_cell(c: int, boot: int) -> dict[str, Any]:
        cell = _cell(1.5 + boot / 10, 2.16 + boot / 100, 460.0, concurrency=c)
        cell.update(burst_share=0.0, delivery="streamed")
        return cell

    cells = DEMO_CELLS["concurrency"]
    jax = [
        {**_report(*(jax_cell(c, b) for c in cells)), "token_delivery": "burst"}
        if declared
        else _report(*(jax_cell(c, b) for c in cells))
        for b in range(3)
    ]
    torch = [_report(*(torch_cell(c, b) for c in cells)) for b in range(3)]
    return {"torch": torch, "jax": jax}


def _compared(reports: dict[str, list[dict[str, Any]]]) -> Comparison:
    return compare(
        values_from_reports(reports), baseline="torch", bursts=bursts_from_reports(reports)
    )


@pytest.mark.parametrize(
    ("declared", "share_c1", "words"),
    [
        # The fresh-clone demo: declared, and 7 of 8 intervals together.
        (True, 0.875, "jax declares burst delivery and delivered 88% of token intervals"),
        # Declared only: at c=1 the client read each write's tokens apart.
        (True, 0.2, "no ITL verdict: jax declares burst delivery: its ITL times groups"),
        # Shown only: a server that says nothing of how it writes.
        (False, 0.875, "jax delivered 88% of token intervals under 0.2 ms (boots 1, 2, 3)"),
    ],
)
def test_the_demo_gives_no_itl_verdict_where_a_rig_declares_or_shows_bursts(
    declared: bool, share_c1: float, words: str
) -> None:
    comparison = _compared(_demo_reports(declared=declared, share_c1=share_c1))
    c1 = next(c for c in comparison.cells if c.cell == "c=1")
    assert c1.burst_rigs == ["jax"]
    itl = _by_key(comparison, "c=1", "itl_ms.p50")
    assert words in itl.withheld
    assert [r.verdict for r in itl.results] == [None, None]
    assert itl.ranking == ""
    tpot = _by_key(comparison, "c=1", "tpot_ms.p50")
    assert tpot.results[1].verdict is Verdict.FASTER  # TPOT still compares them
    text = render_text(comparison, width=300)
    assert "x lower ITL" not in text
    assert "x higher ITL" not in text
    assert "no ITL verdict" in text


def test_an_itl_verdict_is_withheld_whichever_rig_is_ahead() -> None:
    # jax's ITL above torch's this time (as a rig whose groups are long apart shows): still none
    reports = _demo_reports(declared=False, share_c1=0.875, jax_itl_c1=9.0)
    itl = _by_key(_compared(reports), "c=1", "itl_ms.p50")
    assert itl.withheld
    assert [r.verdict for r in itl.results] == [None, None]


def test_rigs_that_stream_get_itl_verdicts_and_a_declaration_in_the_setup_counts() -> None:
    reports = _demo_reports(declared=False, share_c1=0.2)
    comparison = _compared(reports)
    itl = _by_key(comparison, "c=1", "itl_ms.p50")
    assert not itl.withheld  # neither declared nor shown: the ITL verdict stands
    assert itl.results[1].verdict is Verdict.FASTER
    assert _by_key(comparison, "c=4", "itl_ms.p50").withheld  # c=4 showed bursts
    # A report written before the harness recorded the declaration: the boots' provenance
    # (the rig's /provenance, stored with its rows) says it.
    declared = compare(
        values_from_reports(reports),
        baseline="torch",
        bursts=bursts_from_reports(reports),
        setups={"jax": rig_setup({"token_delivery": "burst"})},
    )
    assert "jax declares burst delivery" in _by_key(declared, "c=1", "itl_ms.p50").withheld


def test_a_detectable_ratio_beyond_100x_is_said_plainly() -> None:
    # 2 boots against 3 with a wide spread: Welch's test has about 1 degree of freedom.
    values = {
        "a": {"c=1": {"ttft_ms.p50": [32.5, 63.9, 45.0]}},
        "b": {"c=1": {"ttft_ms.p50": [1000.0, 4000.0]}},
        "c": {"c=1": {"ttft_ms.p50": [40.0, 50.0, 45.0]}},
    }
    words = compare(values).cells[0].metrics[0].results[1].words
    assert words.endswith("(within noise; 2 and 3 boots could not tell even 100x)"), words


def test_an_undetectable_ratio_round_trips_through_json() -> None:
    # 40 cells: Holm's smallest level 0.05/40 on about one degree of freedom (b's boots 1000x
    # apart, a's nearly equal), where the t quantile is in the hundreds
    boots = {"a": [1.0, 1.001], "b": [1.0, 1000.0]}
    values = {
        rig: {f"c={c}": {"ttft_ms.p99": series} for c in range(1, 41)}
        for rig, series in boots.items()
    }
    comparison = compare(values, baseline="a", metrics=["ttft_ms.p99"])
    found = comparison.cells[0].metrics[0].results[1]
    assert found.detectable_ratio == math.inf
    assert "could not tell even 100x" in found.words
    assert Comparison.model_validate_json(comparison.model_dump_json()) == comparison


def _with_capacity(report: dict[str, Any], value: float, goodput: float) -> dict[str, Any]:
    """A report whose cells met an SLO at `goodput` req/s, with a capacity search of two
    probes (the second at the value) kept as cells."""
    cells = [{**c, "goodput_req_s": goodput, "slo_met": 30} for c in report["cells"]]
    probes = [
        {**_cell(40.0, 60.0, 10.0, concurrency=1), "capacity_probe": True, "goodput_req_s": 1.0},
        {**_cell(90.0, 60.0, 30.0, concurrency=value), "capacity_probe": True},
    ]
    capacity = {
        "by": "concurrency", "value": value, "max": 16, "stopped": "bracketed",
        "slo": {"ttft_ms": 100.0, "percentile": 90.0},
        "probes": [{"load": 1, "meets_slo": True, "slo_attainment": 1.0, "cell": len(cells)},
                   {"load": value, "meets_slo": True, "slo_attainment": 0.95,
                    "cell": len(cells) + 1}],
    }  # fmt: skip
    return {**report, "cells": cells + probes, "capacity": capacity}


def test_capacity_and_goodput_are_metrics_and_probes_are_not_cells() -> None:
    reports = {
        rig: [_with_capacity(r, value, 2.0 * value) for r, value in zip(boots, caps, strict=True)]
        for (rig, boots), caps in zip(REPORTS.items(), ([8, 8, 9], [4, 4, 5]), strict=True)
    }
    values = values_from_reports(reports)
    assert set(values["torch"]) == {"c=1", "c=4", "capacity"}  # no "probe c=8" cell
    assert values["torch"]["capacity"] == {"capacity.concurrency": [8.0, 8.0, 9.0]}
    assert values["jax"]["c=1"]["goodput_req_s"] == [8.0, 8.0, 10.0]
    comparison = compare(values)
    capacity = _by_key(comparison, "capacity", "capacity.concurrency")
    assert [
        m.metric.key for m in next(c for c in comparison.cells if c.cell == "capacity").metrics
    ] == ["capacity.concurrency"]
    assert capacity.results[1].boots == [4.0, 4.0, 5.0]
    # alone (not Holm-corrected with 30 others), 2x fewer users at this spread is told apart
    alone = compare(values, metrics=["capacity.concurrency"])
    capacity = _by_key(alone, "capacity", "capacity.concurrency")
    jax = next(r for r in capacity.results if r.rig == "jax")
    assert jax.verdict is Verdict.SLOWER
    assert "lower capacity within the SLO (worse)" in jax.words
    assert capacity.metric.unit == "users"
    assert _by_key(comparison, "c=4", "goodput_req_s").metric.label == "goodput"
    # Older reports (no SLO, no capacity) gain neither metric
    assert "goodput_req_s" not in values_from_reports(REPORTS)["torch"]["c=1"]
    assert "capacity" not in values_from_reports(REPORTS)["torch"]


@pytest.mark.parametrize(
    ("a", "b"),
    [([4, 4, 4], [4, 4, 4]), ([4, 5, 4], [4, 4, 5]), ([3, 4, 4, 4], [4, 4, 3, 4])],
)
def test_an_a_a_sweep_with_capacity_gives_no_capacity_verdict(a: list[int], b: list[int]) -> None:
    # Capacities are whole numbers: two runs of one rig land on the same few values, whose
    # spread either shows no difference or (no spread at all) allows no test.
    reports = {
        "jax": [_with_capacity(REPORTS["jax"][i % 3], v, 1.0) for i, v in enumerate(a)],
        "jax@b": [_with_capacity(REPORTS["jax"][i % 3], v, 1.0) for i, v in enumerate(b)],
    }
    capacity = _by_key(compare(values_from_reports(reports)), "capacity", "capacity.concurrency")
    other = next(r for r in capacity.results if r.rig == "jax@b")
    assert other.verdict in (Verdict.INDISTINGUISHABLE, Verdict.NO_VERDICT)
    assert ">" not in capacity.ranking
