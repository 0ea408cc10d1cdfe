"""The client's frame reader and writer against the ``websockets`` package's own frames."""

from __future__ import annotations

import pytest
from websockets.frames import Frame, Opcode
from websockets.streams import StreamReader

from harness.wire.ws_frames import (
    NO_STATUS,
    OP_BINARY,
    OP_CLOSE,
    OP_PING,
    OP_TEXT,
    FrameError,
    FrameReader,
    close_code,
    close_payload,
    encode_frame,
    mask,
)


def server_frame(op: Opcode, data: bytes, fin: bool = True) -> bytes:
    return Frame(op, data, fin=fin).serialize(mask=False)


def feed_in_pieces(reader: FrameReader, data: bytes, size: int) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    for i in range(0, len(data), size):
        out += reader.feed(data[i : i + size])
    return out


@pytest.mark.parametrize("length", [0, 1, 125, 126, 65_535, 65_536, 300_000])
@pytest.mark.parametrize("piece", [3, 7, 4096, 10**9])
def test_messages_of_every_length_class_come_out_whole_however_the_bytes_are_cut(
    length: int, piece: int
) -> None:
    payload = bytes(i % 251 for i in range(length))
    wire = server_frame(Opcode.TEXT, payload) + server_frame(Opcode.BINARY, b"tail")
    got = feed_in_pieces(FrameReader(10**6), wire, piece)
    assert got == [(OP_TEXT, payload), (OP_BINARY, b"tail")]


def test_fragments_are_joined_and_control_frames_between_them_come_out_first() -> None:
    wire = (
        server_frame(Opcode.TEXT, b"frag", fin=False)
        + server_frame(Opcode.PING, b"p")
        + server_frame(Opcode.CONT, b"me", fin=False)
        + server_frame(Opcode.CONT, b"nt")
    )
    assert FrameReader(100).feed(wire) == [(OP_PING, b"p"), (OP_TEXT, b"fragment")]


@pytest.mark.parametrize(
    ("wire", "code", "words"),
    [
        # a fixed mask key: parameter ids must be the same in every collecting process
        (bytes([0x81, 0x80 | 1, 1, 2, 3, 4, ord("x") ^ 1]), 1002, "masked"),
        (bytes([0x81 | 0x40, 1]) + b"x", 1002, "reserved bits"),
        (server_frame(Opcode.CONT, b"x"), 1002, "no message to continue"),
        (
            server_frame(Opcode.TEXT, b"a", fin=False) + server_frame(Opcode.TEXT, b"b"),
            1002,
            "inside",
        ),
        (bytes([0x83, 0]), 1002, "unknown opcode 0x3"),
        (bytes([0x09, 0]), 1002, "control frame"),
        (server_frame(Opcode.TEXT, b"x" * 11), 1009, "11 bytes (limit 10)"),
        (
            server_frame(Opcode.TEXT, b"x" * 6, fin=False) + server_frame(Opcode.CONT, b"y" * 6),
            1009,
            "message of over 12 bytes",
        ),
    ],
)
def test_a_broken_server_frame_is_named_with_the_close_code_to_answer(
    wire: bytes, code: int, words: str
) -> None:
    with pytest.raises(FrameError) as caught:
        FrameReader(10).feed(wire)
    assert caught.value.code == code and words in caught.value.reason


@pytest.mark.parametrize("length", [0, 125, 126, 70_000])
def test_client_frames_are_masked_frames_the_websockets_parser_accepts(length: int) -> None:
    payload = b"z" * length
    reader = StreamReader()
    reader.feed_data(encode_frame(OP_TEXT, payload))
    parser = Frame.parse(reader.read_exact, mask=True)
    try:
        next(parser)
    except StopIteration as done:
        frame = done.value
    else:
        raise AssertionError("the frame was incomplete")
    assert (frame.opcode, frame.data, frame.fin) == (Opcode.TEXT, payload, True)


def test_close_payloads_round_trip_and_an_empty_one_means_no_status() -> None:
    assert close_code(close_payload(1001, "bye")) == 1001
    assert close_code(b"") == NO_STATUS
    ours = (OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING)
    assert [Opcode(op).name for op in ours] == ["TEXT", "BINARY", "CLOSE", "PING"]


@pytest.mark.parametrize("length", [0, 1, 3, 4, 5, 1000, 100_003])
def test_the_mask_is_the_one_the_websockets_package_computes(length: int) -> None:
    from websockets.utils import apply_mask

    payload = bytes(i * 7 % 256 for i in range(length))
    key = b"\x01\x80\xfe\x33"
    assert mask(payload, key) == apply_mask(payload, key)
    assert mask(mask(payload, key), key) == payload
