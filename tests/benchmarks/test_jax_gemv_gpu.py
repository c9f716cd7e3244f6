"""benchmarks/jax_gemv_gpu.py's CPU smoke run (--quick: random:tiny's shapes, Pallas'
interpreter), in this process: rows, best per shape, and a variant that cannot run as a row."""

import json
from pathlib import Path

import pytest

from benchmarks import jax_gemv_gpu


def test_quick_run_reports_every_variant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    untileable = {"block_f": 8, "block_d": 64}  # below gemv.MIN_BLOCK: no kernel for it
    monkeypatch.setattr(jax_gemv_gpu, "QUICK_BLOCKS", (*jax_gemv_gpu.QUICK_BLOCKS, untileable))
    out = tmp_path / "gemv.json"
    report = jax_gemv_gpu.main([str(out), "--quick", "--widths", "1,8", "--shapes", "w_o,w_down"])
    assert json.loads(out.read_text()) == report
    names = {r["shape"] for r in report["rows"]}
    assert names == {"w_o 64x64", "w_o 64x128", "w_down 64x128", "w_down 64x256"}
    per_shape = len(jax_gemv_gpu.QUICK_BLOCKS) + 1
    assert len(report["rows"]) == len(names) * 2 * per_shape
    timed = [r for r in report["rows"] if "us" in r]
    failed = [r for r in report["rows"] if "error" in r]
    assert {r["variant"] for r in failed} == {"pallas f8 d64 kauto w4 s3"}
    assert all("no block" in r["error"] for r in failed)
    assert len(timed) == len(names) * 2 * (per_shape - 1)
    for r in timed:
        assert r["us"] > 0
        assert r["variant"] == "xla" or r["within_bound"] is True
        assert r["GBps"] == pytest.approx(r["F"] * r["D"] * 4 / r["us"] / 1e3, rel=0.01, abs=0.1)
    assert len(report["best"]) == len(names) * 2
    for b in report["best"]:
        assert b["best"].startswith("pallas ")
        assert b["speedup"] == pytest.approx(b["xla_us"] / b["best_us"], rel=0.01)
    for step in report["per_step"]:  # random:tiny: 4 w_o and 2 wider; 3 w_down of each
        rows = [r for r in timed if r["width"] == step["width"]]
        xla = sum(r["per_step"] * r["us"] for r in rows if r["variant"] == "xla")
        assert step["xla_us"] == pytest.approx(xla, abs=0.1)
        assert step["best_pallas_us"] > 0
        assert 0 < step["bytes_covered"] < 0.1  # the tied head is most of random:tiny


def test_quick_decode_steps_with_each_kernel_choice(tmp_path: Path) -> None:
    out = tmp_path / "gemv.json"
    args = ["--quick", "--decode", "--widths", "2", "--shapes", "w_o 64x64"]
    report = jax_gemv_gpu.main([str(out), *args])
    assert [(r["width"], r["kernels"]) for r in report["decode"]] == [(2, "xla"), (2, "pallas")]
    for row in report["decode"]:
        assert row["ms_per_step"] > 0
        assert row["tok_s"] == pytest.approx(
            2000 / row["ms_per_step"], rel=0.01, abs=0.05
        )  # 0.1 tok/s
    assert report["decode"][1]["tokens_same_as_xla"] == 1.0  # float32: no near-ties expected
