"""A blocking WebSocket client over one socket: the asyncio edge's codec, read in place.

The opening handshake is the ``websockets`` package's sans-I/O client (as on the asyncio
edge); the frames after its 101 are read and written by :mod:`harness.wire.ws_frames`.
No reader thread and no queue between the socket and the caller: :meth:`WsConnection.recv`
reads the socket itself and stamps each read with :func:`~.net.now_ns` as soon as ``recv``
returns, so a message's timestamp is that of the read that completed it.  No compression
extension is offered and no pings are sent (the measurement path pays for neither); pings
from the server are answered.
"""

from __future__ import annotations

import contextlib
import socket
from collections import deque

from websockets.client import ClientProtocol
from websockets.exceptions import InvalidHandshake, InvalidMessage
from websockets.http11 import Response
from websockets.uri import parse_uri

from harness.client.api_errors import ws_open_failure
from harness.locust_driver.net import Endpoint, now_ns, open_socket
from harness.wire import ws_frames as wsf
from harness.wire.errors import WsClosed
from harness.wire.sse import MAX_EVENT_BYTES

RECV_BYTES = 65536
#: a handshake answer's head larger than this is not a WebSocket server's
MAX_HANDSHAKE_BYTES = 64 * 1024


class WsConnection:
    def __init__(
        self,
        ep: Endpoint,
        path: str,
        *,
        headers: dict[str, str],
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 120.0,
        verify_tls: bool = True,
    ) -> None:
        self.url = ep.ws_url(path)
        self._sock: socket.socket
        #: when the TCP connect began and ended, and the TLS handshake ended (0: no TLS)
        self._sock, self.connect_stamps = open_socket(
            ep,
            connect_timeout_s=connect_timeout_s,
            read_timeout_s=read_timeout_s,
            verify_tls=verify_tls,
        )
        self._reader = wsf.FrameReader(MAX_EVENT_BYTES)
        self._messages: deque[tuple[int, bytes]] = deque()
        self._closed: WsClosed | None = None
        try:
            self._sock.settimeout(connect_timeout_s)
            rest = self._handshake(headers)
            self._sock.settimeout(read_timeout_s)
        except (OSError, InvalidHandshake) as exc:
            self._sock.close()
            raise ws_open_failure(exc, self.url) from exc
        #: when the handshake completed
        self.connected_ns = now_ns()
        if rest:
            self._frames(self._reader_feed(rest), self.connected_ns)

    def _handshake(self, headers: dict[str, str]) -> bytes:
        """The upgrade request and the server's answer; the bytes after its head (frames).

        Only the 101's head goes to the ``websockets`` parser (it would read what follows
        as frames); a refusal goes whole, its body being the error message.
        """
        hs = ClientProtocol(parse_uri(self.url), extensions=None)
        request = hs.connect()
        for key, value in headers.items():
            request.headers[key] = value
        hs.send_request(request)
        self._sock.sendall(b"".join(hs.data_to_send()))
        head = b""
        while True:
            data = self._sock.recv(RECV_BYTES)
            if not data:
                hs.receive_eof()
                raise hs.handshake_exc or InvalidMessage("did not receive a valid HTTP response")
            head += data
            end = head.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(head) > MAX_HANDSHAKE_BYTES:
                raise InvalidMessage(f"an answer head of over {MAX_HANDSHAKE_BYTES:,} bytes")
        if head.startswith((b"HTTP/1.1 101 ", b"HTTP/1.1 101\r")):
            hs.receive_data(head[: end + 4])
            if hs.handshake_exc is not None:
                raise hs.handshake_exc
            if not any(isinstance(e, Response) for e in hs.events_received()):
                raise InvalidMessage("did not receive a valid HTTP response")
            return head[end + 4 :]
        # A refusal: its body, which may run to the end of the connection, is the message.
        hs.receive_data(head)
        while hs.handshake_exc is None:
            data = self._sock.recv(RECV_BYTES)
            if not data:
                hs.receive_eof()
                break
            hs.receive_data(data)
        raise hs.handshake_exc or InvalidMessage("did not receive a valid HTTP response")

    def _reader_feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """The frames in ``data``; a broken one closes the connection after those before it."""
        try:
            return self._reader.feed(data)
        except wsf.FrameError as exc:
            self._send(wsf.encode_frame(wsf.OP_CLOSE, wsf.close_payload(exc.code)))
            self._closed = WsClosed(exc.code, f"the server sent {exc.reason}")
            return exc.before

    def _frames(self, frames: list[tuple[int, bytes]], t_ns: int) -> None:
        for op, payload in frames:
            if op in (wsf.OP_TEXT, wsf.OP_BINARY):
                self._messages.append((t_ns, payload))
            elif op == wsf.OP_PING:
                self._send(wsf.encode_frame(wsf.OP_PONG, payload))
            elif op == wsf.OP_CLOSE:
                code = wsf.close_code(payload)
                self._send(
                    wsf.encode_frame(
                        wsf.OP_CLOSE, wsf.close_payload(code if code != wsf.NO_STATUS else 1000)
                    )
                )
                self._closed = WsClosed(code)
                return

    def _send(self, data: bytes) -> None:
        with contextlib.suppress(OSError):  # the peer is gone: what it was owed no longer matters
            self._sock.sendall(data)

    def send_text(self, text: str | bytes) -> None:
        if self._closed is not None:
            raise self._closed
        data = text.encode() if isinstance(text, str) else text
        try:
            self._sock.sendall(wsf.encode_frame(wsf.OP_TEXT, data))
        except OSError as exc:
            raise WsClosed(1006) from exc

    def recv(self) -> tuple[int, bytes]:
        """The next text message and when it arrived; raises :class:`WsClosed` or ``TimeoutError``."""
        while not self._messages:
            if self._closed is not None:
                raise self._closed
            try:
                data = self._sock.recv(RECV_BYTES)
            except ConnectionError as exc:
                raise WsClosed(1006) from exc
            t_ns = now_ns()
            if not data:
                self._closed = WsClosed(1006)
                continue
            self._frames(self._reader_feed(data), t_ns)
        return self._messages.popleft()

    def close(self) -> None:
        try:
            if self._closed is None:
                self._closed = WsClosed(1000)
                self._sock.sendall(wsf.encode_frame(wsf.OP_CLOSE, wsf.close_payload(1000)))
        except OSError:
            pass  # the peer is gone already; the socket is closed below either way
        finally:
            self._sock.close()
