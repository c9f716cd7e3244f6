"""Malformed requests against a real torch-rig process: 4xx OpenAI errors, rig keeps serving."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import loopback
from tests.rigs.conftest import RIG_SERVERS_GROUP

pytestmark = [RIG_SERVERS_GROUP, pytest.mark.slow]

OK_PROMPT = {"prompt": "hi", "max_tokens": 1}
LONG_PROMPT = [2] * 1000

CASES: list[tuple[str, str, bytes | dict[str, Any], int, str]] = [
    # (name, path, body, status, words the message must contain)
    ("truncated json", "/v1/completions", b'{"prompt": "x"', 400, "Invalid JSON"),
    ("empty body", "/v1/completions", b"", 400, "Invalid JSON"),
    ("json null", "/v1/completions", b"null", 400, "object"),
    ("json array", "/v1/completions", b"[1, 2]", 400, "object"),
    ("trailing comma", "/v1/completions", b'{"prompt": "x",}', 400, "Invalid JSON"),
    ("no prompt", "/v1/completions", {"max_tokens": 2}, 400, "prompt: Field required"),
    ("prompt number", "/v1/completions", {"prompt": 5}, 400, "prompt"),
    ("prompt object", "/v1/completions", {"prompt": {"a": 1}}, 400, "prompt"),
    ("prompt floats", "/v1/completions", {"prompt": [1.5, 2]}, 400, "prompt"),
    ("prompt bools", "/v1/completions", {"prompt": [True, False]}, 400, "prompt"),
    ("batched prompts", "/v1/completions", {"prompt": ["a", "b"]}, 400, "batched prompts"),
    ("empty text prompt", "/v1/completions", {"prompt": ""}, 400, "prompt is empty"),
    ("empty id prompt", "/v1/completions", {"prompt": []}, 400, "prompt is empty"),
    ("empty nested prompt", "/v1/completions", {"prompt": [[]]}, 400, "prompt is empty"),
    ("negative id", "/v1/completions", {"prompt": [2, -1]}, 400, "token id -1 is out of range"),
    ("id = vocab", "/v1/completions", {"prompt": [2, 32768]}, 400, "out of range [0, 32768)"),
    ("huge id", "/v1/completions", {"prompt": [10**15]}, 400, "out of range"),
    ("max_tokens str", "/v1/completions", {**OK_PROMPT, "max_tokens": "8"}, 400, "max_tokens"),
    ("max_tokens float", "/v1/completions", {**OK_PROMPT, "max_tokens": 1.5}, 400, "max_tokens"),
    ("max_tokens 0", "/v1/completions", {**OK_PROMPT, "max_tokens": 0}, 400, "max_tokens"),
    (
        "beyond context",
        "/v1/completions",
        {"prompt": "x", "max_tokens": 5000},
        400,
        "maximum context length is 1024",
    ),
    (
        "prompt + max beyond context",
        "/v1/completions",
        {"prompt": LONG_PROMPT, "max_tokens": 100},
        400,
        "1000 in the prompt, 100 in the completion",
    ),
    (
        "prompt fills context",
        "/v1/completions",
        {"prompt": [2] * 1024, "max_tokens": 1},
        400,
        "maximum context length",
    ),
    ("min > max", "/v1/completions", {**OK_PROMPT, "min_tokens": 5}, 400, "min_tokens (5)"),
    ("temperature str", "/v1/completions", {**OK_PROMPT, "temperature": "hot"}, 400, "temperat"),
    ("temperature < 0", "/v1/completions", {**OK_PROMPT, "temperature": -1}, 400, "temperat"),
    ("top_p 0", "/v1/completions", {**OK_PROMPT, "top_p": 0}, 400, "top_p"),
    ("ignore_eos str", "/v1/completions", {**OK_PROMPT, "ignore_eos": "yes"}, 400, "ignore_eos"),
    ("stream str", "/v1/completions", {**OK_PROMPT, "stream": "yes"}, 400, "stream"),
    ("stream_options str", "/v1/completions", {**OK_PROMPT, "stream_options": "x"}, 400, "stream"),
    ("n=2", "/v1/completions", {**OK_PROMPT, "n": 2}, 400, "n:"),
    ("stop", "/v1/completions", {**OK_PROMPT, "stop": ["\n"]}, 400, "stop sequences"),
    ("penalty", "/v1/completions", {**OK_PROMPT, "presence_penalty": 1}, 400, "penalties"),
    ("echo", "/v1/completions", {**OK_PROMPT, "echo": True}, 400, "echo"),
    ("logprobs > 20", "/v1/completions", {**OK_PROMPT, "logprobs": 21}, 400, "logprobs"),
    ("seed str", "/v1/completions", {**OK_PROMPT, "seed": "x"}, 400, "seed"),
    ("seed huge", "/v1/completions", {**OK_PROMPT, "seed": 2**70}, 400, "seed"),
    ("unknown model", "/v1/completions", {**OK_PROMPT, "model": "gpt-4"}, 404, "gpt-4"),
    ("no messages", "/v1/chat/completions", {"max_tokens": 1}, 400, "messages"),
    ("empty messages", "/v1/chat/completions", {"messages": []}, 400, "messages"),
    (
        "bad role",
        "/v1/chat/completions",
        {"messages": [{"role": "robot", "content": "x"}]},
        400,
        "role",
    ),
    (
        "content number",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": 5}]},
        400,
        "content",
    ),
    (
        "image part",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]},
        400,
        "content",
    ),
    (
        "chat beyond context",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 4096},
        400,
        "maximum context length",
    ),
    (
        "chat unknown model",
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "model": "nope"},
        404,
        "nope",
    ),
]


def _post(base: str, path: str, body: bytes | dict[str, Any]) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return loopback.post(
        f"{base}{path}", content=content, headers={"content-type": "application/json"}, timeout=60
    )


def _assert_openai_error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    assert error["code"] is None or isinstance(error["code"], str)  # OpenAI: never an int
    return error


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_malformed_request_gets_a_clear_4xx(
    torch_rig: str, path: str, body: bytes | dict[str, Any], status: int, words: str
) -> None:
    error = _assert_openai_error(_post(torch_rig, path, body), status)
    assert words in error["message"]


def test_unknown_route_and_method_are_openai_errors(torch_rig: str) -> None:
    _assert_openai_error(loopback.get(f"{torch_rig}/v1/nothing"), 404)
    _assert_openai_error(loopback.get(f"{torch_rig}/v1/completions"), 405)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
_fields = st.sampled_from(
    ["prompt", "max_tokens", "min_tokens", "temperature", "ignore_eos", "stream", "model", "seed"]
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(body=st.dictionaries(_fields, _json, max_size=5) | _json)
def test_fuzzed_bodies_never_break_the_rig(torch_rig: str, body: Any) -> None:
    if isinstance(body, dict) and body.get("max_tokens") is None:
        body = {**body, "max_tokens": 1}  # keep valid requests cheap on a CPU
    response = _post(torch_rig, "/v1/completions", json.dumps(body).encode())
    if response.status_code != 200:
        assert 400 <= response.status_code < 500
        _assert_openai_error(response, response.status_code)


def test_rig_still_serves_after_the_abuse(torch_rig: str) -> None:
    assert loopback.get(f"{torch_rig}/health").status_code == 200
    response = _post(torch_rig, "/v1/completions", {"prompt": [2, 5, 6], "max_tokens": 3})
    assert response.status_code == 200
    assert response.json()["usage"]["completion_tokens"] == 3
