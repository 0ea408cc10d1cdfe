"""The codec comparison's ``websockets`` side reads what the project's codec reads (bytes in,
messages out), so the two codecs are measured doing the same work."""

from __future__ import annotations

from bench.selfbench.codec_cmp import WebsocketsReader, websockets_encode
from harness.wire.ws_frames import OP_CONT, OP_PING, OP_TEXT, FrameReader, encode_frame


def test_both_readers_give_the_same_messages_for_the_same_bytes() -> None:
    wire = (
        encode_frame(OP_TEXT, b'{"type":"response.created"}', masked=False)
        + encode_frame(OP_TEXT, b"frag", masked=False, fin=False)
        + encode_frame(OP_PING, b"p", masked=False)
        + encode_frame(OP_CONT, b"ment", masked=False)
        + encode_frame(OP_TEXT, b"x" * 70_000, masked=False)
    )
    ours, theirs = FrameReader(1 << 20), WebsocketsReader(1 << 20)
    got_ours, got_theirs = [], []
    for i in range(0, len(wire), 1000):
        got_ours += ours.feed(wire[i : i + 1000])
        got_theirs += theirs.feed(wire[i : i + 1000])
    assert got_theirs == got_ours
    assert [op for op, _ in got_ours] == [OP_TEXT, OP_PING, OP_TEXT, OP_TEXT]


def test_both_encoders_write_frames_the_codec_reads_back() -> None:
    server = FrameReader(100, masked=True)
    frames = websockets_encode(OP_TEXT, b"hello") + encode_frame(OP_TEXT, b"hello")
    assert server.feed(frames) == [(OP_TEXT, b"hello"), (OP_TEXT, b"hello")]
