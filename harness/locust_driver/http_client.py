"""A blocking HTTP/1.1 client for streamed responses: :mod:`harness.client.h1` over one socket.

The same parser as the asyncio edge (:mod:`harness.transports.h1client`).  Each
chunk read from the socket is stamped with :func:`~.net.now_ns` right after
``recv`` returns, before any parsing, and its body bytes go to the caller's sink
in the same call, so every SSE event decoded from it carries the time it reached
the process.  One :class:`HttpConnection` is one Locust user's connection: kept
alive across requests when the options allow, re-opened when the server (or
``keepalive=False``) closes it.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.client.api_errors import lost_mid_response
from harness.client.h1 import ResponseParser, encode_request
from harness.locust_driver.net import Endpoint, now_ns, open_socket
from harness.wire.errors import ErrorKind, LoopbenchError, StaleConnection, TransportError

RECV_BYTES = 65536

#: ``(body bytes, t_ns)``, for responses with a status below 400
BodySink = Callable[[bytes, int], object]  # returns what it likes (the asyncio edge counts events)


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes  # error responses only: a streamed body went to the sink
    new_connection: bool
    connected_ns: int  # when the new connection was established (0: reused)
    # the new connection's TCP connect began and ended, its TLS handshake ended (0: reused)
    connect_start_ns: int = 0
    tcp_connected_ns: int = 0
    tls_done_ns: int = 0


class HttpConnection:
    def __init__(
        self,
        ep: Endpoint,
        *,
        headers: list[tuple[str, str]],
        keepalive: bool = True,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 120.0,
        verify_tls: bool = True,
    ) -> None:
        self.ep = ep
        self.keepalive = keepalive
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.verify_tls = verify_tls
        head = [("host", ep.host_header), *headers]
        if not keepalive:
            head.append(("connection", "close"))
        self._headers = head
        self._sock: socket.socket | None = None

    def request(
        self,
        method: str,
        path: str,
        body: bytes,
        sink: BodySink,
        extra_headers: Sequence[tuple[str, str]] = (),
    ) -> Response:
        """Send one request and read its whole response; body bytes go to ``sink`` as they arrive.

        ``extra_headers``: this request's own (the rollout's session-affinity header)."""
        target = self.ep.base_path + path
        headers = [*self._headers, *extra_headers] if extra_headers else self._headers
        wire = encode_request(method, target, headers, body)
        reused = self._sock is not None
        try:
            return self._exchange(wire, sink, f"{method} {self.ep.host_header}{target}")
        except StaleConnection:
            if not reused:
                raise
            # A kept-alive socket the server closed while idle: the request never
            # reached it, so sending it again on a fresh connection is safe.
            return self._exchange(wire, sink, f"{method} {self.ep.host_header}{target}")

    def _exchange(self, wire: bytes, sink: BodySink, where: str) -> Response:
        connected_ns = 0
        stamps = (0, 0, 0)
        if self._sock is None:
            self._sock, stamps = open_socket(
                self.ep,
                connect_timeout_s=self.connect_timeout_s,
                read_timeout_s=self.read_timeout_s,
                verify_tls=self.verify_tls,
            )
            connected_ns = now_ns()
        sock = self._sock
        parser = ResponseParser()
        error_body: list[bytes] = []
        received = False
        try:
            sock.sendall(wire)
            while not parser.complete:
                data = sock.recv(RECV_BYTES)
                t_ns = now_ns()
                if not data:
                    if not received:
                        raise StaleConnection(where)
                    try:
                        parser.eof()
                    except LoopbenchError as exc:
                        # The peer hung up mid-response: a connection failure, not a
                        # malformed response.
                        raise TransportError(
                            ErrorKind.CONNECTION, f"{where}: the peer closed the connection: {exc}"
                        ) from exc
                    break
                received = True
                body = parser.feed(data)
                if body:
                    # Error responses, and answers that are not an SSE stream, are collected
                    # whole for the error message, never streamed.
                    if parser.status < 400 and parser.headers.get("content-type", "").startswith(
                        "text/event-stream"
                    ):
                        sink(body, t_ns)
                    else:
                        error_body.append(body)
        except TimeoutError as exc:
            self.close()
            raise TransportError(ErrorKind.TIMEOUT, f"{where}: no data in time") from exc
        except OSError as exc:
            self.close()
            if not received:
                raise StaleConnection(where) from exc
            raise TransportError(
                ErrorKind.CONNECTION, f"{where}: {lost_mid_response(exc, self.ep.host_header)}"
            ) from exc
        except BaseException:
            # The sink's protocol errors included: this connection's exchange is broken.
            self.close()
            raise
        if not (self.keepalive and parser.keep_alive):
            self.close()
        return Response(
            parser.status,
            parser.headers,
            b"".join(error_body),
            bool(connected_ns),
            connected_ns,
            *stamps,
        )

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
