"""What the reference server saw of one agent run: its ``/metrics`` before and after.

The runs are sequential against one server, so the difference of two scrapes is one run's:
model responses by final status, error answers on the model routes, WebSocket connections
opened and handshakes refused, HTTP POSTs to ``/v1/responses`` (a WebSocket agent that fell
back to HTTP shows there).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import httpx

from harness.metrics.server_series import parse_exposition

MODEL_ROUTES = ("/v1/responses", "/v1/chat/completions", "/v1/messages")


def _label(labels: str, key: str) -> str:
    found = re.search(rf'{key}="([^"]*)"', labels)
    return found.group(1) if found else ""


@dataclass(frozen=True, slots=True)
class ServerCounts:
    completed: int = 0
    incomplete: int = 0
    failed: int = 0
    errors: int = 0
    ws_opened: int = 0
    ws_refused: int = 0
    responses_posts: int = 0

    def __sub__(self, other: ServerCounts) -> ServerCounts:
        return ServerCounts(
            *(getattr(self, f) - getattr(other, f) for f in self.__dataclass_fields__)
        )


def scrape(base_url: str) -> ServerCounts:
    """The server's counters now (``base_url``: ``http://127.0.0.1:PORT/v1``)."""
    text = httpx.get(base_url.removesuffix("/v1") + "/metrics", timeout=10).text
    c: Counter[str] = Counter()
    for name, labels, value in parse_exposition(text):
        n = int(value)
        if name == "loopbench_server_responses_total":
            c[_label(labels, "status")] += n
        elif name == "loopbench_server_errors_total" and _label(labels, "route") in MODEL_ROUTES:
            c["errors"] += n
        elif name == "loopbench_server_websocket_connections_opened_total":
            c["ws_opened"] += n
        elif name == "loopbench_server_websocket_handshakes_refused_total":
            c["ws_refused"] += n
        elif (
            name == "loopbench_server_http_requests_total"
            and _label(labels, "route") == "/v1/responses"
            and _label(labels, "method") == "POST"
        ):
            c["responses_posts"] += n
    return ServerCounts(
        completed=c["completed"],
        incomplete=c["incomplete"],
        failed=c["failed"],
        errors=c["errors"],
        ws_opened=c["ws_opened"],
        ws_refused=c["ws_refused"],
        responses_posts=c["responses_posts"],
    )
