"""The HTTP/1.1 client codec: framing of every kind, at every split point."""

from __future__ import annotations

import pytest

from harness.client.h1 import H1Error, ResponseParser, encode_request

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
BODY = [b"event: a\ndata: 1\n\n", b'event: b\ndata: {"x": 2}\n\n', b"x" * 300]


def chunked(parts: list[bytes]) -> bytes:
    return b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\ntrailer: t\r\n\r\n"


def feed_split(data: bytes, cuts: list[int]) -> tuple[ResponseParser, bytes]:
    p = ResponseParser()
    out = b""
    last = 0
    for cut in [*cuts, len(data)]:
        out += p.feed(data[last:cut])
        last = cut
    return p, out


def test_encode_request_adds_content_length_and_rejects_header_injection() -> None:
    wire = encode_request("POST", "/v1/responses", [("host", "h:1")], b"{}")
    assert wire == b"POST /v1/responses HTTP/1.1\r\nhost: h:1\r\ncontent-length: 2\r\n\r\n{}"
    with pytest.raises(ValueError, match="single line"):
        encode_request("GET", "/", [("x", "a\r\nevil: 1")], b"")


def test_chunked_body_is_the_same_whatever_the_split() -> None:
    wire = HEAD + chunked(BODY)
    whole, body = feed_split(wire, [])
    assert body == b"".join(BODY) and whole.complete and whole.status == 200
    assert whole.keep_alive and whole.headers["content-type"] == "text/event-stream"
    for cut in range(1, len(wire)):
        p, got = feed_split(wire, [cut])
        assert got == b"".join(BODY) and p.complete, cut
    p, got = feed_split(wire, list(range(1, len(wire))))  # one byte at a time
    assert got == b"".join(BODY) and p.complete


def test_content_length_body_and_connection_close() -> None:
    wire = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello"
    for cut in range(1, len(wire)):
        p, got = feed_split(wire, [cut])
        assert (got, p.status, p.complete, p.keep_alive) == (b"hello", 400, True, False)


def test_body_until_close_completes_on_eof_only() -> None:
    p = ResponseParser()
    assert p.feed(b"HTTP/1.0 200 OK\r\n\r\nabc") == b"abc"
    assert p.feed(b"def") == b"def" and not p.complete and not p.keep_alive
    p.eof()
    assert p.complete


def test_interim_responses_are_skipped() -> None:
    p, got = feed_split(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", []
    )
    assert (p.status, got, p.complete) == (200, b"ok", True)


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        (b"HTTX/1.1 200 OK\r\n\r\n", "status line"),
        (b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n", "header line"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n", "content-length"),
        (HEAD + b"zz\r\n", "hexadecimal size"),
        (HEAD + b"2\r\nabXY", "CRLF after the data"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nab", "nothing after the body"),
        # An oversized head is refused also when it arrives whole in one read.
        (b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * (65 * 1024) + b"\r\n\r\n", "at most 65536 bytes"),
        (b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * (65 * 1024), "at most 65536 bytes"),
    ],
)
def test_malformed_responses_raise_with_what_was_expected(wire: bytes, message: str) -> None:
    with pytest.raises(H1Error, match=message):
        ResponseParser().feed(wire)


def test_eof_inside_a_response_is_an_error() -> None:
    p = ResponseParser()
    p.feed(HEAD + b"5\r\nab")
    with pytest.raises(H1Error, match="inside the response body"):
        p.eof()


def test_chunk_extensions_and_padded_sizes_whatever_the_split() -> None:
    wire = HEAD + b"3;name=value\r\nabc\r\n 2 \r\nde\r\n1\r\nf\r\n0\r\n\r\n"
    for cuts in ([], *([c] for c in range(1, len(wire))), list(range(1, len(wire)))):
        p, got = feed_split(wire, cuts)
        assert got == b"abcdef" and p.complete, cuts


def test_the_answer_to_a_head_request_ends_with_its_head() -> None:
    """It announces the length a GET would have and sends no body (RFC 9110 §9.3.2)."""
    wire = (
        b"HTTP/1.1 404 Not Found\r\ncontent-length: 118\r\ncontent-type: application/json\r\n\r\n"
    )
    p = ResponseParser(no_body=True)
    assert p.feed(wire) == b"" and p.complete and p.keep_alive and p.status == 404
    waiting = ResponseParser()
    waiting.feed(wire)
    assert not waiting.complete  # the same head as a GET's answer: 118 bytes still to come


# -- unit_end: where a kernel-stamping reader ends a read before the first token (§1.9) ----


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def test_unit_end_stops_at_the_head_then_at_each_chunk_of_a_chunked_event_stream() -> None:
    p = ResponseParser()
    first, second = _chunk(BODY[0]), _chunk(BODY[1])
    wire = HEAD + first + second
    assert p.unit_end(wire) == len(HEAD)
    assert p.feed(wire[: len(HEAD)]) == b""
    assert p.unit_end(first + second) == len(first)
    assert p.feed(first) == BODY[0]
    assert p.unit_end(second) == len(second)


def test_unit_end_of_a_head_or_chunk_split_over_reads_counts_what_the_parser_holds() -> None:
    p = ResponseParser()
    p.feed(HEAD[:10])
    assert p.unit_end(HEAD[10:] + _chunk(b"x")) == len(HEAD) - 10
    p.feed(HEAD[10:])
    chunk = _chunk(BODY[0])
    p.feed(chunk[:1])  # inside the size line
    assert p.unit_end(chunk[1:] + _chunk(b"x")) == len(chunk) - 1
    p.feed(chunk[1:6])  # inside the data
    assert p.unit_end(chunk[6:] + _chunk(b"x")) == len(chunk) - 6
    p.feed(chunk[6:-1])  # the data whole, its CRLF not
    assert p.unit_end(chunk[-1:] + _chunk(b"x")) == 1


def test_unit_end_is_zero_until_a_unit_is_whole() -> None:
    p = ResponseParser()
    assert p.unit_end(HEAD[:-1]) == 0
    p.feed(HEAD)
    big = _chunk(b"e" * 300_000)  # a chunk larger than one read
    assert p.unit_end(big[:4]) == 0
    assert p.unit_end(big[: 256 * 1024]) == 0
    p.feed(big[:1000])
    assert p.unit_end(big[1000:-1]) == 0
    assert p.unit_end(big[1000:]) == len(big) - 1000


def test_unit_end_of_a_body_not_chunked_is_each_line_where_an_event_may_end() -> None:
    p = ResponseParser()
    p.feed(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
    assert p.unit_end(b"data: 1\n\ndata: 2\n\n") == len(b"data: 1\n")
    assert p.unit_end(b"\ndata: 2\n\n") == 1
    assert p.unit_end(b"data: 1") == 0
