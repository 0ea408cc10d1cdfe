"""Property-based fuzzing of HTTP bodies and WebSocket frames against a live reference server.

Every input gets a documented answer (a 4xx error body, an ``error`` event, or
a response that starts), and afterwards the server still answers a valid
request, its memory stayed bounded, and nothing of the requests reached its log.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tools.fuzz import DOCUMENTED_CODES  # one table: the tool's and this test's
from tools.soak import ServerProcess, rss_kib, server_process

HTTP_EXAMPLES = 250
WS_EXAMPLES = 150
CANARY = "canary-7f3a91"  # written into request content; must never appear in the server's log
MAX_BODY = 64 * 1024
RSS_GROWTH_LIMIT_KIB = 96 * 1024
tried = {"http": 0, "ws": 0}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    args = ["--store", ":memory:", "--max-body-bytes", str(MAX_BODY)]
    args += ["--max-ws-message-bytes", str(MAX_BODY), "--default-tool-calls", "1"]
    # A fast engine: valid requests among the examples finish in milliseconds.
    args += ["--set", "engine.sustained_tps=50000", "--set", "engine.burst_tps=100000"]
    with server_process(args) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


# -- strategies --------------------------------------------------------------------------------

text = st.text(max_size=40) | st.just(CANARY)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)
numbers = st.sampled_from([0, -1, 1, 2**31, 2**63, 10**30, -(10**30), 1e308, -1e308, 0.5, 4])
item = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "bogus"]), "content": text}
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call_output"), "call_id": text, "output": json_values}
    ),
    st.fixed_dictionaries(
        {"type": st.just("function_call"), "call_id": text, "name": text, "arguments": text}
    ),
    json_values,
)
tool = st.one_of(
    st.fixed_dictionaries(
        {
            "type": st.just("function"),
            "name": text,
            "parameters": st.one_of(
                st.just({"type": "object", "properties": {"q": {"type": "string"}}}),
                st.fixed_dictionaries(
                    {
                        "type": st.just("object"),
                        "properties": st.dictionaries(
                            st.sampled_from(["a", "b"]),
                            st.fixed_dictionaries(
                                {
                                    "type": st.sampled_from(["integer", "array", "number", "x"]),
                                    "minimum": numbers,
                                    "maximum": numbers,
                                    "minItems": numbers,
                                }
                            ),
                            max_size=2,
                        ),
                    }
                ),
                json_values,
            ),
        }
    ),
    json_values,
)
hint_values = st.sampled_from(["1", "8", "-3", "99999999999999999999999", "abc", "", "1e9"])
metadata = st.one_of(
    st.dictionaries(
        st.sampled_from(
            [
                "loopbench.output_tokens",
                "loopbench.tool_calls",
                "loopbench.parallel_calls",
                "loopbench.fail",
                CANARY,
            ]
        ),
        hint_values | st.just("mid_stream"),
        max_size=3,
    ),
    json_values,
)
create_fields: dict[str, Any] = {
    "model": st.one_of(st.just("sim-model"), json_values),
    "input": st.one_of(text, st.lists(item, max_size=5), json_values),
    "instructions": st.one_of(st.none(), text, json_values),
    "tools": st.one_of(st.lists(tool, max_size=3), json_values),
    "tool_choice": st.one_of(st.sampled_from(["auto", "none", "required"]), json_values),
    # Any other positive integer is a legitimate (and maybe long) request: not fuzz material.
    "max_output_tokens": st.one_of(numbers, st.none(), text, st.lists(json_scalars, max_size=2)),
    "metadata": metadata,
    "previous_response_id": st.one_of(st.none(), text),
    "store": st.one_of(st.booleans(), json_values),
    "stream": st.one_of(st.booleans(), json_values),
    "stream_id": st.one_of(text, json_values),
    "parallel_tool_calls": st.one_of(st.booleans(), json_values),
    "generate": st.one_of(st.booleans(), json_values),
}
near_valid = st.fixed_dictionaries({}, optional=create_fields).map(
    lambda extra: {"model": "sim-model", "input": "hi " + CANARY, **extra}
)


def _encode(doc: Any) -> bytes:
    return json.dumps(doc).encode()


raw_bytes = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda b: b'{"model":"' + b + b'"}', st.binary(max_size=20)),  # invalid UTF-8
    st.integers(1, 5000).map(lambda n: b"[" * n + b"]" * n),  # deep nesting (orjson: 1024 max)
    st.integers(1, 5000).map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
    st.integers(1, 3).map(lambda k: b'{"model":"m","input":"' + b"x" * (MAX_BODY * k) + b'"}'),
    st.integers(100, 3000).map(
        lambda n: _encode({"model": "m", "input": [{"role": "user", "content": "x"}] * n})
    ),
)
http_bodies = st.one_of(
    near_valid.map(_encode), json_values.map(_encode), raw_bytes, st.just(CANARY.encode())
)


def _check_error(doc: Any) -> None:
    err = doc["error"]
    assert err["code"] in DOCUMENTED_CODES, err
    assert isinstance(err["message"], str) and err["message"]


# -- HTTP ----------------------------------------------------------------------------------------


@settings(
    max_examples=HTTP_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(body=http_bodies, declared=st.booleans())
def test_http_bodies_get_documented_answers(
    client: httpx.Client, body: bytes, declared: bool
) -> None:
    tried["http"] += 1
    headers = {"content-type": "application/json"}
    # Without a content-length (chunked upload) the body limit must hold while reading.
    content: Any = (
        body if declared else iter([body[i : i + 8192] for i in range(0, len(body), 8192)])
    )
    with client.stream("POST", "/responses", content=content, headers=headers) as resp:
        if resp.status_code == 200:
            # A response started: read a little, then drop the connection mid-stream.
            for _ in resp.iter_raw(256):
                break
            return
        assert resp.status_code in (400, 413), resp.status_code
        doc = json.loads(resp.read())
        _check_error(doc)
        if resp.status_code == 413:
            assert doc["error"]["code"] == "request_too_large"


# -- WebSocket -----------------------------------------------------------------------------------

ws_frames = st.one_of(
    near_valid.map(lambda d: {"type": "response.create", **d}).map(json.dumps),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["response.append", "response.steer", "bogus", ""])},
        optional={"response_id": text, "input": json_values},
    ).map(json.dumps),
    json_values.map(json.dumps),
    st.text(max_size=100),
    st.binary(max_size=200),  # binary frames
    st.integers(1, 3000).map(lambda n: "[" * n + "]" * n),
    st.integers(1, 2).map(
        lambda k: '{"type":"response.create","x":"' + "y" * (MAX_BODY * k) + '"}'
    ),
)


def _ws(server: ServerProcess) -> ClientConnection:
    url = server.url.replace("http://", "ws://", 1) + "/responses"
    return connect(url, compression=None, max_size=None, open_timeout=10, close_timeout=2)


@settings(
    max_examples=WS_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(frames=st.lists(ws_frames, min_size=1, max_size=3), abrupt=st.booleans())
def test_ws_frames_get_documented_answers(
    server: ServerProcess, frames: list[str | bytes], abrupt: bool
) -> None:
    tried["ws"] += 1
    with _ws(server) as conn:
        try:
            for frame in frames:
                conn.send(frame)
                # Events of an earlier frame's response may come first: each must be sane.
                doc = json.loads(conn.recv(timeout=30))
                if doc["type"] == "error" and "sequence_number" not in doc:
                    assert doc["status"] in (400, 429), doc
                    _check_error(doc)
                elif doc["type"] == "error":  # inside a response: the loopbench.fail hint
                    assert doc["error"]["code"] == "server_error", doc
                else:
                    assert doc["type"].startswith("response."), doc
        except ConnectionClosed as exc:
            # Only the protocol layer's own refusal of an oversized frame closes the socket.
            assert exc.rcvd is not None and exc.rcvd.code == 1009, exc
        if abrupt:
            # Drop the TCP connection without a close frame, mid-generation if one started.
            conn.socket.shutdown(socket.SHUT_RDWR)


# -- broken connections --------------------------------------------------------------------------


def _raw(server: ServerProcess) -> socket.socket:
    host, port = server.url.split("//")[1].split("/")[0].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def _read_to_eof(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_half_closed_truncated_and_reset_connections_leave_no_trace(server: ServerProcess) -> None:
    body = json.dumps(
        {"model": "m", "input": "hi " + CANARY, "stream": True, "tool_choice": "none"}
    ).encode()
    head = (
        b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
    )
    rst = b"\x01\x00\x00\x00\x00\x00\x00\x00"  # SO_LINGER on, 0 s: close() sends a reset
    for _ in range(20):
        # Half a request, or a whole one, then a half-close: uvicorn treats the EOF as the
        # peer leaving, so the request is dropped (documented) and the connection closed.
        for payload in (head + body[: len(body) // 2], head + body):
            sock = _raw(server)
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
            assert _read_to_eof(sock) == b""
            sock.close()
        # headers only, then a reset; and a streaming response reset after its first bytes
        sock = _raw(server)
        sock.sendall(head)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, rst)
        sock.close()
        sock = _raw(server)
        sock.sendall(head + body)
        assert sock.recv(64).startswith(b"HTTP/1.1 200")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, rst)
        sock.close()
    assert server.health()["status"] == "ok"


# -- afterwards ----------------------------------------------------------------------------------


def test_after_fuzzing_the_server_is_healthy_bounded_and_quiet(
    server: ServerProcess, client: httpx.Client
) -> None:
    assert tried["http"] >= HTTP_EXAMPLES // 2 and tried["ws"] >= WS_EXAMPLES // 2, tried
    print(f"fuzz cases tried: http {tried['http']}, ws {tried['ws']}")
    before = rss_kib(server.pid)
    assert before is not None
    # A valid request is answered in full, over both transports.
    resp = client.post(
        "/responses",
        json={"model": "sim-model", "input": "hi", "tool_choice": "none", "max_output_tokens": 16},
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["usage"]["output_tokens"] == 16, resp.text
    with _ws(server) as conn:
        conn.send(json.dumps({"type": "response.create", "model": "m", "input": "hi"}))
        while True:
            event = json.loads(conn.recv(timeout=30))
            if event["type"] in ("response.completed", "response.failed", "error"):
                break
        assert event["type"] == "response.completed", event
    assert server.proc.poll() is None
    # Memory: one warm process of this server sits near 50 MiB; dozens of abandoned
    # generations and 64 KiB bodies must not have left more than the limit behind.
    first = _baseline_rss.get("kib")
    assert first is not None
    print(f"server RSS: {first / 1024:.1f} MiB before fuzzing, {before / 1024:.1f} MiB after")
    assert before - first < RSS_GROWTH_LIMIT_KIB, (first, before)
    log = "".join(server.stderr)
    assert CANARY not in log, log[-2000:]
    assert "Traceback" not in log, log[-3000:]


_baseline_rss: dict[str, int] = {}


@pytest.fixture(scope="module", autouse=True)
def _record_baseline(server: ServerProcess) -> None:
    kib = rss_kib(server.pid)
    assert kib is not None
    _baseline_rss["kib"] = kib
