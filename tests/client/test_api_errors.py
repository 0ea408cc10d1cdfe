"""Error wording shared by both client edges: whole sentences, never an exception's repr."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from harness.client.api_errors import (
    api_error_from_body,
    describe_os_error,
    not_sse,
    ws_open_failure,
)
from harness.report.error_summary import error_block, error_lines, kinds_text
from harness.wire.errors import APIError, ErrorKind


def test_socket_failures_read_as_sentences() -> None:
    assert describe_os_error(ConnectionRefusedError(111, "Connection refused"), "127.0.0.1:9") == (
        "connection refused by 127.0.0.1:9 (nothing listening?)"
    )
    assert describe_os_error(ConnectionResetError(104, "reset"), "h:1") == "connection reset by h:1"
    assert describe_os_error(OSError(113, "No route to host"), "h:1") == (
        "h:1: No route to host (errno 113)"
    )


def test_a_refused_upgrade_says_there_is_no_websocket_mode() -> None:
    refused = Exception("server rejected WebSocket connection: HTTP 404")
    refused.response = SimpleNamespace(status_code=404, body=b'{"detail":"Not Found"}')  # type: ignore[attr-defined]
    err = ws_open_failure(refused, "ws://127.0.0.1:8000/v1/responses")
    assert err.kind == ErrorKind.NO_WEBSOCKET
    assert str(err) == (
        "no_websocket: no WebSocket mode at ws://127.0.0.1:8000/v1/responses: "
        'the upgrade was answered with HTTP 404 with the body {"detail":"Not Found"}'
    )


@pytest.mark.parametrize(
    ("status", "why"),
    [(500, "a server error"), (503, "a server error"), (429, "the server is rate-limiting")],
)
def test_an_upgrade_the_server_failed_is_its_error_not_a_missing_websocket_mode(
    status: int, why: str
) -> None:
    failed = Exception(f"server rejected WebSocket connection: HTTP {status}")
    body = b'{"error": {"message": "try later", "type": "server_error"}}'
    failed.response = SimpleNamespace(status_code=status, body=body)  # type: ignore[attr-defined]
    err = ws_open_failure(failed, "ws://127.0.0.1:8000/v1/responses")
    assert isinstance(err, APIError) and err.status == status
    assert err.kind == "server_error"  # the body's code, as the same answer over HTTP
    assert str(err).endswith(
        f"the WebSocket upgrade at ws://127.0.0.1:8000/v1/responses was answered with HTTP "
        f"{status}: server_error: try later ({why}, not an answer about WebSocket mode)"
    )
    # 501 is the server saying it has no such thing: that one is "no WebSocket mode"
    failed.response = SimpleNamespace(status_code=501, body=b"")  # type: ignore[attr-defined]
    assert ws_open_failure(failed, "ws://h/v1/responses").kind == ErrorKind.NO_WEBSOCKET


def test_a_refused_tcp_connection_reads_as_a_sentence() -> None:
    refused_tcp = ws_open_failure(ConnectionRefusedError(111, "x"), "ws://127.0.0.1:9/v1/responses")
    assert str(refused_tcp).endswith("connection refused by 127.0.0.1:9 (nothing listening?)")


def test_bodies_are_quoted_whole_up_to_200_bytes_and_say_what_was_left_out() -> None:
    body = b'{"id": "r"}' + b" " * 10 + b"x" * 300
    msg = not_sse("application/json", body)
    assert msg.startswith('expected an SSE stream (text/event-stream), got application/json: {"id"')
    assert msg.endswith(f"…({len(body) - 200} more bytes)")
    # An OpenAI-style error body: its message whole, however long.
    long = "m" * 900
    err = api_error_from_body(
        429, b'{"error": {"code": "rate_limit_exceeded", "message": "%s"}}' % long.encode()
    )
    assert err.kind == "rate_limit_exceeded" and str(err).endswith(long)
    assert str(api_error_from_body(502, b"<html>Bad gateway</html>")) == (
        "http_502: HTTP 502 with the body (an HTML page of 24 bytes) Bad gateway"
    )


def test_the_error_summary_lists_each_kind_once_most_frequent_first() -> None:
    transports = {
        "ws": {
            "turns": {"count": 9, "errors": 9},
            "errors_by_kind": {"timeout": 2, "connection": 7},
        },
        "http": {"turns": {"count": 9, "errors": 0}, "errors_by_kind": {}},
    }
    block = error_block(transports, {"ws": {"connection": "refused", "timeout": "slow"}})
    assert list(block) == ["ws"] and list(block["ws"]) == ["connection", "timeout"]
    assert kinds_text(block["ws"]) == "connection x7: refused; timeout x2"
    assert kinds_text(block["ws"], top=1) == "connection x7: refused; 1 more kind"
    lines = error_lines({"transports": transports, "errors": block})
    assert lines == [
        "errors ws: 9 of 9 turns failed",
        "  connection x7: refused",
        "  timeout x2: slow",
    ]


def test_context_length_exceeded_is_named_with_its_numbers_on_both_framings() -> None:
    from harness.client.api_errors import api_error_from_event
    from harness.client.recovery import Recovery, recovery_for
    from harness.wire.transports import transport_spec

    message = (
        "Your input exceeds the context window of this model. Please adjust your input and try "
        "again. (loopbench: 1250004 input tokens + 200 requested output tokens exceed the context "
        "window of 400000 tokens.)"
    )
    body = b'{"error": {"code": "context_length_exceeded", "param": "input", "message": "%s"}}'
    http = api_error_from_body(400, body % message.encode())
    ws = api_error_from_event(
        {
            "type": "error",
            "status": 400,
            "error": {"code": "context_length_exceeded", "message": message},
        }
    )
    for err, where in ((http, "HTTP 400"), (ws, "status 400 on the WebSocket")):
        assert err.kind == "context_length_exceeded"
        assert str(err).startswith(
            f"context_length_exceeded ({where}): the request's 1,250,004 input tokens + 200 "
            "requested output tokens exceed the model's context window of 400,000 tokens"
        )
        assert str(err).endswith(message)
        # Resending the same context cannot help: no transport retries it.
        for name in ("ws", "ws-store", "ws-append", "http", "http-chained"):
            assert recovery_for(transport_spec(name), err, full_sent=False) is Recovery.FAIL


def test_context_errors_of_other_servers_are_recognised() -> None:
    # vLLM (and the Chat Completions API) word it this way, without the code.
    vllm = (
        b'{"object": "error", "message": "This model\'s maximum context length is 4096 tokens. '
        b"However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). "
        b'Please reduce the length of the messages or completion.", "type": "BadRequestError", '
        b'"param": null, "code": 400}'
    )
    err = api_error_from_body(400, b'{"error": %s}' % vllm)
    assert err.kind == "context_length_exceeded"
    assert (
        "the request's 5,000 tokens (input and output) exceed the model's context window (4,096 tokens)"
        in str(err)
    )
    bare = api_error_from_body(
        400, b'{"error": {"code": "context_length_exceeded", "message": "too long"}}'
    )
    assert str(bare) == (
        "context_length_exceeded (HTTP 400): the request's input exceeds the model's context "
        "window; the endpoint said: too long"
    )


def test_an_html_error_page_is_quoted_by_its_text_on_one_line() -> None:
    """A web server's error page: its head and style would fill the quote; its text is what a
    user can act on, on one line."""
    page = (
        b"<!DOCTYPE HTML>\n<html lang='en'>\n  <head>\n    <style>:root { color: red; }</style>\n"
        b"    <title>Error response</title>\n  </head>\n  <body>\n    <h1>Error response</h1>\n"
        b"    <p>Error code: 501</p>\n    <p>Message: Unsupported method (&#x27;POST&#x27;).</p>\n"
        b"  </body>\n</html>\n"
    )
    err = api_error_from_body(501, page)
    text = str(err)
    assert "\n" not in text and "<" not in text and "color" not in text
    assert text.endswith(
        f"HTTP 501 with the body (an HTML page of {len(page)} bytes) Error response Error "
        "response Error code: 501 Message: Unsupported method ('POST')."
    )
    # a plain body keeps its words, one line, and says how much was left out
    assert not_sse("text/plain", b"line one\n\n  line two").endswith(": line one line two")
    long_page = b"<html><body>" + b"word " * 100 + b"</body></html>"
    assert str(api_error_from_body(502, long_page)).endswith("word …")


def _refusal(answer: bytes) -> BaseException:
    """What the ``websockets`` handshake both client edges use makes of ``answer``."""
    from websockets.client import ClientProtocol
    from websockets.uri import parse_uri

    hs = ClientProtocol(parse_uri("ws://127.0.0.1:8000/v1/responses"))
    hs.send_request(hs.connect())
    hs.receive_data(answer)
    hs.receive_eof()
    assert hs.handshake_exc is not None
    return hs.handshake_exc


@pytest.mark.parametrize("version", ["HTTP/1.0", "HTTP/1.1"])
def test_an_upgrade_answered_with_a_server_error_reads_the_same_in_either_http_version(
    version: str,
) -> None:
    """``run`` said "did not receive a valid HTTP response" of an HTTP/1.0 500, which the
    library refuses to parse though it is a status all the same (``probe`` read it right)."""
    exc = _refusal(f"{version} 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n".encode())
    err = ws_open_failure(exc, "ws://127.0.0.1:8000/v1/responses")
    assert isinstance(err, APIError) and err.status == 500, str(err)
    assert (
        "the WebSocket upgrade at ws://127.0.0.1:8000/v1/responses was answered with HTTP 500"
        in (str(err))
    )
    assert "valid HTTP response" not in str(err)
    missing = ws_open_failure(
        _refusal(f"{version} 404 Not Found\r\ncontent-length: 0\r\n\r\n".encode()), "ws://h/v1"
    )
    assert missing.kind == ErrorKind.NO_WEBSOCKET, str(missing)
