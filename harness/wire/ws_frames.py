"""The project's one WebSocket codec (RFC 6455 §5, RFC 7692), without I/O.

Every edge that speaks or reads WebSocket frames goes through this module: the
client transports, the recording proxy's observer (both
directions, compressed or not), the fuzzer and the self-benchmark's bare client and
server.  The ``websockets`` package still runs the clients' opening handshake; what
comes after the 101 is parsed and built here.

:class:`FrameReader` is written for the client's common case: a read holding one or
more small, complete, unmasked text frames is parsed in one pass with no copy but the
payload slice; a frame that spans reads waits until the bytes it needs have all arrived
(no re-parsing of a growing buffer).  :func:`encode_frame` masks as one big-integer
XOR: a few µs even for a multi-megabyte full-history request; its keyword arguments
build the malformed frames the fuzzer sends.

Errors are :class:`FrameError` with the close code the reading side answers with.
"""

from __future__ import annotations

import base64
import hashlib
import os
import zlib
from dataclasses import dataclass

OP_CONT = 0x0
OP_TEXT = 0x1
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA
_DATA = (OP_TEXT, OP_BINARY)
_CONTROL = (OP_CLOSE, OP_PING, OP_PONG)
_FIN = 0x80
_RSV1 = 0x40
_MASKED = 0x80

#: a close frame without a status code (RFC 6455 §7.1.5)
NO_STATUS = 1005
#: the close codes a peer may send (RFC 6455 §7.4; 1012-1014 registered since)
_SENDABLE = frozenset((1000, 1001, 1002, 1003, *range(1007, 1015)))
#: what permessage-deflate strips from the end of every compressed message (RFC 7692 §7.2.1)
_DEFLATE_TAIL = b"\x00\x00\xff\xff"
#: appended to a client's key for the server's accept value (RFC 6455 §1.3)
_KEY_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def accept_key(key: str | bytes) -> str:
    """``Sec-WebSocket-Accept`` for the client's ``Sec-WebSocket-Key`` (RFC 6455 §4.2.2)."""
    raw = key.encode() if isinstance(key, str) else key
    return base64.b64encode(hashlib.sha1(raw + _KEY_GUID).digest()).decode()


def valid_key(key: bytes) -> bool:
    """A ``Sec-WebSocket-Key``: 16 bytes in base64 (RFC 6455 §4.1, item 7)."""
    try:
        return len(base64.b64decode(key, validate=True)) == 16
    except ValueError:
        return False


class FrameError(Exception):
    """The peer broke the framing rules; ``code`` is the close code to answer with.

    ``before``: what :meth:`FrameReader.feed` completed from the same bytes ahead of the
    broken frame (an event and the bad close frame behind it often come in one read).
    """

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason
        self.before: list[tuple[int, bytes]] = []


@dataclass(frozen=True, slots=True)
class Deflate:
    """permessage-deflate as agreed for one direction: ``reset`` when its sender asked for no
    context takeover (each message compressed on its own); ``window_bits``: the LZ77 window
    its sender compresses with at most, and so the one its reader keeps (RFC 7692 §7.1.2)."""

    reset: bool = False
    window_bits: int = 15


def deflate_agreed(extensions: str) -> tuple[Deflate, Deflate] | None:
    """The deflate settings of (client-to-server, server-to-client) frames from the server's
    ``Sec-WebSocket-Extensions`` answer; None when permessage-deflate was not agreed."""
    ext = extensions.lower()
    if "permessage-deflate" not in ext:
        return None
    return (
        Deflate("client_no_context_takeover" in ext),
        Deflate("server_no_context_takeover" in ext),
    )


def negotiate_deflate(offers: str, window_bits: int = 15) -> tuple[str, Deflate, Deflate] | None:
    """A server's answer to the client's ``Sec-WebSocket-Extensions`` offers (RFC 7692 §7.1).

    The first permessage-deflate offer whose parameters it can honour is accepted:
    ``(the answer's header value, client-to-server settings, server-to-client settings)``.
    The server compresses with at most ``window_bits`` or the smaller window the client
    asked for (it may say so unasked, §7.1.2.1).  A client that offers
    ``client_max_window_bits`` is held to ``window_bits`` too, so the server's inflater
    keeps no more; one that does not offer it may use 15 bits, and the inflater keeps those.
    None: no offer it can accept (the connection goes on uncompressed).
    """
    for offer in offers.split(","):
        name, *params = (p.strip() for p in offer.split(";"))
        if name.lower() != "permessage-deflate":
            continue
        seen: dict[str, str | None] = {}
        for param in params:
            key, _, value = param.partition("=")
            key = key.strip().lower()
            if key in seen:
                break
            seen[key] = value.strip().strip('"') or None
        else:
            if not set(seen) <= _DEFLATE_PARAMS:
                continue
            # zlib cannot compress within a 256-byte window: an offer asking for 8 is declined.
            server_bits = _window_bits(seen.get("server_max_window_bits", str(window_bits)))
            if server_bits is None or server_bits < 9:
                continue
            server_bits = min(server_bits, window_bits)
            answer = ["permessage-deflate", f"server_max_window_bits={server_bits}"]
            client_bits = 15
            if "client_max_window_bits" in seen:
                # No value: the client takes whatever the answer names (§7.1.2.2).
                offered = _window_bits(seen["client_max_window_bits"] or "15")
                if offered is None:
                    continue
                client_bits = min(offered, window_bits)
                answer.append(f"client_max_window_bits={client_bits}")
            for flag in ("server_no_context_takeover", "client_no_context_takeover"):
                if flag in seen:
                    answer.append(flag)
            return (
                "; ".join(answer),
                Deflate("client_no_context_takeover" in seen, client_bits),
                Deflate("server_no_context_takeover" in seen, server_bits),
            )
    return None


def _window_bits(value: str | None) -> int | None:
    """A ``*_max_window_bits`` value (8-15), None when missing or out of range."""
    if value is None or not value.isdigit() or not 8 <= int(value) <= 15:
        return None
    return int(value)


_DEFLATE_PARAMS = frozenset(
    (
        "server_no_context_takeover",
        "client_no_context_takeover",
        "server_max_window_bits",
        "client_max_window_bits",
    )
)


class Compressor:
    """permessage-deflate of one sending direction: a message in, its compressed payload out
    (to send with RSV1 set on its first frame, RFC 7692 §7.2.1), within the agreed window."""

    __slots__ = ("_deflate", "_mem_level", "_wbits", "_z")

    def __init__(self, deflate: Deflate, mem_level: int = 8) -> None:
        self._deflate = deflate
        self._wbits = -deflate.window_bits
        self._mem_level = mem_level
        self._z = zlib.compressobj(wbits=self._wbits, memLevel=mem_level)

    def compress(self, message: bytes) -> bytes:
        data = self._z.compress(message) + self._z.flush(zlib.Z_SYNC_FLUSH)
        if self._deflate.reset:
            self._z = zlib.compressobj(wbits=self._wbits, memLevel=self._mem_level)
        return data[:-4] if data.endswith(_DEFLATE_TAIL) else data


class FrameReader:
    """Frames of one direction in, whole messages and control frames out.

    :meth:`feed` returns ``(opcode, payload)`` per complete data message (fragments
    joined, opcode of the first one; inflated when it was compressed) and per control
    frame, in order.  ``masked``: the frames must be masked (a server reading its
    client) or must not be (a client reading its server).  ``deflate``: the
    permessage-deflate settings of this direction, when the extension was agreed.
    """

    __slots__ = (
        "_chunks",
        "_deflate",
        "_frag_len",
        "_frag_op",
        "_frag_z",
        "_frags",
        "_have",
        "_inflater",
        "_mask_bit",
        "_need",
        "max_size",
    )

    def __init__(
        self, max_size: int, *, masked: bool = False, deflate: Deflate | None = None
    ) -> None:
        self.max_size = max_size
        self._mask_bit = _MASKED if masked else 0
        self._deflate = deflate
        self._inflater = zlib.decompressobj(-deflate.window_bits) if deflate is not None else None
        #: bytes of an incomplete frame, and how many it needs before parsing can go on
        self._chunks: list[bytes] = []
        self._have = 0
        self._need = 0
        self._frag_op = 0
        self._frag_z = False
        self._frags: list[bytes] = []
        self._frag_len = 0

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        if self._chunks:
            self._chunks.append(data)
            self._have += len(data)
            if self._have < self._need:
                return []
            data = b"".join(self._chunks)
            self._chunks = []
        out: list[tuple[int, bytes]] = []
        try:
            self._parse(data, out)
        except FrameError as exc:
            exc.before = out
            raise
        return out

    def frame_end(self, data: bytes) -> int:
        """How many bytes of ``data``, the next bytes :meth:`feed` would take, complete the frame
        being read; 0 when they do not complete it (or its head is not whole yet).

        A kernel-stamping reader consumes exactly that many, so that a frame's read ends in
        the segment that carried the frame's last byte (docs/metrics.md §1.9).  Nothing is
        checked here: :meth:`feed` judges the frame when it gets it.
        """
        chunks = self._chunks
        have = self._have if chunks else 0
        head = data
        if have:
            # A head is at most 14 bytes: joining every buffered chunk for it, read after read
            # of a large frame, would copy the frame over and over.
            head = chunks[0]
            if len(head) < 14:
                head = b"".join(chunks)[:14] if have < 14 else _first_bytes(chunks, 14)
                head += data[:14]
        if len(head) < 2:
            return 0
        length = head[1] & 0x7F
        size = 2
        if length > 125:
            size = 4 if length == 126 else 10
            if len(head) < size:
                return 0
            length = int.from_bytes(head[2:size], "big")
        end = size + (4 if self._mask_bit else 0) + length - have
        return end if end <= len(data) else 0

    def _parse(self, data: bytes, out: list[tuple[int, bytes]]) -> None:
        n = len(data)
        pos = 0
        mask_bit = self._mask_bit
        key_len = 4 if mask_bit else 0
        max_size = self.max_size
        frame = self._frame
        while True:
            left = n - pos
            if left < 2:
                need = 2
                break
            b0 = data[pos]
            b1 = data[pos + 1]
            length = b1 & 0x7F
            head = 2
            if length > 125:  # 126: a 2-byte length follows, 127: an 8-byte one
                head = 4 if length == 126 else 10
                if left < head:
                    need = head
                    break
                length = int.from_bytes(data[pos + 2 : pos + head], "big")
            if b0 & 0x70 or b1 & 0x80 != mask_bit:
                self._check_head(b0, b1)
            if length > max_size:
                raise FrameError(1009, f"a frame of {length:,} bytes (limit {max_size:,})")
            head += key_len
            end = pos + head + length
            if end > n:
                need = head + length
                break
            if key_len:
                payload = mask(data[pos + head : end], data[pos + head - 4 : pos + head])
            else:
                payload = data[pos + head : end]
            pos = end
            if b0 == 0x81 and not self._frags:
                out.append((OP_TEXT, payload))  # the common case: a whole, plain text message
            else:
                frame(b0, payload, out)
        if left:
            rest = data[pos:]
            self._chunks = [rest]
            self._have = left
            self._need = need

    def _check_head(self, b0: int, b1: int) -> None:
        """Masking as this side expects, and reserved bits only where an extension allows."""
        if b1 & 0x80 != self._mask_bit:
            raise FrameError(
                1002,
                "an unmasked frame (a client must mask its frames)"
                if self._mask_bit
                else "a masked frame (a server must not mask its frames)",
            )
        if not b0 & 0x70:
            return
        # RSV1 marks a compressed message: on its first frame, and only once deflate was agreed.
        op = b0 & 0x0F
        if b0 & 0x70 == _RSV1 and self._deflate is not None and op in _DATA:
            return
        if b0 & 0x70 == _RSV1 and self._deflate is not None:
            what = "a control frame" if op in _CONTROL else "a continuation frame"
            raise FrameError(1002, f"{what} with the compression bit (RSV1) set")
        raise FrameError(1002, "a frame with reserved bits set (no extension was agreed)")

    def _frame(self, b0: int, payload: bytes, out: list[tuple[int, bytes]]) -> None:
        op = b0 & 0x0F
        fin = b0 & 0x80
        if op in _DATA and not self._frags:
            if fin:
                if b0 & 0x40:
                    payload = self._inflate(payload)
                out.append((op, payload))
            else:
                self._frag_op, self._frags, self._frag_len = op, [payload], len(payload)
                self._frag_z = bool(b0 & _RSV1)
        elif op == OP_CONT and self._frags:
            self._frags.append(payload)
            self._frag_len += len(payload)
            if self._frag_len > self.max_size:
                raise FrameError(
                    1009, f"a message of over {self._frag_len:,} bytes (limit {self.max_size:,})"
                )
            if fin:
                message = b"".join(self._frags)
                self._frags = []
                out.append((self._frag_op, self._inflate(message) if self._frag_z else message))
        elif op in _CONTROL:
            if not fin or len(payload) > 125:
                raise FrameError(1002, "a fragmented or oversized control frame")
            if op == OP_CLOSE:
                check_close(payload)
            out.append((op, payload))
        elif op == OP_CONT:
            raise FrameError(1002, "a continuation frame with no message to continue")
        elif op in _DATA:
            raise FrameError(1002, "a new message inside a fragmented one")
        else:
            raise FrameError(1002, f"a frame with the unknown opcode {op:#x}")

    def _inflate(self, message: bytes) -> bytes:
        inflater = self._inflater
        assert inflater is not None and self._deflate is not None  # RSV1 was checked
        try:
            data = inflater.decompress(message + _DEFLATE_TAIL, self.max_size)
        except zlib.error as exc:
            raise FrameError(1002, f"a compressed message that does not inflate ({exc})") from None
        if inflater.unconsumed_tail:
            raise FrameError(
                1009, f"a message of over {self.max_size:,} bytes once inflated (limit)"
            )
        if self._deflate.reset:
            self._inflater = zlib.decompressobj(-self._deflate.window_bits)
        return data


def encode_frame(
    op: int,
    payload: bytes,
    *,
    masked: bool = True,
    fin: bool = True,
    rsv: int = 0,
    length: int | None = None,
    key: bytes | None = None,
) -> bytes:
    """One frame: masked (a client's, with a random ``key`` unless given) or not (a server's).

    The rest builds what a peer must refuse, for the fuzzer: ``fin=False`` on a control
    frame, ``rsv`` bits (0-7) nobody agreed, ``length`` that lies about the payload's.
    """
    n = len(payload) if length is None else length
    b0 = (_FIN if fin else 0) | (rsv << 4) | op
    m = _MASKED if masked else 0
    if n < 126:
        head = bytes((b0, m | n))
    elif n < 1 << 16:
        head = bytes((b0, m | 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((b0, m | 127)) + n.to_bytes(8, "big")
    if not masked:
        return head + payload
    if key is None:
        key = os.urandom(4)
    return head + key + mask(payload, key)


def mask(payload: bytes, key: bytes) -> bytes:
    """``payload`` XOR the 4-byte ``key`` repeated (RFC 6455 §5.3); its own inverse."""
    n = len(payload)
    if not n:
        return b""
    repeated = (key * (n // 4 + 1))[:n]
    masked = int.from_bytes(payload, "little") ^ int.from_bytes(repeated, "little")
    return masked.to_bytes(n, "little")


def close_payload(code: int, reason: str | bytes = "") -> bytes:
    """A close frame's payload; a ``bytes`` reason is sent as is (the fuzzer's invalid UTF-8)."""
    return code.to_bytes(2, "big") + (reason if isinstance(reason, bytes) else reason.encode())


def close_code(payload: bytes) -> int:
    """The status code of a received close frame (:data:`NO_STATUS` when it has none)."""
    return int.from_bytes(payload[:2], "big") if len(payload) >= 2 else NO_STATUS


def check_close(payload: bytes) -> None:
    """A close frame's payload is empty, or a code a peer may send and a UTF-8 reason."""
    if not payload:
        return
    if len(payload) == 1:
        raise FrameError(1002, "a close frame with a 1-byte payload (a code takes 2)")
    code = close_code(payload)
    if code not in _SENDABLE and not 3000 <= code <= 4999:
        raise FrameError(1002, f"a close frame with the code {code}, which no peer may send")
    try:
        payload[2:].decode()
    except UnicodeDecodeError:
        raise FrameError(1007, "a close frame whose reason is not valid UTF-8") from None


def _first_bytes(chunks: list[bytes], n: int) -> bytes:
    """The first ``n`` bytes of ``chunks`` (which hold at least that many), joining no more of
    them than it takes."""
    size = 0
    for i, chunk in enumerate(chunks):
        size += len(chunk)
        if size >= n:
            return b"".join(chunks[: i + 1])[:n]
    return b"".join(chunks)
