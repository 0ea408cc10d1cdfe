"""The one WebSocket codec, bytes in and bytes out (and against the ``websockets`` package's frames)."""

from __future__ import annotations

import tracemalloc
import zlib

import pytest
from websockets.frames import Frame, Opcode
from websockets.streams import StreamReader

from harness.wire.ws_frames import (
    NO_STATUS,
    OP_BINARY,
    OP_CLOSE,
    OP_CONT,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    Deflate,
    FrameError,
    FrameReader,
    close_code,
    close_payload,
    deflate_agreed,
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


# -- the codec under every edge: RFC examples, roles, deflate, the fuzzer's knobs ------------------

HELLO_MASKED = bytes.fromhex("818537fa213d7f9f4d5158")  # RFC 6455 §5.7, masked "Hello"


def test_rfc_6455_examples_read_as_the_rfc_says() -> None:
    client = FrameReader(1 << 17)  # reads a server: unmasked frames
    assert client.feed(bytes.fromhex("810548656c6c6f")) == [(OP_TEXT, b"Hello")]
    assert client.feed(bytes.fromhex("010348656c") + bytes.fromhex("80026c6f")) == [
        (OP_TEXT, b"Hello")
    ]
    assert client.feed(bytes.fromhex("890548656c6c6f")) == [(OP_PING, b"Hello")]
    big = bytes(range(256))
    assert client.feed(bytes.fromhex("827e0100") + big) == [(OP_BINARY, big)]
    huge = b"\x07" * 65536
    assert client.feed(bytes.fromhex("827f0000000000010000") + huge) == [(OP_BINARY, huge)]
    server = FrameReader(1000, masked=True)  # reads a client: masked frames, unmasked here
    assert server.feed(HELLO_MASKED) == [(OP_TEXT, b"Hello")]
    assert server.feed(bytes.fromhex("8a8537fa213d7f9f4d5158")) == [(OP_PONG, b"Hello")]


def test_the_encoder_writes_the_rfc_examples_byte_for_byte() -> None:
    key = bytes.fromhex("37fa213d")
    assert encode_frame(OP_TEXT, b"Hello", key=key) == HELLO_MASKED
    assert encode_frame(OP_TEXT, b"Hello", masked=False) == bytes.fromhex("810548656c6c6f")
    assert encode_frame(OP_TEXT, b"Hel", masked=False, fin=False) == bytes.fromhex("010348656c")
    assert encode_frame(OP_BINARY, bytes(256), masked=False)[:4] == bytes.fromhex("827e0100")


def test_a_server_reader_unmasks_fragments_with_control_frames_between_them_cut_anywhere() -> None:
    wire = (
        encode_frame(OP_TEXT, b'{"type":', fin=False)
        + encode_frame(OP_PING, b"p")
        + encode_frame(OP_CONT, b'"response.create"', fin=False)
        + encode_frame(OP_CLOSE, close_payload(1000, "bye"))
        + encode_frame(OP_CONT, b"}")
    )
    for piece in (1, 2, 5, len(wire)):
        got = feed_in_pieces(FrameReader(100, masked=True), wire, piece)
        assert got == [
            (OP_PING, b"p"),
            (OP_CLOSE, b"\x03\xe8bye"),
            (OP_TEXT, b'{"type":"response.create"}'),
        ]


def test_each_side_refuses_the_other_sides_masking() -> None:
    with pytest.raises(FrameError) as caught:
        FrameReader(100, masked=True).feed(encode_frame(OP_TEXT, b"x", masked=False))
    assert (caught.value.code, caught.value.reason) == (
        1002,
        "an unmasked frame (a client must mask its frames)",
    )


def deflated(*messages: bytes, reset: bool = False) -> list[bytes]:
    """Each message compressed as a permessage-deflate sender does (RFC 7692 §7.2.1)."""
    z = zlib.compressobj(wbits=-15)
    out = []
    for m in messages:
        data = z.compress(m) + z.flush(zlib.Z_SYNC_FLUSH)
        assert data.endswith(b"\x00\x00\xff\xff")
        out.append(data[:-4])
        if reset:
            z = zlib.compressobj(wbits=-15)
    return out


def test_rfc_7692_examples_inflate_with_and_without_context_takeover() -> None:
    reader = FrameReader(100, deflate=Deflate())
    # §7.2.3.1: one frame, then the same message in two fragments; §7.2.3.2: the second
    # "Hello" refers to the first one's bytes (context takeover)
    assert reader.feed(bytes.fromhex("c107f248cdc9c90700")) == [(OP_TEXT, b"Hello")]
    assert reader.feed(bytes.fromhex("c105f200110000")) == [(OP_TEXT, b"Hello")]
    assert FrameReader(100, deflate=Deflate()).feed(
        bytes.fromhex("4103f248cd") + bytes.fromhex("8004c9c90700")
    ) == [(OP_TEXT, b"Hello")]
    # §7.2.3.3: a stored (uncompressed) block
    assert FrameReader(100, deflate=Deflate()).feed(
        bytes.fromhex("c10b0005 00faff48656c6c6f00".replace(" ", ""))
    ) == [(OP_TEXT, b"Hello")]


@pytest.mark.parametrize("reset", [False, True])
def test_masked_compressed_messages_inflate_in_both_context_modes(reset: bool) -> None:
    texts = [b'{"type":"response.create","input":"x"}' * 3, b'{"type":"response.create"}' * 2]
    wire = b"".join(encode_frame(OP_TEXT, c, rsv=4) for c in deflated(*texts, reset=reset))
    wire += encode_frame(OP_TEXT, b"plain")  # RSV1 clear: not compressed
    reader = FrameReader(1000, masked=True, deflate=Deflate(reset=reset))
    assert feed_in_pieces(reader, wire, 7) == [
        (OP_TEXT, texts[0]),
        (OP_TEXT, texts[1]),
        (OP_TEXT, b"plain"),
    ]


def test_a_reader_that_resets_cannot_read_a_sender_that_kept_its_context() -> None:
    # Negotiation matters: reading with the wrong setting fails loudly, not with wrong text.
    second = deflated(b"Hello Hello Hello", b"Hello Hello Hello")[1]
    reader = FrameReader(100, deflate=Deflate(reset=True))
    with pytest.raises(FrameError) as caught:
        reader.feed(encode_frame(OP_TEXT, second, masked=False, rsv=4))
    assert caught.value.code == 1002 and "does not inflate" in caught.value.reason


def test_an_inflated_message_over_the_limit_is_refused_with_1009() -> None:
    [bomb] = deflated(b"a" * 10_000)
    with pytest.raises(FrameError) as caught:
        FrameReader(1000, deflate=Deflate()).feed(encode_frame(OP_TEXT, bomb, masked=False, rsv=4))
    assert caught.value.code == 1009 and "once inflated" in caught.value.reason


@pytest.mark.parametrize(
    ("wire", "code", "reason"),
    [
        (
            encode_frame(OP_PING, b"", masked=False, rsv=4),
            1002,
            "a control frame with the compression bit (RSV1) set",
        ),
        (
            encode_frame(OP_TEXT, b"a", masked=False, fin=False)
            + encode_frame(OP_CONT, b"b", masked=False, rsv=4),
            1002,
            "a continuation frame with the compression bit (RSV1) set",
        ),
        (
            encode_frame(OP_TEXT, b"a", masked=False, rsv=2),
            1002,
            "a frame with reserved bits set (no extension was agreed)",
        ),
    ],
)
def test_compression_bits_where_deflate_allows_none(wire: bytes, code: int, reason: str) -> None:
    with pytest.raises(FrameError) as caught:
        FrameReader(100, deflate=Deflate()).feed(wire)
    assert (caught.value.code, caught.value.reason) == (code, reason)


def test_without_deflate_agreed_the_compression_bit_is_a_reserved_bit() -> None:
    with pytest.raises(FrameError) as caught:
        FrameReader(100).feed(bytes.fromhex("c107f248cdc9c90700"))
    assert caught.value.reason == "a frame with reserved bits set (no extension was agreed)"


@pytest.mark.parametrize(
    ("payload", "code", "reason"),
    [
        (b"\x03", 1002, "a close frame with a 1-byte payload (a code takes 2)"),
        (close_payload(999), 1002, "a close frame with the code 999, which no peer may send"),
        (close_payload(1005), 1002, "a close frame with the code 1005, which no peer may send"),
        (close_payload(5000), 1002, "a close frame with the code 5000, which no peer may send"),
        (close_payload(1000, b"\xff"), 1007, "a close frame whose reason is not valid UTF-8"),
    ],
)
def test_a_broken_close_frame_is_named(payload: bytes, code: int, reason: str) -> None:
    with pytest.raises(FrameError) as caught:
        FrameReader(100).feed(encode_frame(OP_CLOSE, payload, masked=False))
    assert (caught.value.code, caught.value.reason) == (code, reason)


@pytest.mark.parametrize("code", [1000, 1001, 1011, 1014, 3000, 4999])
def test_close_codes_a_peer_may_send_come_through(code: int) -> None:
    wire = encode_frame(OP_CLOSE, close_payload(code, "é"), masked=False)
    [(op, payload)] = FrameReader(100).feed(wire)
    assert (op, close_code(payload)) == (OP_CLOSE, code)


def test_the_encoders_lies_are_refused_by_the_reader_with_the_precise_error() -> None:
    # the fuzzer's knobs: a length that lies, a fragmented control frame, an unknown opcode
    lying = encode_frame(OP_TEXT, b"{", masked=False, length=2**40)
    with pytest.raises(FrameError) as caught:
        FrameReader(10**6).feed(lying)
    assert caught.value.reason == "a frame of 1,099,511,627,776 bytes (limit 1,000,000)"
    short = encode_frame(OP_TEXT, b"{", masked=False, length=70_000)
    assert short[:4] == bytes((0x81, 127, 0, 0)) and FrameReader(10**6).feed(short) == []
    with pytest.raises(FrameError, match="fragmented or oversized control"):
        FrameReader(100).feed(encode_frame(OP_PING, b"p", masked=False, fin=False))
    with pytest.raises(FrameError, match="unknown opcode 0xb"):
        FrameReader(100).feed(encode_frame(0xB, b"x", masked=False))


def test_deflate_agreed_reads_the_servers_extension_answer() -> None:
    assert deflate_agreed("") is None
    assert deflate_agreed("permessage-deflate") == (Deflate(False), Deflate(False))
    assert deflate_agreed(
        "permessage-deflate; client_no_context_takeover; server_max_window_bits=10"
    ) == (Deflate(True), Deflate(False))
    assert deflate_agreed("Permessage-Deflate; Server_No_Context_Takeover") == (
        Deflate(False),
        Deflate(True),
    )


def test_what_came_before_a_broken_frame_in_the_same_read_is_kept_on_the_error() -> None:
    wire = (
        encode_frame(OP_TEXT, b'{"type":"response.created"}', masked=False)
        + encode_frame(OP_PING, b"p", masked=False)
        + encode_frame(OP_CLOSE, close_payload(999), masked=False)
        + encode_frame(OP_TEXT, b"never read", masked=False)
    )
    with pytest.raises(FrameError) as caught:
        FrameReader(100).feed(wire)
    assert caught.value.before == [(OP_TEXT, b'{"type":"response.created"}'), (OP_PING, b"p")]
    assert caught.value.code == 1002


# -- frame_end: where a kernel-stamping reader ends a read before the first token (§1.9) ---


def _server(payload: bytes) -> bytes:
    return encode_frame(OP_TEXT, payload, masked=False)


def test_frame_end_stops_at_the_first_whole_frame_of_the_waiting_bytes() -> None:
    first, second = _server(b'{"type":"a"}'), _server(b'{"type":"b"}')
    assert FrameReader(1 << 20).frame_end(first + second) == len(first)
    # a masked (client's) frame counts its key; a 126-length head its two length bytes
    masked = encode_frame(OP_TEXT, b"x" * 200, key=b"abcd")
    assert FrameReader(1 << 20, masked=True).frame_end(masked + first) == len(masked)


def test_frame_end_of_a_frame_split_over_two_reads_counts_what_the_reader_already_holds() -> None:
    first, second = _server(b"y" * 300), _server(b"z")
    for cut in (1, 3, 10, len(first) - 1):  # inside the head, its length, the payload
        reader = FrameReader(1 << 20)
        assert reader.feed(first[:cut]) == []
        assert reader.frame_end(first[cut:] + second) == len(first) - cut


def test_frame_end_is_zero_until_the_frame_is_whole() -> None:
    big = _server(b"w" * 70_000)  # an 8-byte length, larger than one read here
    assert FrameReader(1 << 20).frame_end(big[:1]) == 0
    assert FrameReader(1 << 20).frame_end(big[:5]) == 0  # the length not whole
    assert FrameReader(1 << 20).frame_end(big[:4096]) == 0
    reader = FrameReader(1 << 20)
    reader.feed(big[:4096])
    assert reader.frame_end(big[4096:-1]) == 0
    assert reader.frame_end(big[4096:]) == len(big) - 4096


def test_frame_end_of_a_large_frame_in_many_reads_copies_no_buffered_chunk() -> None:
    """Before each read of a large frame, ``frame_end`` needs its 14-byte head: joining the
    chunks already buffered to get it copied them all, read after read (quadratic).  Measured
    as memory: with 4 MiB buffered, one call allocates far less than one copy of it."""
    big = _server(b"w" * (8 << 20))
    reader = FrameReader(16 << 20)
    for i in range(0, 4 << 20, 64 << 10):
        reader.feed(big[i : i + (64 << 10)])
    rest = big[4 << 20 : (4 << 20) + (64 << 10)]
    tracemalloc.start()
    try:
        assert reader.frame_end(rest) == 0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak


def test_frame_end_reads_a_head_split_over_many_small_reads() -> None:
    """A head that came a byte at a read: its bytes are gathered across the chunks."""
    frame, after = _server(b"v" * 70_000), _server(b"u")
    for held in (3, 9, 13, 20):
        reader = FrameReader(1 << 20)
        for i in range(held):
            assert reader.feed(frame[i : i + 1]) == []
        assert reader.frame_end(frame[held:] + after) == len(frame) - held
