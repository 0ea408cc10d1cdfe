"""The server side of the one WebSocket codec: the accept key, deflate negotiation, compression.

Bytes and strings in and out; the compressed messages are also read by the ``websockets``
package's own permessage-deflate, an implementation that is not ours.
"""

from __future__ import annotations

import random

import pytest
from websockets.extensions.permessage_deflate import PerMessageDeflate
from websockets.frames import Frame, Opcode

from harness.wire.ws_frames import (
    OP_TEXT,
    Compressor,
    Deflate,
    FrameError,
    FrameReader,
    accept_key,
    encode_frame,
    negotiate_deflate,
    valid_key,
)


def test_accept_key_is_the_rfc_6455_example() -> None:
    # RFC 6455 §1.3's worked example.
    assert accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    assert accept_key(b"dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        (b"dGhlIHNhbXBsZSBub25jZQ==", True),
        (b"", False),
        (b"c2hvcnQ=", False),  # 5 bytes
        (b"not base64 at all!!", False),
    ],
)
def test_valid_key_wants_sixteen_bytes_of_base64(key: bytes, ok: bool) -> None:
    assert valid_key(key) is ok


@pytest.mark.parametrize(
    ("offer", "answer", "to_server", "to_client"),
    [
        # websockets' default offer: the server limits its own window unasked (RFC 7692 §7.1.2.1)
        # and the client's to 4 KiB, so the server's inflater holds 4 KiB too
        (
            "permessage-deflate; client_max_window_bits",
            "permessage-deflate; server_max_window_bits=12; client_max_window_bits=12",
            Deflate(window_bits=12),
            Deflate(window_bits=12),
        ),
        # no client_max_window_bits offered: the answer must not name it (§7.1.2.2)
        (
            "permessage-deflate; server_no_context_takeover; client_no_context_takeover",
            "permessage-deflate; server_max_window_bits=12; server_no_context_takeover; "
            "client_no_context_takeover",
            Deflate(reset=True),
            Deflate(reset=True, window_bits=12),
        ),
        (
            "permessage-deflate; server_max_window_bits=10",
            "permessage-deflate; server_max_window_bits=10",
            Deflate(),
            Deflate(window_bits=10),
        ),
        (
            "permessage-deflate; server_max_window_bits=9; client_max_window_bits=11",
            "permessage-deflate; server_max_window_bits=9; client_max_window_bits=11",
            Deflate(window_bits=11),
            Deflate(window_bits=9),
        ),
        (
            "permessage-deflate; client_max_window_bits=15",
            "permessage-deflate; server_max_window_bits=12; client_max_window_bits=12",
            Deflate(window_bits=12),
            Deflate(window_bits=12),
        ),
        # the first offer asks for a window zlib cannot honour, the second is taken
        (
            "permessage-deflate; server_max_window_bits=8, permessage-deflate",
            "permessage-deflate; server_max_window_bits=12",
            Deflate(),
            Deflate(window_bits=12),
        ),
    ],
)
def test_negotiation_accepts_the_first_offer_it_can_honour(
    offer: str, answer: str, to_server: Deflate, to_client: Deflate
) -> None:
    assert negotiate_deflate(offer, 12) == (answer, to_server, to_client)


@pytest.mark.parametrize(
    "offer",
    [
        "x-webkit-deflate-frame",
        "permessage-deflate; unknown_param",
        "permessage-deflate; server_no_context_takeover; server_no_context_takeover",
        "permessage-deflate; server_max_window_bits",  # a value is required
        "permessage-deflate; client_max_window_bits=16",
        "permessage-deflate; server_max_window_bits=8",
    ],
)
def test_offers_it_cannot_honour_leave_the_connection_uncompressed(offer: str) -> None:
    assert negotiate_deflate(offer, 12) is None


@pytest.mark.parametrize("reset", [False, True])
def test_compressed_messages_read_back_by_our_reader_and_by_websockets(reset: bool) -> None:
    texts = [b'{"type":"response.output_text.delta","delta":" tok"}' * 3] * 3 + [b""]
    compressor = Compressor(Deflate(reset, window_bits=12), mem_level=5)
    payloads = [compressor.compress(t) for t in texts]
    # With context takeover, a repeated message is a back-reference: much shorter.
    assert (len(payloads[1]) < len(payloads[0])) is not reset
    wire = b"".join(encode_frame(OP_TEXT, p, masked=False, rsv=4) for p in payloads)
    reader = FrameReader(10_000, deflate=Deflate(reset))
    assert reader.feed(wire) == [(OP_TEXT, t) for t in texts]
    theirs = PerMessageDeflate(
        remote_no_context_takeover=reset,
        local_no_context_takeover=False,
        remote_max_window_bits=12,
        local_max_window_bits=15,
    )
    for text, payload in zip(texts, payloads, strict=True):
        frame = Frame(Opcode.TEXT, payload, rsv1=True)
        assert theirs.decode(frame).data == text


def _incompressible(n: int) -> bytes:
    """``n`` bytes with no repeat inside them: a second copy can only refer back a full ``n``."""
    return random.Random(n).randbytes(n)


@pytest.mark.parametrize("bits", [9, 10, 11])
def test_the_compressor_keeps_to_the_agreed_window(bits: int) -> None:
    """A client inflating with the window it was told (here websockets' own inflater) reads every
    message: a compressor with a wider window refers further back than the client keeps."""
    agreed = negotiate_deflate(f"permessage-deflate; server_max_window_bits={bits}", 12)
    assert agreed is not None
    compressor = Compressor(agreed[2], mem_level=5)
    theirs = PerMessageDeflate(
        remote_no_context_takeover=False,
        local_no_context_takeover=False,
        remote_max_window_bits=bits,
        local_max_window_bits=15,
    )
    text = _incompressible(3000)
    for _ in range(3):
        frame = Frame(Opcode.TEXT, compressor.compress(text), rsv1=True)
        assert theirs.decode(frame).data == text


def test_the_reader_inflates_with_the_agreed_window_only() -> None:
    """The server's inflater keeps the 4 KiB it asked the client for: a client that compresses
    with a wider window than agreed is refused (1002), not given 32 KiB per connection."""
    text = _incompressible(6000)
    wide = Compressor(Deflate())
    wire = b"".join(encode_frame(OP_TEXT, wide.compress(text), rsv=4) for _ in range(2))
    assert FrameReader(1 << 20, masked=True, deflate=Deflate()).feed(wire) == [(OP_TEXT, text)] * 2
    with pytest.raises(FrameError) as caught:
        FrameReader(1 << 20, masked=True, deflate=Deflate(window_bits=12)).feed(wire)
    assert caught.value.code == 1002
    narrow = Compressor(Deflate(window_bits=12))
    wire = b"".join(encode_frame(OP_TEXT, narrow.compress(text), rsv=4) for _ in range(2))
    reader = FrameReader(1 << 20, masked=True, deflate=Deflate(window_bits=12))
    assert reader.feed(wire) == [(OP_TEXT, text)] * 2
