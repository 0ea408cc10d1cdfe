"""The gevent edge's WebSocket client on the project's codec, against servers that break the
framing rules (:mod:`tests.hostile_server`; plain blocking sockets, no Locust process): each
violation ends the connection with the codec's close code and its reason in the error."""

from __future__ import annotations

import pytest

from harness.locust_driver.net import Endpoint
from harness.locust_driver.ws_client import WsConnection
from harness.wire.errors import WsClosed
from tests.hostile_server import hostile_server


@pytest.mark.parametrize(
    ("mode", "messages", "code", "words"),
    [
        ("ws_close_1011", 1, 1011, ""),
        ("ws_close_invalid_code", 1, 1002, "the server sent a close frame with the code 999"),
        ("ws_rsv_bits", 0, 1002, "the server sent a frame with reserved bits set"),
        ("ws_stray_continuation", 0, 1002, "a continuation frame with no message to continue"),
        ("ws_fragmented_control", 0, 1002, "a fragmented or oversized control frame"),
    ],
)
def test_a_broken_server_ends_the_connection_with_the_codecs_close_code(
    mode: str, messages: int, code: int, words: str
) -> None:
    with hostile_server(mode) as url:
        conn = WsConnection(Endpoint.from_url(url), "/responses", headers={}, read_timeout_s=10.0)
        try:
            conn.send_text(b'{"type":"response.create"}')
            for _ in range(messages):
                _, raw = conn.recv()
                assert raw.startswith(b"{")
            with pytest.raises(WsClosed) as caught:
                conn.recv()
        finally:
            conn.close()
    assert caught.value.code == code
    assert words in str(caught.value)


def test_messages_come_whole_and_as_bytes() -> None:
    with hostile_server("ws_events_after_completed") as url:
        conn = WsConnection(Endpoint.from_url(url), "/responses", headers={})
        try:
            conn.send_text(b'{"type":"response.create"}')
            first = conn.recv()[1]
        finally:
            conn.close()
    assert isinstance(first, bytes) and b'"type"' in first
