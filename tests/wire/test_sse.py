"""harness.wire.sse: the decoder is chunking-independent and spec-conformant."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.wire.errors import SSEError
from harness.wire.events import loads
from harness.wire.sse import SSEDecoder, SSEMessage, encode_comment, encode_done, encode_event

STREAM = (
    b"\xef\xbb\xbf: keepalive\r\n"
    b"event: response.created\r\n"
    b'data: {"type":"response.created","t":"caf\xc3\xa9 \xf0\x9f\x98\x80"}\r\n'
    b"\r\n"
    b"id: 7\r"
    b"data: line1\r"
    b"data:line2\r"
    b"data\r"
    b"\r"
    b": comment between\n"
    b"retry: 10\n"
    b"unknown: x\n"
    b"data:  two spaces\n"
    b"\n"
    b"event: only-event-no-data\n"
    b"\n"
    b"data: [DONE]\n"
    b"\n"
    b"data: unterminated"
)
EXPECTED = [
    SSEMessage("response.created", '{"type":"response.created","t":"café 😀"}', None),
    SSEMessage(None, "line1\nline2\n", "7"),
    SSEMessage(None, " two spaces", "7"),
    SSEMessage(None, "[DONE]", "7"),
]


def feed_all(chunks: list[bytes]) -> list[SSEMessage]:
    d = SSEDecoder()
    out: list[SSEMessage] = []
    for c in chunks:
        out += d.feed(c)
    return out + d.close()


def test_whole_stream() -> None:
    assert feed_all([STREAM]) == EXPECTED


def test_one_byte_at_a_time() -> None:
    assert feed_all([STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=40))
def test_any_chunking_gives_the_same_messages(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(STREAM)]
    assert feed_all([STREAM[a:b] for a, b in itertools.pairwise(bounds)]) == EXPECTED


@pytest.mark.parametrize("eol", [b"\n", b"\r", b"\r\n"])
def test_each_line_ending(eol: bytes) -> None:
    raw = eol.join([b"event: a", b"data: x", b"", b"data: y", b"data: z", b"", b""])
    assert feed_all([raw]) == [SSEMessage("a", "x"), SSEMessage(None, "y\nz")]


def test_crlf_split_across_chunks_is_one_line_ending() -> None:
    d = SSEDecoder()
    assert d.feed(b"data: a\r") == []
    # If the LF were taken as a second line ending, this would dispatch now.
    assert d.feed(b"\n") == []
    assert d.feed(b"\r") == [SSEMessage(None, "a")]
    assert d.feed(b"\ndata: b\r") == []
    assert d.feed(b"\r") == [SSEMessage(None, "b")]


def test_cr_then_non_lf_chunk_is_still_a_line_end() -> None:
    d = SSEDecoder()
    assert d.feed(b"data: a\r") == []
    assert d.feed(b"\rdata: b\n\n") == [SSEMessage(None, "a"), SSEMessage(None, "b")]


def test_utf8_split_inside_a_character() -> None:
    payload = "data: héllo 😀\n\n".encode()
    split = payload.index(b"\xf0") + 2  # in the middle of the 4-byte emoji
    d = SSEDecoder()
    assert d.feed(payload[:split]) == []
    assert d.feed(payload[split:]) == [SSEMessage(None, "héllo 😀")]


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    assert feed_all([b"data: a\xffb\n\n"]) == [SSEMessage(None, "a\ufffdb")]


def test_close_drops_unterminated_event_or_raises_in_strict_mode() -> None:
    d = SSEDecoder()
    assert d.feed(b"data: x\n") == []
    assert d.close() == []
    strict = SSEDecoder(strict=True)
    strict.feed(b"data: x\n")
    with pytest.raises(SSEError, match="ended inside an event"):
        strict.close()
    partial = SSEDecoder(strict=True)
    partial.feed(b"data: x")
    with pytest.raises(SSEError, match="data: x"):
        partial.close()
    clean = SSEDecoder(strict=True)
    assert clean.feed(b"data: x\n\n: bye\n") == [SSEMessage(None, "x")]
    assert clean.close() == []


def test_encode_event_round_trip() -> None:
    events = [
        {"type": "response.output_text.delta", "delta": 'a\nb\r"c" é', "sequence_number": 3},
        {"type": "response.completed", "response": {"id": "resp_1", "output": []}},
    ]
    raw = b"".join(encode_event(e) for e in events) + encode_comment("keep\nalive") + encode_done()
    assert encode_event(events[0]).startswith(b"event: response.output_text.delta\ndata: {")
    assert encode_event(events[0]).endswith(b"}\n\n") and encode_event(events[0]).count(b"\n") == 3
    msgs = feed_all([raw[i : i + 5] for i in range(0, len(raw), 5)])
    assert [m.event for m in msgs] == ["response.output_text.delta", "response.completed", None]
    assert [loads(m.data) for m in msgs[:2]] == events
    assert msgs[2].data == "[DONE]"


def test_encode_comment_is_ignored_by_decoder() -> None:
    assert encode_comment("keepalive") == b": keepalive\n\n"
    assert feed_all([encode_comment("x\ny")]) == []


def test_encode_event_requires_a_type() -> None:
    with pytest.raises(ValueError, match="'type'"):
        encode_event({"delta": "x"})
