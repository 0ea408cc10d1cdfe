"""Minimal HTTP/1.1 client codec (sans-I/O): one request out, one response in.

What the ``http`` transports need and nothing more: a request head + body,
then a response head (status, headers; ``1xx`` interim responses skipped) and a
body framed by ``Transfer-Encoding: chunked``, ``Content-Length`` or the end of
the connection.  :meth:`ResponseParser.feed` returns the body bytes a chunk of
input completed, so a streaming reader hands them straight to the SSE decoder
in the same call that received them: no per-chunk task switch, no buffering.

Why not h11: it is correct and general, but it costs several Python calls and
an event object per received chunk; at thousands of SSE chunks per second that
is client time that ends up inside every measured TTFT and ITL.
"""

from __future__ import annotations

from collections.abc import Iterable

from harness.wire.errors import ProtocolError

__all__ = ["H1Error", "ResponseParser", "encode_request"]

_MAX_HEAD = 64 * 1024
_MAX_CHUNK_LINE = 4096

_HEAD, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILERS, _LENGTH, _UNTIL_CLOSE, _DONE = range(8)


class H1Error(ProtocolError):
    """The peer's HTTP/1.1 response is malformed."""

    kind = "invalid_http"


def encode_request(
    method: str, target: str, headers: Iterable[tuple[str, str]], body: bytes
) -> bytes:
    """Request line, headers (``content-length`` added) and body, as one buffer."""
    lines = [f"{method} {target} HTTP/1.1"]
    for name, value in headers:
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
            raise ValueError(f"header {name!r}: expected a single line, got {value!r}")
        lines.append(f"{name}: {value}")
    lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class ResponseParser:
    """Feed received bytes; read ``status``/``headers`` once ``head_done``, body from ``feed``.

    ``complete`` turns True when the body ended; bytes after it are a protocol
    error (this client never pipelines).  For a body delimited by the end of the
    connection, call :meth:`eof` when the peer closes.  ``keep_alive`` says
    whether the connection may carry another request afterwards.
    """

    __slots__ = (
        "_buf",
        "_no_body",
        "_remaining",
        "_state",
        "complete",
        "head_done",
        "headers",
        "keep_alive",
        "reason",
        "status",
    )

    def __init__(self, *, no_body: bool = False) -> None:
        """``no_body``: the answer to a ``HEAD`` request, which has none whatever its head says."""
        self._buf = b""
        self._no_body = no_body
        self._state = _HEAD
        self._remaining = 0
        self.head_done = False
        self.complete = False
        self.status = 0
        self.reason = ""
        self.headers: dict[str, str] = {}
        self.keep_alive = True

    def feed(self, data: bytes) -> bytes:
        """Consume ``data``; return the body bytes it completed (possibly empty)."""
        state = self._state
        # The common case of a streaming body: a whole chunk, or the next part of a
        # length-delimited body, arrives without leftovers.
        if state == _LENGTH and not self._buf:
            n = len(data)
            if n < self._remaining:
                self._remaining -= n
                return data
        elif state == _UNTIL_CLOSE:
            return data
        buf = self._buf + data if self._buf else data
        out: list[bytes] = []
        pos = 0
        end = len(buf)
        while pos < end or state == _DONE:
            if state == _HEAD:
                stop = buf.find(b"\r\n\r\n", pos)
                # Judged on the complete head too: whether a peer's oversized head arrives in
                # one read or several must not decide between an error and a parsed response.
                if (end if stop < 0 else stop) - pos > _MAX_HEAD:
                    raise H1Error(f"response head: expected at most {_MAX_HEAD} bytes")
                if stop < 0:
                    break
                state = self._head(buf[pos:stop])
                pos = stop + 4
            elif state == _CHUNK_SIZE:
                stop = buf.find(b"\r\n", pos)
                if stop < 0:
                    if end - pos > _MAX_CHUNK_LINE:
                        raise H1Error("chunk size line: expected a hexadecimal size and CRLF")
                    break
                line = buf[pos:stop]
                if b";" in line:
                    line = line.split(b";", 1)[0]
                try:
                    # int() skips the surrounding whitespace itself, as bytes.strip() would
                    size = int(line, 16)
                except ValueError:
                    raise H1Error(
                        f"chunk size line: expected a hexadecimal size, got {line.strip()[:20]!r}"
                    ) from None
                pos = stop + 2
                if size == 0:
                    state = _TRAILERS
                else:
                    data_end = pos + size
                    if size > 0 and buf[data_end : data_end + 2] == b"\r\n":
                        # The whole chunk and its CRLF are here (a streamer's chunk per
                        # event): take it without a trip through the states below.
                        out.append(buf[pos:data_end])
                        pos = data_end + 2
                    else:
                        self._remaining = size
                        state = _CHUNK_DATA
            elif state in (_CHUNK_DATA, _LENGTH):  # a chunk, or a Content-Length body
                take = min(self._remaining, end - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self._remaining -= take
                if not self._remaining:
                    state = _CHUNK_CRLF if state == _CHUNK_DATA else _DONE
            elif state == _CHUNK_CRLF:
                if end - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise H1Error(
                        f"chunk: expected CRLF after the data, got {buf[pos : pos + 2]!r}"
                    )
                pos += 2
                state = _CHUNK_SIZE
            elif state == _TRAILERS:
                stop = buf.find(b"\r\n", pos)
                if stop < 0:
                    break
                if stop == pos:  # the empty line that ends the trailers
                    state = _DONE
                pos = stop + 2
            elif state == _UNTIL_CLOSE:
                out.append(buf[pos:])
                pos = end
            else:  # _DONE
                self.complete = True
                if pos < end:
                    raise H1Error(
                        f"response: expected nothing after the body, got {buf[pos : pos + 40]!r}"
                    )
                break
        self._state = state
        self._buf = buf[pos:] if pos < end else b""
        if len(out) == 1:
            return out[0]
        return b"".join(out)

    def unit_end(self, data: bytes) -> int:
        """How many bytes of ``data``, the next bytes :meth:`feed` would take, complete the next
        unit of the response: its head, a chunk with its CRLF, or (a body not chunked) a line
        of it, which is where an SSE event can end; 0 when none ends in ``data``.

        A kernel-stamping reader consumes exactly that many, so that the read that completes
        an event ends in the segment that carried its last byte (docs/metrics.md §1.9).  A
        unit ends no later than the event it completes, never past it: a short unit costs a
        read, a long one would give the event a later segment's stamp.  Nothing is checked
        here: :meth:`feed` judges the bytes when it gets them.
        """
        state = self._state
        if state == _HEAD:
            buf = self._buf + data
            stop = buf.find(b"\r\n\r\n")
            return stop + 4 - len(self._buf) if stop >= 0 else 0
        if state == _CHUNK_SIZE:
            buf = self._buf + data
            stop = buf.find(b"\r\n")
            try:
                size = int(buf[:stop].split(b";", 1)[0], 16) if stop >= 0 else 0
            except ValueError:
                return 0
            end = stop + 2 + size + 2 - len(self._buf)
            return end if size and end <= len(data) else 0
        if state == _CHUNK_DATA:
            end = self._remaining + 2
            return end if end <= len(data) else 0
        if state == _CHUNK_CRLF:
            # the chunk's data was delivered: its CRLF ends the unit
            end = 2 - len(self._buf)
            return end if end <= len(data) else 0
        if state in (_LENGTH, _UNTIL_CLOSE):
            ends = [i for i in (data.find(b"\n"), data.find(b"\r")) if i >= 0]
            return min(ends) + 1 if ends else 0
        return 0

    def eof(self) -> None:
        """The peer closed: completes a body delimited by the close, else raises."""
        if self._state == _UNTIL_CLOSE:
            self._state = _DONE
            self.complete = True
        elif self._state != _DONE:
            where = "head" if self._state == _HEAD else "body"
            raise H1Error(f"connection closed inside the response {where}")

    def _head(self, raw: bytes) -> int:
        lines = raw.split(b"\r\n")
        status_line = lines[0].decode("latin-1")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise H1Error(f"status line: expected 'HTTP/1.x NNN reason', got {status_line[:60]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip():
                raise H1Error(f"header line: expected 'name: value', got {line[:60]!r}")
            key = name.decode("latin-1").lower()
            text = value.strip().decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        if 100 <= status < 200:
            return _HEAD  # interim response (100 Continue): the real one follows
        self.status = status
        self.reason = parts[2] if len(parts) > 2 else ""
        self.headers = headers
        self.head_done = True
        self.keep_alive = (
            "close" not in headers.get("connection", "").lower() and parts[0] == "HTTP/1.1"
        )
        if self._no_body:
            return _DONE
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return _CHUNK_SIZE
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                raise H1Error(f"content-length: expected a non-negative integer, got {length!r}")
            self._remaining = int(length)
            return _LENGTH if self._remaining else _DONE
        if status in (204, 304):
            return _DONE
        self.keep_alive = False
        return _UNTIL_CLOSE
