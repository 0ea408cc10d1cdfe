"""Endpoints loopbench did not write, for tests of what it says about them.

Each is a small server a test starts on 127.0.0.1 port 0 in a background thread,
as a context manager yielding its base URL (``http://127.0.0.1:PORT/v1``); it stops
when the block ends, and its threads are daemons with a socket timeout, so a test
that fails mid-request leaves nothing running.

- :func:`dead_target` — a port nothing listens on (bound, then closed);
- :func:`silent_server` — accepts and reads every request and never answers (until it stops);
- :func:`plain_web_server` — ``200 text/html`` to every request;
- :func:`error_server` — ``500`` to every request;
- :func:`key_required_server` — ``401`` (an invalid API key) to every request;
- :func:`forbidden_server` — ``403`` (a key without access to the model) to every request;
- :func:`canned_sse_server` — a valid minimal SSE stream for every ``POST /v1/responses``
  (fixed usage: it ignores ``previous_response_id``), HTTP 500 to a WebSocket upgrade;
- :func:`http_only_server` — the reference server with ``--no-websocket``: a real
  Responses endpoint without WebSocket mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import websockets.asyncio.server

from harness.run.embedded import embedded_server

#: seconds a handler waits on a silent client before giving up the connection
HANDLER_TIMEOUT_S = 10.0
#: set when a server's block ends, so a handler that holds its answer back returns at once
stopped = threading.Event()


def free_port() -> int:
    """A loopback port that was free a moment ago (bound, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def dead_target() -> Iterator[str]:
    """The base URL of a port nothing listens on."""
    yield f"http://127.0.0.1:{free_port()}/v1"


class _Handler(BaseHTTPRequestHandler):
    """Reads the request body, then answers with :meth:`answer`'s (status, type, body)."""

    timeout = HANDLER_TIMEOUT_S

    def answer(self) -> tuple[int, str, bytes]:
        raise NotImplementedError

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.request_body = self.rfile.read(length) if length else b""
        status, content_type, body = self.answer()
        # A client that gave up (a probe's timeout) is not the server's error.
        with contextlib.suppress(ConnectionError):
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        return None  # quiet: a test's output is its assertions


@contextmanager
def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """Run ``handler`` on 127.0.0.1 port 0 until the block ends; yield ``http://…/v1``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    stopped.clear()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        stopped.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class _Silent(_Handler):
    """Accepts and reads the request, then says nothing until it gives up."""

    def answer(self) -> tuple[int, str, bytes]:
        stopped.wait(HANDLER_TIMEOUT_S)
        return 503, "text/plain", b"too late"


class _PlainWeb(_Handler):
    def answer(self) -> tuple[int, str, bytes]:
        return 200, "text/html; charset=utf-8", b"<!doctype html><title>hello</title><p>hello</p>"


class _Error500(_Handler):
    def answer(self) -> tuple[int, str, bytes]:
        return 500, "text/plain", b"Internal Server Error"


class _ErrorPage(_Handler):
    """``python -m http.server``'s answer to a POST: an HTML page over many lines."""

    def answer(self) -> tuple[int, str, bytes]:
        page = (
            '<!DOCTYPE HTML>\n<html lang="en">\n    <head>\n        <meta charset="utf-8">\n'
            '        <style type="text/css">\n        :root {\n            color-scheme: light '
            "dark;\n        }\n        </style>\n        <title>Error response</title>\n"
            "    </head>\n    <body>\n        <h1>Error response</h1>\n        <p>Error code: "
            "501</p>\n        <p>Message: Unsupported method (&#x27;POST&#x27;).</p>\n        "
            "<p>Error code explanation: 501 - Server does not support this operation.</p>\n"
            "    </body>\n</html>\n"
        )
        return 501, "text/html;charset=utf-8", page.encode()


class _KeyRequired(_Handler):
    """A gateway that wants a key loopbench was not given: 401 before any route."""

    def answer(self) -> tuple[int, str, bytes]:
        body = {
            "error": {
                "message": "Incorrect API key provided: sk-****ench.",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
        }
        return 401, "application/json", json.dumps(body).encode()


#: what the forbidden server says: the probe must quote it
FORBIDDEN_MESSAGE = "Project proj_probe does not have access to model sim-model"


class _Forbidden(_Handler):
    """A gateway that read the key and will not serve it: 403 before any route."""

    # HTTP/1.1, as a real gateway answers: the WebSocket client then reads the refused
    # upgrade's body (an HTTP/1.0 answer gives it the status line alone).
    protocol_version = "HTTP/1.1"

    def answer(self) -> tuple[int, str, bytes]:
        body = {
            "error": {
                "message": FORBIDDEN_MESSAGE,
                "type": "invalid_request_error",
                "code": "model_not_allowed",
            }
        }
        return 403, "application/json", json.dumps(body).encode()


_RESPONSE = {
    "id": "resp_foreign",
    "object": "response",
    "created_at": 1751569118,
    "status": "completed",
    "model": "sim-model",
    "output": [],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
    "usage": {"input_tokens": 10, "output_tokens": 1, "total_tokens": 11},
}


_ids = itertools.count(1)


def canned_events(response_id: str, text: str = "ok") -> list[dict[str, Any]]:
    """One text answer's events (docs/protocol.md §1.3), usage fixed whatever was asked."""
    item_id = f"msg_{response_id}"
    snapshot = {**_RESPONSE, "id": response_id, "status": "in_progress", "usage": None}
    part = {"type": "output_text", "text": text, "annotations": []}
    item = {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [part],
    }
    at = {"item_id": item_id, "output_index": 0, "content_index": 0}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": snapshot},
        {"type": "response.in_progress", "response": snapshot},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {**item, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **at, "part": {**part, "text": ""}},
        {"type": "response.output_text.delta", **at, "delta": text, "logprobs": []},
        {"type": "response.output_text.done", **at, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **at, "part": part},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {
            "type": "response.completed",
            "response": {**_RESPONSE, "id": response_id, "output": [item]},
        },
    ]
    return [{**e, "sequence_number": i} for i, e in enumerate(events)]


class _CannedSse(_Handler):
    def answer(self) -> tuple[int, str, bytes]:
        if self.command != "POST" or not self.path.rstrip("/").endswith("/responses"):
            # A WebSocket upgrade or another route: an HTTP-only deployment's answer.
            return 404, "text/plain", b"Not Found"
        events = canned_events(f"resp_canned{next(_ids)}")
        body = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
        return 200, "text/event-stream", body.encode()


class _RateLimited(_Handler):
    """A gateway over its rate limit: 429 to everything, WebSocket upgrades included."""

    protocol_version = "HTTP/1.1"  # the WebSocket client then reads the refused upgrade's body

    def answer(self) -> tuple[int, str, bytes]:
        body = {"error": {"message": RATE_LIMIT_MESSAGE, "type": "rate_limit_exceeded"}}
        return 429, "application/json", json.dumps(body).encode()


#: what the rate-limited server says: the probe must quote it
RATE_LIMIT_MESSAGE = "Rate limit reached for requests per minute"


#: each foreign server: a context manager that gives its base URL while it serves
ForeignServer = Callable[[], AbstractContextManager[str]]
silent_server: ForeignServer = partial(serve, _Silent)
plain_web_server: ForeignServer = partial(serve, _PlainWeb)
error_server: ForeignServer = partial(serve, _Error500)
rate_limited_server: ForeignServer = partial(serve, _RateLimited)
error_page_server: ForeignServer = partial(serve, _ErrorPage)
key_required_server: ForeignServer = partial(serve, _KeyRequired)
forbidden_server: ForeignServer = partial(serve, _Forbidden)
canned_sse_server: ForeignServer = partial(serve, _CannedSse)


@contextmanager
def http_only_server() -> Iterator[str]:
    """The reference server without WebSocket mode: upgrades are answered with HTTP 404."""
    with embedded_server(extra_args=["--no-websocket"]) as url:
        yield url


@contextmanager
def mute_websocket_server() -> Iterator[str]:
    """Accepts every WebSocket upgrade, reads what is sent, answers nothing (a server stuck
    behind its upgrade); its own thread and event loop, stopped when the block ends."""

    async def handler(ws: websockets.asyncio.server.ServerConnection) -> None:
        async for _ in ws:
            pass

    loop = asyncio.new_event_loop()
    started = threading.Event()
    port: list[int] = []

    async def main(stop: asyncio.Event) -> None:
        async with websockets.asyncio.server.serve(handler, "127.0.0.1", 0) as server:
            port.append(next(iter(server.sockets)).getsockname()[1])
            started.set()
            await stop.wait()

    stop = asyncio.Event()
    thread = threading.Thread(target=loop.run_until_complete, args=(main(stop),), daemon=True)
    thread.start()
    try:
        assert started.wait(10), "the mute WebSocket server did not start"
        yield f"http://127.0.0.1:{port[0]}/v1"
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)
        loop.close()
