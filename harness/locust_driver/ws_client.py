"""A blocking WebSocket client: websockets' sans-I/O protocol over one socket.

No reader thread and no queue between the socket and the caller: :meth:`WsConnection.recv`
reads the socket itself and stamps each read with :func:`~.net.now_ns` as soon
as ``recv`` returns, so a message's timestamp is that of the read that
completed it.  No compression extension is offered and no pings are sent (the
measurement path pays for neither); pings from the server are answered.
"""

from __future__ import annotations

import socket
from collections import deque

from websockets.client import ClientProtocol
from websockets.exceptions import InvalidHandshake, ProtocolError
from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.uri import parse_uri

from harness.client.api_errors import ws_open_failure
from harness.locust_driver.net import Endpoint, now_ns, open_socket
from harness.wire.errors import WsClosed

RECV_BYTES = 65536


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
        self._proto = ClientProtocol(parse_uri(self.url), max_size=None)
        self._messages: deque[tuple[int, str]] = deque()
        self._fragments: list[bytes] = []
        request = self._proto.connect()
        for key, value in headers.items():
            request.headers[key] = value
        self._proto.send_request(request)
        try:
            self._flush()
            self._sock.settimeout(connect_timeout_s)
            while not self._handshake_done():
                self._read()
            self._sock.settimeout(read_timeout_s)
        except (OSError, WsClosed) as exc:
            self._sock.close()
            raise ws_open_failure(exc, self.url) from exc
        #: when the handshake completed
        self.connected_ns = now_ns()

    def _handshake_done(self) -> bool:
        if self._proto.handshake_exc is not None:
            exc = self._proto.handshake_exc
            self._sock.close()
            raise ws_open_failure(exc, self.url)
        return self._proto.state is State.OPEN

    def _flush(self) -> None:
        for data in self._proto.data_to_send():
            if data:
                self._sock.sendall(data)

    def _read(self) -> None:
        data = self._sock.recv(RECV_BYTES)
        t_ns = now_ns()
        if data:
            self._proto.receive_data(data)
        else:
            self._proto.receive_eof()
        self._flush()
        for event in self._proto.events_received():
            if not isinstance(event, Frame):
                continue  # the handshake response (checked by _handshake_done)
            op = event.opcode
            if op is Opcode.TEXT or op is Opcode.BINARY:
                if event.fin:
                    self._messages.append((t_ns, bytes(event.data).decode()))
                else:
                    self._fragments = [bytes(event.data)]
            elif op is Opcode.CONT:
                self._fragments.append(bytes(event.data))
                if event.fin:
                    self._messages.append((t_ns, b"".join(self._fragments).decode()))
                    self._fragments = []
        if (self._proto.state is State.CLOSED or not data) and not self._messages:
            rcvd = self._proto.close_rcvd
            raise WsClosed(rcvd.code if rcvd is not None else 1006)

    def send_text(self, text: str) -> None:
        try:
            self._proto.send_text(text.encode())
            self._flush()
        except (OSError, ProtocolError, InvalidHandshake) as exc:
            raise WsClosed(1006) from exc

    def recv(self) -> tuple[int, str]:
        """The next text message and when it arrived; raises :class:`WsClosed` or ``TimeoutError``."""
        while not self._messages:
            try:
                self._read()
            except (ProtocolError, ConnectionError) as exc:
                raise WsClosed(1006) from exc
        return self._messages.popleft()

    def close(self) -> None:
        try:
            if self._proto.state is State.OPEN:
                self._proto.send_close(1000)
                self._flush()
        except OSError:
            pass  # the peer is gone already; the socket is closed below either way
        finally:
            self._sock.close()
