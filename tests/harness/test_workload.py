"""Workloads as the harness plans them (no server): exact, seeded lengths; shared prefixes;
bundled datasets; arrivals; SLO attainment; the config's rules."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from harness.dataset import BUNDLED_NAMES, DatasetError, open_dataset
from harness.load import arrivals, poisson_arrivals
from harness.metrics import cell_report
from harness.planning import Prompts
from harness.schemas import SLO, BenchmarkConfig, GammaArrival, RequestRecord

URL = "http://127.0.0.1:9"


def config(**fields: object) -> BenchmarkConfig:
    return BenchmarkConfig.model_validate({"url": URL, "model": "m", **fields})


def bodies(prompts: Prompts, count: int, seed: int) -> list[dict[str, object]]:
    return [json.loads(b) for b in prompts.plan(count, seed).bodies]


def test_distributed_lengths_are_exact_seeded_and_bounded() -> None:
    workload = {
        "kind": "random",
        "prompt_tokens": {"mean": 64, "stddev": 16},
        "output_tokens": {"mean": 20, "stddev": 30},
    }
    prompts = Prompts(config(workload=workload), vocab_size=None, dataset=None)
    planned = prompts.plan(400, seed=3)
    sent = [json.loads(b) for b in planned.bodies]
    lengths = [len(b["prompt"]) for b in sent]
    assert lengths == planned.input_lens  # token ids: the server sees exactly these counts
    assert [b["max_tokens"] for b in sent] == planned.output_lens
    assert [b["min_tokens"] for b in sent] == planned.output_lens
    assert min(lengths) >= 1
    assert max(lengths) <= 64 + 48
    assert min(planned.output_lens) >= 1
    assert max(planned.output_lens) <= 20 + 90
    assert abs(np.mean(lengths) - 64) < 3
    assert 12 < np.std(lengths) < 20
    assert len(set(planned.output_lens)) > 10  # a spread, not one length
    again = Prompts(config(workload=workload), vocab_size=None, dataset=None).plan(400, seed=3)
    assert again == planned
    assert prompts.plan(400, seed=4).input_lens != planned.input_lens


def test_fixed_random_workload_sends_what_input_len_always_sent() -> None:
    old = Prompts(config(input_len=12, output_len=5), vocab_size=None, dataset=None)
    new = Prompts(
        config(workload={"kind": "random", "prompt_tokens": 12, "output_tokens": 5}),
        vocab_size=None,
        dataset=None,
    )
    assert old.plan(4, seed=1) == new.plan(4, seed=1)


def test_shared_prefix_groups_share_their_prefix_across_cells() -> None:
    workload = {"kind": "shared_prefix", "groups": 3, "prefix_tokens": 10, "suffix_tokens": 4,
                "output_tokens": 7}  # fmt: skip
    prompts = Prompts(config(workload=workload), vocab_size=None, dataset=None)
    first = bodies(prompts, 5, seed=0)
    second = bodies(prompts, 4, seed=1)  # the next cell: requests 5..8 of the run
    sent = [b["prompt"] for b in first + second]
    assert all(len(p) == 14 for p in sent)
    assert all(b["max_tokens"] == 7 for b in first + second)
    for i, prompt in enumerate(sent):  # request i takes prefix i mod 3, in every cell
        assert prompt[:10] == sent[i % 3][:10]
    assert len({tuple(p[:10]) for p in sent}) == 3
    assert len({tuple(p[10:]) for p in sent}) == len(sent)  # each its own suffix


def test_shared_prefix_on_the_chat_endpoint_is_words() -> None:
    workload = {"kind": "shared_prefix", "groups": 2, "prefix_tokens": 6, "suffix_tokens": 3}
    prompts = Prompts(config(workload=workload, endpoint="chat"), vocab_size=None, dataset=None)
    sent = [b["messages"][0]["content"] for b in bodies(prompts, 4, seed=0)]  # type: ignore[index]
    words = [text.split() for text in sent]
    assert all(len(w) == 9 for w in words)
    assert words[0][:6] == words[2][:6] != words[1][:6]


def test_the_bundled_chat_dataset_has_a_spread_and_is_recorded_exactly() -> None:
    assert "sample-chat" in BUNDLED_NAMES
    entries, provenance = open_dataset("sample-chat", "chat")
    assert provenance.name == "sample-chat"
    assert provenance.rows == len(entries) >= 20
    path = Path(__file__).resolve().parents[2] / "harness" / "data" / "sample-chat.jsonl"
    assert provenance.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    words = [sum(len(str(m.content).split()) for m in e.messages or []) for e in entries]
    outs = [e.output_len for e in entries]
    assert min(words) <= 5
    assert max(words) >= 200
    assert min(o or 0 for o in outs) <= 16
    assert max(o or 0 for o in outs) >= 256
    assert any(len(e.messages or []) > 2 for e in entries)  # multi-turn conversations too
    prompts = Prompts(
        config(workload={"kind": "dataset", "path": "sample-chat"}, endpoint="chat"),
        vocab_size=None,
        dataset=entries,
        provenance=provenance,
    )
    prompts.plan(3, seed=0)
    assert prompts.provenance is not None
    assert prompts.provenance.rows_used == 3
    prompts.plan(100, seed=1)
    assert prompts.provenance.rows_used == provenance.rows


def test_a_dataset_of_messages_refuses_the_completions_endpoint() -> None:
    with pytest.raises(DatasetError, match="sample-chat line 1: messages need --endpoint chat"):
        open_dataset("sample-chat", "completions")


def test_dataset_lines_take_output_tokens_or_output_len(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "a b", "output_tokens": 9}\n{"prompt": "c", "output_len": 4}\n')
    entries, provenance = open_dataset(str(path), "completions")
    assert [e.output_len for e in entries] == [9, 4]
    assert provenance.rows == 2
    path.write_text('{"prompt": "a", "output_tokens": 0}\n')
    with pytest.raises(DatasetError, match="line 1: output_tokens"):
        open_dataset(str(path), "completions")


def test_arrivals_keep_the_rate_and_differ_in_spread() -> None:
    n, rate = 20_000, 5.0
    constant = arrivals(n, rate, 0, "constant")
    assert np.allclose(np.diff(constant), 1 / rate)
    assert np.array_equal(arrivals(n, rate, 7, "poisson"), poisson_arrivals(n, rate, 7))
    for shape in (0.25, 1.0, 4.0):
        gaps = np.diff(arrivals(n, rate, 1, GammaArrival(gamma=shape)))
        assert abs(gaps.mean() * rate - 1) < 0.05
        # gamma gaps: coefficient of variation 1/sqrt(shape): burstier below 1
        assert abs(gaps.std() / gaps.mean() - shape**-0.5) < 0.1 * shape**-0.5


def record(index: int, ttft_s: float, *, error: bool = False) -> RequestRecord:
    return RequestRecord(
        request_id=index, cell=0, input_len=4, output_len=3, ready_time=0.0, send_time=0.0,
        first_content_time=None if error else ttft_s,
        content_times=[] if error else [ttft_s, ttft_s + 0.01, ttft_s + 0.02],
        end_time=ttft_s + 0.02, usage_output_tokens=None if error else 3,
        content_chunks=0 if error else 3, error="http_error" if error else None,
    )  # fmt: skip


def test_a_cell_meets_the_slo_when_its_percentile_of_requests_met_every_target() -> None:
    # 9 of 10 requests under 100 ms, one failed: attainment 90%
    records = [record(i, 0.05) for i in range(9)] + [record(9, 0.05, error=True)]
    at_90 = cell_report(records, concurrency=1, slo=SLO(ttft_ms=100))
    assert at_90.slo_attainment == pytest.approx(0.9)
    assert at_90.meets_slo is True
    at_95 = cell_report(records, concurrency=1, slo=SLO(ttft_ms=100, percentile=95))
    assert at_95.meets_slo is False
    slow = cell_report(records, concurrency=1, slo=SLO(ttft_ms=10))
    assert slow.slo_attainment == 0
    assert slow.meets_slo is False
    assert cell_report(records, concurrency=1).meets_slo is None


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"capacity": {"by": "concurrency", "max": 8}}, "a capacity search needs an slo"),
        ({"slo": {"ttft_ms": 5}, "capacity": {"by": "concurrency", "max": 2.5}}, "whole number"),
        ({"slo": {"percentile": 90}}, "give at least one target"),
        ({"slo": {"ttft_ms": 5, "percentile": 0}}, "percentile"),
        ({"workload": {"kind": "shared_prefix", "groups": 2}}, "prefix_tokens"),
        ({"workload": {"kind": "random", "prompt_tokens": {"mean": 0, "stddev": 1}}}, "mean"),
        ({"workload": {"kind": "dataset", "path": "x"}, "dataset": "y"}, "not both"),
        ({"arrival": {"gamma": -1}}, "gamma"),
    ],
)
def test_bad_configs_name_what_is_wrong(fields: dict[str, object], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        config(**fields)


def test_concurrency_and_rate_cells_in_one_run() -> None:
    both = config(concurrency=[1, 2], rate=[3.0])
    assert both.concurrency == [1, 2]
    assert both.rate == [3.0]


def test_a_dataset_in_s3_is_downloaded_and_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3
    from moto import mock_aws

    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):  # fmt: skip
        monkeypatch.setenv(name, value)
    body = b'{"prompt": "one two three", "output_tokens": 5}\n{"prompt": "four"}\n'
    with mock_aws():
        boto3.client("s3").create_bucket(Bucket="stack-bucket")
        boto3.client("s3").put_object(Bucket="stack-bucket", Key="datasets/d.jsonl", Body=body)
        entries, provenance = open_dataset("s3://stack-bucket/datasets/d.jsonl", "completions")
        with pytest.raises(DatasetError, match=r"s3://stack-bucket/nope\.jsonl: cannot download"):
            open_dataset("s3://stack-bucket/nope.jsonl", "completions")
    assert [e.output_len for e in entries] == [5, None]
    assert provenance.sha256 == hashlib.sha256(body).hexdigest()
    assert provenance.name == "s3://stack-bucket/datasets/d.jsonl"
    with pytest.raises(DatasetError, match="give s3://BUCKET/KEY"):
        open_dataset("s3://x", "completions")
