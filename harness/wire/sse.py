"""Incremental server-sent-events decoder and encoder (sans-I/O).

:class:`SSEDecoder` turns arbitrarily chunked bytes into :class:`SSEMessage` s,
following the WHATWG event-stream parsing rules that matter for the Responses API:

* lines end in CR, LF or CRLF, and a CRLF may be split across two chunks;
* ``data:`` lines of one event are joined with ``"\\n"``;
* lines starting with ``:`` are comments; one space after the field colon is dropped;
* a blank line dispatches the event; an event without any ``data`` field is not dispatched;
* ``id`` persists across events (it is the "last event id"), ``retry`` and unknown
  fields are ignored;
* a leading UTF-8 BOM is skipped; invalid UTF-8 is replaced, never fatal.

Lines are split as bytes, so a multi-byte character split across chunks is reassembled.
An event's data stays bytes (:attr:`SSEMessage.raw`): the JSON parser reads bytes, so the
hot path never makes a ``str`` of it; :attr:`SSEMessage.data` decodes it for whoever wants
text.  ``data: [DONE]`` is passed through as ordinary data: whether it
ends the stream is the caller's decision (docs/protocol.md §1.3).

The decoder is a hot path (thousands of events per second per process): it splits
on line endings with ``bytes`` methods and never loops over single bytes in Python.
"""

from __future__ import annotations

from typing import Any

import orjson

from harness.wire.errors import SSEError

_BOM = b"\xef\xbb\xbf"
#: the largest event (or unfinished line) a decoder holds: a Responses event that carries a
#: whole 1,000,000-token answer is about 5 MiB; a peer sending more is not a Responses server
MAX_EVENT_BYTES = 32 * 1024 * 1024


class SSEMessage:
    """One dispatched event: ``event`` is the ``event:`` field (``None`` if absent), ``raw``
    its data lines joined with LF, as bytes."""

    __slots__ = ("event", "id", "raw")

    def __init__(self, event: str | None, data: bytes | str, id: str | None = None) -> None:
        self.event = event
        self.raw = data.encode() if isinstance(data, str) else data
        self.id = id

    @property
    def data(self) -> str:
        """The data as text (invalid UTF-8 replaced)."""
        return self.raw.decode("utf-8", "replace")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SSEMessage):
            return NotImplemented
        return (self.event, self.data, self.id) == (other.event, other.data, other.id)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        return f"SSEMessage({self.event!r}, {self.data!r}, {self.id!r})"


class SSEDecoder:
    """Feed bytes, get complete messages.

    ``close()`` ends the stream.  Per the SSE spec an event not terminated by a
    blank line is dropped; with ``strict=True`` ``close()`` raises :class:`SSEError`
    instead, so a transport can tell a truncated stream from a clean end.
    """

    __slots__ = (
        "_buf",
        "_data",
        "_data_bytes",
        "_event",
        "_last_id",
        "_pending",
        "_skip_lf",
        "_started",
        "strict",
    )

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict
        self._buf: bytes | bytearray = b""
        # A chunk ended in CR: if the next chunk starts with LF, that LF belongs to the CRLF.
        self._skip_lf = False
        self._started = False
        self._event: str | None = None
        self._data: list[bytes] = []
        self._data_bytes = 0
        self._last_id: str | None = None
        # True once any field line of the current event was seen (for strict close()).
        self._pending = False

    def feed(self, data: bytes | bytearray | memoryview) -> list[SSEMessage]:
        """Consume ``data`` and return the events it completed (possibly none)."""
        chunk = bytes(data)
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
                if not chunk:
                    return []
        if self._buf and self._started and b"\n" not in chunk and b"\r" not in chunk:
            # A line longer than a chunk: grow it in place (joining each chunk onto a bytes
            # buffer would copy it again per chunk), and refuse one no server would send.
            if not isinstance(self._buf, bytearray):
                self._buf = bytearray(self._buf)
            self._buf += chunk
            if len(self._buf) > MAX_EVENT_BYTES:
                self._too_large(len(self._buf))
            return []
        buf = bytes(self._buf) + chunk if self._buf else chunk
        if not self._started:
            # The BOM check needs 3 bytes; wait for them unless a line already ended.
            if len(buf) < 3 and _BOM.startswith(buf) and b"\n" not in buf and b"\r" not in buf:
                self._buf = buf
                return []
            self._started = True
            if buf.startswith(_BOM):
                buf = buf[3:]
        end = max(buf.rfind(b"\n"), buf.rfind(b"\r"))
        if end < 0:
            if len(buf) > MAX_EVENT_BYTES:
                self._too_large(len(buf))
            self._buf = buf
            return []
        self._buf = buf[end + 1 :]
        complete = buf[: end + 1]
        if complete[-1:] == b"\r" and not self._buf:
            self._skip_lf = True
        out: list[SSEMessage] = []
        # bytes.splitlines splits on exactly CR, LF and CRLF (unlike str.splitlines); without
        # a CR, splitting on LF is the same and cheaper (complete ends in LF: drop that end).
        lines = complete[:-1].split(b"\n") if b"\r" not in complete else complete.splitlines()
        # The event's state lives in locals for the loop (a line costs a few attribute
        # reads less) and is written back around every exit and every call of _line.
        parts, size, event, pending = self._data, self._data_bytes, self._event, self._pending
        last_id = self._last_id
        for line in lines:
            if not line:
                if parts:
                    joined = parts[0] if len(parts) == 1 else b"\n".join(parts)
                    out.append(SSEMessage(event, joined, last_id))
                    parts = []
                    size = 0
                event = None
                pending = False
            elif line.startswith(b"data: "):
                # The common field, inlined: every event of a Responses stream has one.
                parts.append(line[6:])
                pending = True
                size += len(line)
                if size > MAX_EVENT_BYTES:
                    self._data, self._data_bytes = parts, size
                    self._event, self._pending = event, pending
                    self._too_large(size)
            elif line.startswith(b"event: "):
                # The other field every Responses event has, inlined too (as _line reads it).
                event = line[7:].decode("utf-8", "replace")
                pending = True
            else:
                self._data, self._data_bytes = parts, size
                self._event, self._pending = event, pending
                self._line(line)
                parts, size, event = self._data, self._data_bytes, self._event
                pending, last_id = self._pending, self._last_id
        self._data, self._data_bytes, self._event, self._pending = parts, size, event, pending
        return out

    def _too_large(self, size: int) -> None:
        raise SSEError(
            f"an SSE event or line of over {size:,} bytes: expected at most "
            f"{MAX_EVENT_BYTES:,} (a Responses event holding a whole answer is far smaller)"
        )

    def _line(self, line: bytes) -> None:
        if line[0] == 0x3A:  # ":" comment
            return
        field, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        self._pending = True
        if field == b"data":
            self._data.append(value)
            self._data_bytes += len(value)
            if self._data_bytes > MAX_EVENT_BYTES:
                self._too_large(self._data_bytes)
        elif field == b"event":
            self._event = value.decode("utf-8", "replace")
        elif field == b"id" and b"\x00" not in value:
            self._last_id = value.decode("utf-8", "replace")
        # "retry" and unknown fields: nothing to do for a one-shot Responses stream.

    def close(self) -> list[SSEMessage]:
        """End of stream: returns ``[]`` (an unterminated event is dropped).

        In strict mode raises :class:`SSEError` if bytes or fields of an unfinished
        event were pending.
        """
        if self.strict and (self._buf or self._pending):
            detail = repr(self._buf[:80]) if self._buf else f"{len(self._data)} data line(s)"
            raise SSEError(f"SSE stream ended inside an event: expected a blank line, got {detail}")
        self._buf = b""
        self._event = None
        self._data = []
        self._data_bytes = 0
        self._pending = False
        return []


def encode_event(event: dict[str, Any]) -> bytes:
    """``event: <type>\\ndata: <one-line JSON>\\n\\n`` for one Responses event dict."""
    etype = event.get("type")
    if not isinstance(etype, str) or not etype or "\n" in etype or "\r" in etype:
        raise ValueError(f"encode_event: expected a one-line string 'type', got {etype!r}")
    return b"event: " + etype.encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def encode_comment(text: str = "") -> bytes:
    """A comment block (e.g. keepalive); every line of ``text`` becomes a ``:`` line."""
    lines = text.splitlines() or [""]
    return b"".join(b": " + line.encode() + b"\n" for line in lines) + b"\n"


def encode_done() -> bytes:
    """``data: [DONE]`` terminator, for servers configured to send one (docs/protocol.md §6)."""
    return b"data: [DONE]\n\n"
