"""`rigbench bench` against endpoints as users meet them: one that wants a key, one broken in
the ways real servers are (500s, a model it does not serve, `stream: true` ignored), prompts
from a dataset, and goodput against SLOs. One reference server, requiring a key, plays each
(a request asks for a broken answer with X-Reference-Status or X-Reference-Quirks)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import Result

from harness.dataset import DatasetError, load_dataset
from tests.harness.conftest import ROOT, server_stats, start_reference_server
from tests.harness.test_cli import one_error_line, rigbench

KEY = "sk-test-123"
SAMPLE = ROOT / "harness" / "data" / "sample-prompts.jsonl"


@pytest.fixture(scope="module")
def keyed_server() -> Iterator[str]:
    proc, url = start_reference_server(
        "--ttft-ms", "20", "--itl-ms", "5", "--model", "ref", "--api-key", KEY
    )
    yield url
    proc.terminate()
    proc.wait(5)


def bench(url: str, tmp_path: Path, *args: str, key: str | None = KEY) -> Result:
    """OPENAI_API_KEY set to `key`, or unset."""
    env = {"OPENAI_API_KEY": key}
    return rigbench("--url", url, "--out", str(tmp_path / "report.json"), *args, env=env)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--model", "ref", "--header", "X-Reference-Status:500"],
         "the pre-flight request failed (http_error): HTTP 500: injected failure "
         "(X-Reference-Status)"),
        (["--model", "gpt-4"],
         "the pre-flight request failed (http_error): HTTP 404: model 'gpt-4' does not exist; "
         "this server serves 'ref'; --model 'gpt-4' is not one the server lists ('ref')"),
        (["--model", "ref", "--header", "X-Reference-Quirks:no-stream"],
         "the pre-flight request failed (not_streamed): the server ignored stream: true"),
    ],
    ids=["http-500", "wrong-model", "stream-ignored"],
)  # fmt: skip
@pytest.mark.slow
def test_a_broken_server_stops_the_run_at_the_pre_flight(
    keyed_server: str, tmp_path: Path, args: list[str], says: str
) -> None:
    before = server_stats(keyed_server).get("requests", 0)
    result = bench(keyed_server, tmp_path, *args, "--concurrency", "1,4", "--requests", "8")
    assert result.exit_code == 1, result.stderr
    assert says in one_error_line(result)
    assert server_stats(keyed_server)["requests"] == before + 1  # the pre-flight alone
    assert not (tmp_path / "report.json").exists()
    assert result.stdout == ""


@pytest.mark.slow
def test_without_the_key_the_server_says_so_and_the_hint_names_the_option(
    keyed_server: str, tmp_path: Path
) -> None:
    result = bench(keyed_server, tmp_path, "--model", "ref", key=None)
    assert result.exit_code == 1
    line = one_error_line(result)
    assert "HTTP 401: Incorrect API key provided" in line
    assert "--api-key (or OPENAI_API_KEY)" in line


@pytest.mark.slow
def test_a_dataset_with_a_key_and_slos_end_to_end(keyed_server: str, tmp_path: Path) -> None:
    # Tokens every 5 ms after 20 ms: a request of n tokens ends near 20 + 5 (n - 1) ms. The
    # E2E target of 300 ms splits the sample's lengths (16 by default, 24..96 given).
    result = bench(
        keyed_server, tmp_path, "--model", "ref", "--dataset", str(SAMPLE),
        "--requests", "8", "--warmup", "2", "--output-len", "16",
        "--slo", "ttft_ms=1000,e2e_ms=300", "--percentiles", "50,95",
        "--header", "X-Run-Tag: dataset-e2e",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["config"]["dataset"] == str(SAMPLE)
    assert KEY not in (tmp_path / "report.json").read_text()  # the key stays out of files
    cell = report["cells"][0]
    assert cell["requests_ok"] == 8
    assert cell["length_mismatches"] == 0
    records = [
        json.loads(line) for line in (tmp_path / "report.requests.jsonl").read_text().splitlines()
    ]
    measured = sorted((r for r in records if not r["warmup"]), key=lambda r: r["request_id"])
    # The warm-up took the file's first two lines; the cell the next eight, wrapping round.
    lines = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    expected = [lines[(2 + i) % len(lines)].get("output_len", 16) for i in range(8)]
    assert [r["output_len"] for r in measured] == expected
    assert all(r["input_len"] is None for r in measured)
    # Goodput: the requests that met every SLO, per second of the cell.
    met = sum(
        (r["first_content_time"] - r["send_time"]) * 1e3 <= 1000
        and (r["end_time"] - r["send_time"]) * 1e3 <= 300
        for r in measured
    )
    assert 0 < met < 8
    assert cell["slo_met"] == met
    assert cell["goodput_req_s"] == pytest.approx(met / cell["duration_s"])
    assert set(cell["ttft_ms"]["percentiles"]) == {"p95"}
    assert "goodput req/s" in result.stdout
    assert f"{cell['goodput_req_s']:.2f} ({met}/8)" in result.stdout
    assert "TTFT p95" in result.stdout
    # Every request carried the extra header: /v1/models, pre-flight, 2 warm-up, 8 measured.
    assert server_stats(keyed_server)["header x-run-tag"] == 12


def test_the_sample_dataset_reads_for_both_endpoints() -> None:
    for endpoint in ("completions", "chat"):
        entries = load_dataset(SAMPLE, endpoint)  # type: ignore[arg-type]
        assert len(entries) == len(SAMPLE.read_text().splitlines())


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            '{"prompt": "hi"}\n{"prompt": "a", "messages": [{"role": "user", "content": "b"}]}\n',
            "line 2: give exactly one",
        ),
        ('{"prompt": "hi"}\nnot json\n', "line 2: not JSON"),
        ('{"prompt": "hi", "output_len": 0}\n', "line 1: output_len:"),
        ('{"messages": [{"role": "user", "content": "hi"}]}\n', "line 1: messages need"),
        ("\n\n", "no requests in the file"),
    ],
)
def test_a_bad_dataset_is_refused_naming_the_line(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text(text)
    with pytest.raises(DatasetError) as caught:
        load_dataset(path, "completions")
    assert says in str(caught.value)
    # The command line says the same in one line, exit 2, before any request.
    result = rigbench("--url", "http://127.0.0.1:9", "--model", "m", "--dataset", str(path))
    assert result.exit_code == 2
    assert f"--dataset {path}" in one_error_line(result)
    assert says in one_error_line(result)


@pytest.mark.slow
def test_chat_messages_from_a_dataset_go_to_the_server(keyed_server: str, tmp_path: Path) -> None:
    path = tmp_path / "chat.jsonl"
    path.write_text(
        json.dumps({"messages": [{"role": "system", "content": "be brief"},
                                 {"role": "user", "content": "hello there"}],
                    "output_len": 6}) + "\n"
    )  # fmt: skip
    result = bench(keyed_server, tmp_path, "--model", "ref", "--endpoint", "chat",
                   "--dataset", str(path), "--requests", "2", "--warmup", "0")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    cell = json.loads((tmp_path / "report.json").read_text())["cells"][0]
    assert cell["requests_ok"] == 2
    assert cell["output_tokens"] == 12
