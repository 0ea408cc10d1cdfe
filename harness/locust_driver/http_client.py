"""A blocking HTTP/1.1 client for streamed responses: h11 over one socket.

Each chunk read from the socket is stamped with :func:`~.net.now_ns` right
after ``recv`` returns, before any parsing, so every SSE event decoded from it
carries the time it reached the process.  One :class:`HttpConnection` is one
Locust user's connection: kept alive across requests when the options allow,
re-opened when the server (or ``keepalive=False``) closes it.
"""

from __future__ import annotations

import socket
from collections.abc import Generator
from dataclasses import dataclass, field

import h11

from harness.locust_driver.net import Endpoint, now_ns, open_socket
from harness.wire.errors import TransportError

RECV_BYTES = 65536


@dataclass(slots=True)
class Exchange:
    """One request's response as it arrives; iterate :attr:`chunks` for ``(t_ns, bytes)``."""

    status: int
    new_connection: bool
    connected_ns: int
    chunks: Generator[tuple[int, bytes], None, None] = field(repr=False)

    def read_all(self) -> bytes:
        return b"".join(data for _, data in self.chunks)


class HttpConnection:
    def __init__(
        self,
        ep: Endpoint,
        *,
        headers: dict[str, str],
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
        base = {"host": ep.host_header, **{k.lower(): v for k, v in headers.items()}}
        if not keepalive:
            base["connection"] = "close"
        self._headers = list(base.items())
        self._sock: socket.socket | None = None
        self._h11: h11.Connection | None = None

    def post(self, path: str, body: bytes) -> Exchange:
        """Send ``POST base_path+path``; returns once the status line and headers arrived."""
        reused = self._sock is not None
        try:
            return self._post_once(path, body)
        except _StaleConnection:
            # A kept-alive socket the server closed while idle: the request never
            # reached it, so sending it again on a fresh connection is safe.
            self.close()
            if not reused:
                raise TransportError(
                    "connection", f"POST {self.ep.host_header}{path}: closed before a response"
                ) from None
            return self._post_once(path, body)

    def _post_once(self, path: str, body: bytes) -> Exchange:
        new = self._sock is None
        connected = 0
        if self._sock is None:
            self._sock = open_socket(
                self.ep,
                connect_timeout_s=self.connect_timeout_s,
                read_timeout_s=self.read_timeout_s,
                verify_tls=self.verify_tls,
            )
            connected = now_ns()
            self._h11 = h11.Connection(our_role=h11.CLIENT)
        sock, conn = self._sock, self._h11
        assert conn is not None
        target = self.ep.base_path + path
        headers = [*self._headers, ("content-length", str(len(body)))]
        try:
            sock.sendall(
                conn.send(h11.Request(method="POST", target=target, headers=headers))
                + conn.send(h11.Data(data=body))
                + conn.send(h11.EndOfMessage())
            )
            t_ns = 0
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = sock.recv(RECV_BYTES)
                    t_ns = now_ns()
                    conn.receive_data(data)
                    continue
                if isinstance(event, h11.Response):
                    break
                if isinstance(event, h11.ConnectionClosed):
                    raise _StaleConnection
        except _StaleConnection:
            raise
        except (TimeoutError, OSError, h11.ProtocolError) as exc:
            self.close()
            raise _transport_error(f"POST {self.ep.host_header}{target}", exc) from exc
        return Exchange(event.status_code, new, connected, self._body(t_ns, target))

    def _body(self, first_t_ns: int, target: str) -> Generator[tuple[int, bytes], None, None]:
        sock, conn = self._sock, self._h11
        assert sock is not None and conn is not None
        t_ns = first_t_ns
        finished = False
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = sock.recv(RECV_BYTES)
                    t_ns = now_ns()
                    conn.receive_data(data)
                elif isinstance(event, h11.Data):
                    yield t_ns, bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    finished = True
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    raise TransportError("truncated_stream", f"POST {target}: connection closed")
        except (TimeoutError, OSError, h11.ProtocolError) as exc:
            raise _transport_error(f"POST {self.ep.host_header}{target}", exc) from exc
        finally:
            # Reuse the socket only after a complete exchange both sides agree to keep.
            if (
                finished
                and self.keepalive
                and conn.our_state is h11.DONE
                and conn.their_state is h11.DONE
            ):
                conn.start_next_cycle()
            else:
                self.close()

    def close(self) -> None:
        sock, self._sock, self._h11 = self._sock, None, None
        if sock is not None:
            sock.close()


class _StaleConnection(Exception):
    pass


def _transport_error(where: str, exc: BaseException) -> TransportError:
    kind = "timeout" if isinstance(exc, TimeoutError) else "connection"
    return TransportError(kind, f"{where}: {exc!r}")
