"""WebSocket frames as a client sees them (RFC 6455 §5), without I/O.

The ``ws`` transports read every event of every response through :class:`FrameReader`,
so it is written for the common case: a read holding one or more small, complete,
unmasked text frames is parsed in one pass with no copy but the payload slice; a frame
that spans reads waits until the bytes it needs have all arrived (no re-parsing of a
growing buffer).  What the client sends (one request per turn, a pong, a close) is masked
as one big-integer XOR: a few µs even for a multi-megabyte full-history request.

Errors are :class:`FrameError` with the close code the client answers with.
"""

from __future__ import annotations

import os

OP_CONT = 0x0
OP_TEXT = 0x1
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA
_DATA = (OP_TEXT, OP_BINARY)
_CONTROL = (OP_CLOSE, OP_PING, OP_PONG)

#: a close frame without a status code (RFC 6455 §7.1.5)
NO_STATUS = 1005


class FrameError(Exception):
    """The server broke the framing rules; ``code`` is the close code to answer with."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class FrameReader:
    """Server-to-client frames in, whole messages and control frames out.

    :meth:`feed` returns ``(opcode, payload)`` per complete data message (fragments
    joined, opcode of the first one) and per control frame, in order.
    """

    __slots__ = ("_chunks", "_frag_len", "_frag_op", "_frags", "_have", "_need", "max_size")

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        #: bytes of an incomplete frame, and how many it needs before parsing can go on
        self._chunks: list[bytes] = []
        self._have = 0
        self._need = 0
        self._frag_op = 0
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
        n = len(data)
        pos = 0
        while True:
            left = n - pos
            if left < 2:
                need = 2
                break
            b0 = data[pos]
            b1 = data[pos + 1]
            length = b1 & 0x7F
            head = 2
            if length == 126:
                head = 4
                if left < 4:
                    need = 4
                    break
                length = int.from_bytes(data[pos + 2 : pos + 4], "big")
            elif length == 127:
                head = 10
                if left < 10:
                    need = 10
                    break
                length = int.from_bytes(data[pos + 2 : pos + 10], "big")
            if b0 & 0x70:
                raise FrameError(1002, "a frame with reserved bits set (no extension was agreed)")
            if b1 & 0x80:
                raise FrameError(1002, "a masked frame (a server must not mask its frames)")
            if length > self.max_size:
                raise FrameError(1009, f"a frame of {length:,} bytes (limit {self.max_size:,})")
            end = pos + head + length
            if end > n:
                need = head + length
                break
            payload = data[pos + head : end]
            pos = end
            self._frame(b0 & 0x80, b0 & 0x0F, payload, out)
        if left:
            rest = data[pos:]
            self._chunks = [rest]
            self._have = left
            self._need = need
        return out

    def _frame(self, fin: int, op: int, payload: bytes, out: list[tuple[int, bytes]]) -> None:
        if op in _DATA and not self._frags:
            if fin:
                out.append((op, payload))
            else:
                self._frag_op, self._frags, self._frag_len = op, [payload], len(payload)
        elif op == OP_CONT and self._frags:
            self._frags.append(payload)
            self._frag_len += len(payload)
            if self._frag_len > self.max_size:
                raise FrameError(
                    1009, f"a message of over {self._frag_len:,} bytes (limit {self.max_size:,})"
                )
            if fin:
                out.append((self._frag_op, b"".join(self._frags)))
                self._frags = []
        elif op in _CONTROL:
            if not fin or len(payload) > 125:
                raise FrameError(1002, "a fragmented or oversized control frame")
            out.append((op, payload))
        elif op == OP_CONT:
            raise FrameError(1002, "a continuation frame with no message to continue")
        elif op in _DATA:
            raise FrameError(1002, "a new message inside a fragmented one")
        else:
            raise FrameError(1002, f"a frame with the unknown opcode {op:#x}")


def encode_frame(op: int, payload: bytes) -> bytes:
    """One final, masked client frame."""
    n = len(payload)
    if n < 126:
        head = bytes((0x80 | op, 0x80 | n))
    elif n < 1 << 16:
        head = bytes((0x80 | op, 0x80 | 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x80 | op, 0x80 | 127)) + n.to_bytes(8, "big")
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


def close_payload(code: int, reason: str = "") -> bytes:
    return code.to_bytes(2, "big") + reason.encode()


def close_code(payload: bytes) -> int:
    """The status code of a received close frame (:data:`NO_STATUS` when it has none)."""
    return int.from_bytes(payload[:2], "big") if len(payload) >= 2 else NO_STATUS
