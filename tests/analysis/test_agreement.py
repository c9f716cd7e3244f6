"""Output agreement: classification by the top-2 margin, pairs, and the probe's parsing."""

import pytest

from analysis.agreement import NEAR_TIE_NATS, classify, near_tie_threshold, output_agreement
from harness.agreement import MAX_TOKENS, AgreementProbe, ProbeAnswer
from harness.agreement_probe import parse_answer, prompt_set, request_body
from rigs.contract import PROBE_CONTEXT_TOKENS


def _answer(prompt: str, ids: list[int], margins: list[float] | None) -> ProbeAnswer:
    text = " ".join(map(str, ids))
    return ProbeAnswer(prompt_id=prompt, token_ids=ids, text=text, margins=margins)


def _probe(answers: list[ProbeAnswer], dtype: str | None = "float32") -> AgreementProbe:
    return AgreementProbe(
        prompt_set="agreement-v1",
        max_tokens=4,
        top_logprobs=2,
        logprobs=all(a.margins is not None for a in answers),
        dtype=dtype,
        duration_s=1.0,
        answers=answers,
    )


def test_a_divergence_is_a_near_tie_when_either_side_was_unsure() -> None:
    base = _answer("p", [1, 2, 3, 4], [0.5, 0.4, 0.3, 0.2])
    same = classify(base, _answer("p", [1, 2, 3, 4], [0.5, 0.4, 0.3, 0.2]), 1e-3)
    assert (same.outcome, same.first_divergence) == ("identical", None)
    unsure = classify(base, _answer("p", [1, 2, 9, 9], [0.5, 0.4, 0.0004, 0.2]), 1e-3)
    assert (unsure.outcome, unsure.first_divergence) == ("near_tie", 2)
    assert unsure.margins == (0.3, 0.0004)
    sure = classify(base, _answer("p", [1, 2, 9, 9], [0.5, 0.4, 0.3, 0.2]), 1e-3)
    assert sure.outcome == "diverged"
    shorter = classify(base, _answer("p", [1, 2], [0.5, 0.4]), 1e-3)  # an early EOS differs too
    assert shorter.first_divergence == 2


def test_pairs_count_prompts_and_a_confident_divergence_flags_the_pair() -> None:
    torch = [_answer(f"p{i}", [1, 2, 3, 4], [0.2] * 4) for i in range(4)]
    jax = [
        _answer("p0", [1, 2, 3, 4], [0.2000001] * 4),
        _answer("p1", [1, 7, 7, 7], [0.2, 0.0001, 0.2, 0.2]),  # near tie at 1
        _answer("p2", [1, 2, 3, 8], [0.2] * 4),  # confident at 3
        _answer("p3", [1, 2, 3, 4], [0.2] * 4),
    ]
    [pair] = output_agreement({"torch": [(1, _probe(torch))], "jax": [(1, _probe(jax))]})
    assert pair.rigs == ("jax", "torch")
    assert (pair.prompts, pair.identical, pair.near_tie, pair.diverged) == (4, 2, 1, 1)
    assert pair.mean_first_divergence == 2.0
    assert pair.verdict == "diverge"
    assert pair.words == "outputs diverge"
    assert pair.first_diverging is not None
    assert pair.first_diverging.prompt_id == "p2"  # the confident one, not the first near tie
    assert pair.threshold_nats == NEAR_TIE_NATS["float32"]
    assert pair.margin_shift_max == pytest.approx(1e-7, abs=1e-6)
    agree = output_agreement({"a": [(1, _probe(torch))], "b": [(2, _probe(torch[:2] + jax[1:2]))]})
    assert agree[0].verdict == "agree"
    assert agree[0].boots == (1, 2)
    assert "not answered by both" in agree[0].note  # p2, p3 missing on one side


def test_without_logprobs_every_divergence_counts_and_the_split_is_unavailable() -> None:
    with_lp = [_answer("p0", [1, 2], [0.0001, 0.1]), _answer("p1", [5, 6], [1.0, 1.0])]
    without = [_answer("p0", [3, 2], None), _answer("p1", [5, 6], None)]
    [pair] = output_agreement({"a": [(1, _probe(with_lp))], "b": [(1, _probe(without))]})
    assert (pair.identical, pair.near_tie, pair.diverged) == (1, None, 1)
    assert pair.verdict == "diverge"
    assert not pair.near_tie_split
    assert "near-tie split unavailable: b returned no logprobs" in pair.note


def test_threshold_by_the_coarser_dtype_unknown_as_bfloat16() -> None:
    assert near_tie_threshold("float32", "float32") == 1e-3
    assert near_tie_threshold("float32", "bfloat16") == 0.5
    assert near_tie_threshold("float32", None) == 0.5


def test_a_rig_is_represented_by_its_first_complete_probe() -> None:
    ok = _probe([_answer("p0", [1], [1.0])])
    failed = _probe([ProbeAnswer(prompt_id="p0", error="ReadTimeout")])
    [pair] = output_agreement({"a": [(1, failed), (2, ok), (3, None)], "b": [(1, None), (2, ok)]})
    assert pair.boots == (2, 2)
    assert output_agreement({"a": [(1, ok)], "b": [(1, None)]}) == []


def test_the_prompt_set_and_both_response_shapes() -> None:
    prompts = prompt_set()
    assert len(prompts) == 16
    assert len({p.id for p in prompts}) == 16
    assert {p.kind for p in prompts} == {"completion", "chat"}
    chat = next(p for p in prompts if p.kind == "chat")
    assert request_body("m", chat, logprobs=True)["top_logprobs"] == 2
    completion = next(p for p in prompts if p.kind == "completion")
    assert request_body("m", completion, logprobs=True)["logprobs"] == 2
    assert "logprobs" not in request_body("m", completion, logprobs=False)
    doc = {
        "choices": [
            {
                "text": "ab",
                "token_ids": [7, 8],
                "logprobs": {
                    "tokens": ["a", "b"],
                    "token_logprobs": [-0.1, -0.5],
                    "top_logprobs": [{"a": -0.1, "z": -2.1}, {"b": -0.5}],
                    "text_offset": [0, 1],
                },
            }
        ]
    }
    parsed = parse_answer(completion, doc)
    assert parsed.token_ids == [7, 8]
    assert parsed.margins == [pytest.approx(2.0), None]  # one alternative: no margin
    doc = {
        "choices": [
            {
                "message": {"content": "a"},
                "logprobs": {
                    "content": [
                        {
                            "token": "a",
                            "logprob": -0.2,
                            "top_logprobs": [
                                {"token": "a", "logprob": -0.2},
                                {"token": "c", "logprob": -0.3},
                            ],
                        }
                    ]
                },
            }
        ]
    }
    answer = parse_answer(chat, doc)
    assert answer.token_ids is None
    assert answer.tokens == ["a"]
    assert answer.margins == [pytest.approx(0.1)]


def test_every_probe_prompt_and_its_answer_fit_the_context_local_rigs_get() -> None:
    """rigbench.local.fleet sizes local rigs' max_model_len to at least this."""
    from rigs.serving.tokenizer import ServingTokenizer
    from rigs.sources import resolve_model

    tokenizer = ServingTokenizer.from_pretrained(resolve_model("random:tiny").path)
    for p in prompt_set():
        ids = tokenizer.encode(p.prompt) if p.prompt else tokenizer.encode_chat(p.messages or [])
        assert len(ids) + MAX_TOKENS <= PROBE_CONTEXT_TOKENS, p.id
