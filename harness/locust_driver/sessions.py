"""The transports as blocking sessions: the gevent edge over :mod:`harness.client`.

What each turn sends, what an answer means and how a failure is recovered are
:class:`harness.client.conversation.Conversation`'s, exactly as in
:mod:`harness.transports`; this module does the blocking I/O (see
:mod:`.http_client`, :mod:`.ws_client`).  A session lives as long as one Locust
user, so HTTP keep-alive connections are reused across that user's rollouts
while each rollout opens its own WebSocket, as in ``loopbench run``.
"""

from __future__ import annotations

from typing import Protocol
from urllib.parse import urlsplit

from harness.client.api_conversation import ApiConversation, api_headers
from harness.client.api_errors import lost_mid_response
from harness.client.bodies import http_headers, ws_headers
from harness.client.conversation import Conversation
from harness.client.options import TransportOptions
from harness.client.receive import feed_ws_message
from harness.client.recovery import Recovery
from harness.client.shaping import session_headers
from harness.client.stream import ResponseStream
from harness.locust_driver.http_client import HttpConnection
from harness.locust_driver.net import Endpoint, now_ns
from harness.locust_driver.ws_client import WsConnection
from harness.wire.errors import APIError, ErrorKind, TransportError, WsClosed
from harness.wire.transports import TransportSpec, locust_spec
from harness.workload.agent import TurnInput
from harness.workload.records import TurnRecord


class Session(Protocol):
    name: str
    #: the run's client settings (the rollout loop reads its token convention)
    options: TransportOptions

    def start_rollout(self, rollout_key: str | None = None) -> None:
        """A new rollout; ``rollout_key`` is the value of its session-affinity header
        (harness/client/shaping.py), None when the caller has no rollout to name."""
        ...

    def turn(self, inp: TurnInput, rec: TurnRecord) -> ResponseStream: ...

    def end_rollout(self) -> None: ...

    def close(self) -> None: ...


def make_session(name: str, options: TransportOptions) -> Session:
    spec = locust_spec(name)
    if spec.websocket:
        return WsSession(spec, options)
    if spec.api != "responses":
        return ApiHttpSession(spec, options)
    return HttpSession(spec, options)


class HttpSession:
    """``http`` (whole history, ``store: false``) or ``http-chained`` (id + new items)."""

    def __init__(self, spec: TransportSpec, options: TransportOptions) -> None:
        self.name = spec.name
        self.options = options
        self.conv = Conversation(spec, shaping=options.shaping, tokens=options.tokens)
        #: the current rollout's session-affinity header (one Locust user runs many rollouts)
        self.session: list[tuple[str, str]] = []
        self.conn = HttpConnection(
            Endpoint.from_url(options.base_url),
            headers=http_headers(options),
            keepalive=options.keepalive,
            connect_timeout_s=options.connect_timeout_s,
            read_timeout_s=options.request_timeout_s,
            verify_tls=options.verify_tls,
        )

    def start_rollout(self, rollout_key: str | None = None) -> None:
        self.conv.reset()
        self.session = session_headers(self.options.shaping, rollout_key)

    def end_rollout(self) -> None:
        self.conv.reset()
        self.session = []

    def turn(self, inp: TurnInput, rec: TurnRecord) -> ResponseStream:
        conv = self.conv
        payload = conv.http_request(inp, rec)
        feed = conv.http_sent(rec, now_ns())
        resp = self.conn.request("POST", "/responses", payload, feed.feed, self.session)
        return conv.http_answer(rec, feed, resp)

    def close(self) -> None:
        self.conn.close()


class ApiHttpSession:
    """``chat`` (Chat Completions) or ``messages`` (Anthropic Messages): the whole conversation
    every turn, its stream translated (harness/client/api_conversation.py)."""

    def __init__(self, spec: TransportSpec, options: TransportOptions) -> None:
        self.name = spec.name
        self.options = options
        self.conv = ApiConversation(spec, options.cache_control, options.shaping, options.tokens)
        #: the current rollout's session-affinity header (one Locust user runs many rollouts)
        self.session: list[tuple[str, str]] = []
        self.conn = HttpConnection(
            Endpoint.from_url(options.base_url),
            headers=api_headers(spec, options),
            keepalive=options.keepalive,
            connect_timeout_s=options.connect_timeout_s,
            read_timeout_s=options.request_timeout_s,
            verify_tls=options.verify_tls,
        )

    def start_rollout(self, rollout_key: str | None = None) -> None:
        self.conv.reset()
        self.session = session_headers(self.options.shaping, rollout_key)

    def end_rollout(self) -> None:
        self.conv.reset()
        self.session = []

    def turn(self, inp: TurnInput, rec: TurnRecord) -> ResponseStream:
        conv = self.conv
        payload = conv.http_request(inp, rec)
        feed = conv.http_sent(rec, now_ns())
        resp = self.conn.request("POST", conv.path, payload, feed.feed, self.session)
        return conv.http_answer(rec, feed, resp)

    def close(self) -> None:
        self.conn.close()


class WsSession:
    """One WebSocket per rollout; ``response.create`` chained by id (or appended)."""

    def __init__(self, spec: TransportSpec, options: TransportOptions) -> None:
        self.name = spec.name
        self.options = options
        self.conv = Conversation(spec, shaping=options.shaping, tokens=options.tokens)
        self.endpoint = Endpoint.from_url(options.base_url)
        self.path = "/responses" + self.conv.ws_query
        self.conn: WsConnection | None = None
        self.session: list[tuple[str, str]] = []

    def start_rollout(self, rollout_key: str | None = None) -> None:
        self._drop()
        self.conv.reset()
        self.session = session_headers(self.options.shaping, rollout_key)

    def end_rollout(self) -> None:
        self._drop()
        self.conv.reset()
        self.session = []

    def _connect(self, rec: TurnRecord) -> WsConnection:
        opts = self.options
        conn = WsConnection(
            self.endpoint,
            self.path,
            headers=ws_headers(opts, self.session),
            connect_timeout_s=opts.connect_timeout_s,
            read_timeout_s=opts.request_timeout_s,
            verify_tls=opts.verify_tls,
        )
        rec.connected_ns = conn.connected_ns
        rec.connect_start_ns, rec.tcp_connected_ns, rec.tls_done_ns = conn.connect_stamps
        rec.new_connection = True
        self.conn = conn
        return conn

    def _warm_up(self, payload: bytes, rec: TurnRecord) -> None:
        """The rollout's recorded warm-up (harness/transports/ws.py does the same)."""
        conn = self.conn or self._connect(rec)
        stream = ResponseStream(now_ns(), tokens=self.conv.tokens)
        try:
            conn.send_text(payload)
            while not stream.done:
                t_ns, raw = conn.recv()
                feed_ws_message(stream, raw, t_ns)
        except (APIError, WsClosed, TimeoutError, OSError):
            self._drop()  # the turn goes out whole on a fresh connection
            return
        self.conv.warmed(stream)

    def turn(self, inp: TurnInput, rec: TurnRecord) -> ResponseStream:
        warmup = self.conv.ws_warmup(inp)
        if warmup is not None:
            self._warm_up(warmup, rec)
        turn = self.conv.ws_turn(inp, rec)
        while True:
            conn = self.conn or self._connect(rec)
            payload = turn.request()
            stream = turn.start(now_ns())
            try:
                conn.send_text(payload)
                while not stream.done:
                    t_ns, raw = conn.recv()
                    feed_ws_message(stream, raw, t_ns)
            except (APIError, WsClosed) as exc:
                if turn.recover(exc) is not Recovery.RESEND_FULL:
                    self._drop()
                continue
            except TimeoutError as exc:
                self._drop()
                raise TransportError(
                    ErrorKind.TIMEOUT, f"WebSocket {conn.url}: no event in time"
                ) from exc
            except OSError as exc:
                self._drop()
                peer = urlsplit(conn.url).netloc
                raise TransportError(
                    ErrorKind.CONNECTION, f"WebSocket {conn.url}: {lost_mid_response(exc, peer)}"
                ) from exc
            return turn.finish()

    def _drop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        self._drop()
