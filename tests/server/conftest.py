"""Servers with non-default options, started for one module and always stopped; a client
that leaves without reading."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import orjson

from harness.run.embedded import embedded_server


@contextmanager
def configured_server(*args: str, store: str = ":memory:") -> Iterator[str]:
    """Base URL of a reference server started with ``args`` (its own store, in memory by default)."""
    with embedded_server(extra_args=["--store", store, *args]) as url:
        yield url


def ws_url(base_url: str) -> str:
    return base_url.replace("http://", "ws://", 1) + "/responses"


def hinted_body(tokens: int, **fields: Any) -> dict[str, Any]:
    """A Responses request without tools whose answer is ``tokens`` long (by the hint)."""
    return {
        "model": "sim-model",
        "input": "hi",
        "tool_choice": "none",
        "metadata": {"loopbench.output_tokens": str(tokens)},
        **fields,
    }


def post_and_leave(base_url: str, body: dict[str, Any], until: Callable[[], object]) -> None:
    """POST ``body`` to ``/responses`` on a raw socket, wait for ``until()``, then close
    without reading the answer (a client that leaves mid-request)."""
    parts = urlsplit(base_url)
    assert parts.hostname is not None and parts.port is not None
    data = orjson.dumps(body)
    request = (
        f"POST {parts.path}/responses HTTP/1.1\r\nhost: {parts.netloc}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
    ).encode() + data
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(request)
        until()
