import itertools

from hypothesis import given
from hypothesis import strategies as st

from harness.sse import SSEDecoder

STREAM = (
    b": keep-alive\r\n\r\n"
    b'data: {"a": 1}\r\n\r\n'
    b"event: message\nid: 7\ndata: line one\ndata: line two\n\n"
    b"data:no-space\r\r"
    b"data: [DONE]\n\n"
)
EXPECTED = ['{"a": 1}', "line one\nline two", "no-space", "[DONE]"]


def test_decodes_events_comments_and_line_endings() -> None:
    assert SSEDecoder().feed(STREAM) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_split_of_the_bytes_gives_the_same_events(cuts: list[int]) -> None:
    decoder = SSEDecoder()
    events: list[str] = []
    bounds = [0, *sorted(cuts), len(STREAM)]
    for start, end in itertools.pairwise(bounds):
        events += decoder.feed(STREAM[start:end])
    assert events == EXPECTED
    assert not decoder.pending


def test_unfinished_event_is_pending_not_emitted() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: half") == []
    assert decoder.pending
