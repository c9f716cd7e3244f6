"""The GuideLLM runner's command line and report parsing, on reports GuideLLM 0.8.1 wrote.

Running GuideLLM itself needs its own virtualenv (see benchmarks/guidellm_runner.py); these tests
check what the runner asks of it and how it reads back what it recorded.
"""

import json
import re
import sys
from pathlib import Path

import pytest

from benchmarks.guidellm_runner import (
    GuidellmScheduleError,
    ensure_tokenizer,
    guidellm_command,
    guidellm_executable,
    parse_report,
)

DATA = Path(__file__).parent / "data"


def _command(**overrides: object) -> list[str]:
    kwargs: dict[str, object] = {
        "url": "http://127.0.0.1:8000",
        "model": "tiny",
        "concurrency": 16,
        "rate": None,
        "rate_kind": "poisson",
        "requests": 200,
        "warmup": 0,
        "input_len": 128,
        "output_len": 64,
        "endpoint": "completions",
        "tokenizer_dir": Path("/tok"),
        "report": Path("/out/report.json"),
        "seed": 42,
    }
    kwargs.update(overrides)
    return guidellm_command(Path("/venv/bin/guidellm"), **kwargs)  # type: ignore[arg-type]


def _option(command: list[str], name: str) -> dict[str, object]:
    value: dict[str, object] = json.loads(command[command.index(name) + 1])
    return value


def test_command_fixed_concurrency() -> None:
    command = _command()
    assert command[:2] == ["/venv/bin/guidellm", "run"]
    assert _option(command, "--backend") == {
        "kind": "openai_http",
        "target": "http://127.0.0.1:8000",
        "model": "tiny",
        "request_format": "/v1/completions",
        "http2": False,
        "extras": {"body": {"min_tokens": 64}},
    }
    assert _option(command, "--profile") == {"kind": "concurrent", "streams": [16]}
    assert _option(command, "--constraint") == {"kind": "max_requests", "count": 200}
    assert _option(command, "--data") == {
        "kind": "synthetic_text",
        "prompt_tokens": 128,
        "output_tokens": 64,
    }
    assert _option(command, "--tokenizer") == {"kind": "hf_auto", "model": "/tok"}
    assert _option(command, "--output") == {"kind": "json", "path": "/out/report.json"}


def test_command_rate_with_warmup_and_chat() -> None:
    command = _command(concurrency=None, rate=2.5, warmup=10, endpoint="chat")
    assert _option(command, "--profile") == {
        "kind": "poisson",
        "rate": [2.5],
        "warmup": {"value": 10, "mode": "requests"},
    }
    assert _option(command, "--constraint") == {"kind": "max_requests", "count": 210}
    assert _option(command, "--backend")["request_format"] == "/v1/chat/completions"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"rate": 2.0}, "exactly one of concurrency or rate"),
        ({"concurrency": None}, "exactly one of concurrency or rate"),
        ({"concurrency": 0}, "concurrency must be at least 1"),
        ({"concurrency": None, "rate": -1.0}, "rate must be positive"),
        ({"requests": 0}, "requests=0"),
        ({"endpoint": "embeddings"}, "endpoint must be one of"),
    ],
)
def test_command_rejects_bad_arguments(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        _command(**overrides)


def test_parse_report_reads_rigbench_figures() -> None:
    # Reference server schedule: first token after 50 ms, then one every 10 ms; 32 tokens.
    result = parse_report(DATA / "guidellm-0.8.1-concurrent4.json", concurrency=4)
    assert result.guidellm_version == "0.8.1"
    assert (result.requests_ok, result.requests_failed, result.requests_incomplete) == (40, 0, 0)
    assert result.output_tokens == 40 * 32
    assert result.duration_s == pytest.approx(3.771, abs=1e-3)
    assert result.request_rate == pytest.approx(40 / result.duration_s)
    assert result.output_tok_s == pytest.approx(1280 / result.duration_s)
    # The schedule shows through GuideLLM's figures, with its own overhead on TTFT.
    assert 50.0 <= result.ttft_ms.p50 <= 60.0
    assert result.itl_ms.p50 == pytest.approx(10.0, abs=0.1)
    # E2E in ms: TTFT + 31 gaps of 10 ms and the stream's tail.
    assert result.e2e_ms.p50 == pytest.approx(result.ttft_ms.p50 + 310.0, abs=10.0)
    # GuideLLM's TPOT counts TTFT in: (TTFT + 31 * 10) / 32.
    assert result.guidellm_tpot_ms.p50 == pytest.approx((result.ttft_ms.p50 + 310.0) / 32, abs=0.3)
    # Four streams kept busy: between 3 and 4 in flight on average (gaps between requests).
    assert result.achieved_concurrency is not None
    assert 3.0 < result.achieved_concurrency <= 4.0


def test_parse_report_leaves_out_warmup_requests(tmp_path: Path) -> None:
    report = json.loads((DATA / "guidellm-0.8.1-concurrent4.json").read_text())
    bench = report["benchmarks"][0]
    earliest = min(r["request_start_time"] for r in bench["requests"]["successful"])
    bench["start_time"] = earliest + 0.5  # requests begun in the first half second are warm-up
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    kept = [r for r in bench["requests"]["successful"] if r["request_start_time"] >= earliest + 0.5]
    result = parse_report(path)
    assert 0 < result.requests_ok == len(kept) < 40


def test_parse_report_detects_unanchored_poisson_burst() -> None:
    with pytest.raises(GuidellmScheduleError, match=re.escape("scheduled at Unix time -0.80")):
        parse_report(DATA / "guidellm-0.8.1-poisson-burst.json", rate=5.0)


def test_parse_report_rejects_multiple_benchmarks(tmp_path: Path) -> None:
    report = json.loads((DATA / "guidellm-0.8.1-concurrent4.json").read_text())
    report["benchmarks"] *= 2
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    with pytest.raises(ValueError, match="expected one benchmark, found 2"):
        parse_report(path)


def test_missing_guidellm_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RIGBENCH_GUIDELLM", str(tmp_path / "nope" / "guidellm"))
    with pytest.raises(FileNotFoundError, match="set RIGBENCH_GUIDELLM"):
        guidellm_executable()


@pytest.mark.slow
def test_ensure_tokenizer_builds_a_byte_level_tokenizer(tmp_path: Path) -> None:
    # ensure_tokenizer runs GuideLLM's interpreter (beside its CLI); stand in with ours.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    target = tmp_path / "cache" / "tokenizer"
    assert ensure_tokenizer(bin_dir / "guidellm", target) == target
    assert sorted(p.name for p in target.parent.iterdir()) == ["tokenizer"]  # no staging left

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(target))
    text = "Lorem ipsum, 128 tokens: café"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert ids == list(text.encode())  # one token per UTF-8 byte
    assert tokenizer.decode(ids) == text
    # already there: returned without rebuilding
    stamp = (target / "tokenizer.json").stat().st_mtime_ns
    assert ensure_tokenizer(bin_dir / "guidellm", target) == target
    assert (target / "tokenizer.json").stat().st_mtime_ns == stamp
