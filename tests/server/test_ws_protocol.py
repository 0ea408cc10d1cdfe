"""WebSocket mode semantics (docs/protocol.md §2.4) over real sockets with a raw websockets client."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import websockets
from websockets.asyncio.client import ClientConnection, connect

from tests.function_tools import strict_tool
from tests.server.conftest import configured_server, ws_url

TERMINAL = ("response.completed", "response.incomplete", "response.failed")
TOOLS = [strict_tool("read_file", path={"type": "string"})]


@pytest.fixture(scope="module")
def small_server() -> Iterator[str]:
    """Tight limits so each one can be hit cheaply."""
    with configured_server(
        "--ws-max-lanes",
        "2",
        "--ws-max-in-flight",
        "1",
        "--ws-max-queued",
        "1",
        "--max-ws-message-bytes",
        "4096",
        "--ws-max-cached-bytes",
        "1",
        "--ws-max-lifetime-s",
        "1.0",
    ) as url:
        yield url


def create(**fields: Any) -> str:
    body: dict[str, Any] = {"type": "response.create", "model": "sim", "store": False}
    body.setdefault("metadata", {"loopbench.output_tokens": "8"})
    body.update(fields)
    return orjson.dumps(body).decode()


async def events_until(
    conn: ClientConnection, stop: Any, limit: int = 10_000
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for _ in range(limit):
        event = orjson.loads(await asyncio.wait_for(conn.recv(), 30))
        out.append(event)
        if stop(event):
            return out
    raise AssertionError(f"no stop event in {limit} events")


def is_terminal(event: dict[str, Any]) -> bool:
    return event["type"] in TERMINAL or (
        event["type"] == "error" and "sequence_number" not in event
    )


async def one(conn: ClientConnection, payload: str) -> list[dict[str, Any]]:
    await conn.send(payload)
    return await events_until(conn, is_terminal)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_chain_hits_the_cache_and_events_echo_stream_id(server_url: str) -> None:
    async def main() -> None:
        async with connect(ws_url(server_url)) as conn:
            first = await one(conn, create(input="hi", stream_id="main"))
            assert all(e.get("stream_id") == "main" for e in first)
            rid = first[-1]["response"]["id"]
            second = await one(
                conn, create(input="more", previous_response_id=rid, stream_id="main")
            )
            assert second[-1]["type"] == "response.completed"
            assert second[-1]["response"]["sim_timing"]["cache"] == "hit"
            plain = await one(conn, create(input="default lane"))
            assert all("stream_id" not in e for e in plain)

    run(main())


def test_lanes_run_concurrently_and_fifo_within_a_lane(server_url: str) -> None:
    async def main() -> None:
        async with connect(ws_url(server_url)) as conn:
            meta = {"loopbench.output_tokens": "150"}
            await conn.send(create(input="a1", stream_id="a", metadata=meta))
            await conn.send(create(input="a2", stream_id="a", metadata=meta))
            await conn.send(create(input="b1", stream_id="b", metadata=meta))
            seen: list[tuple[str, str]] = []
            done = 0
            while done < 3:
                e = orjson.loads(await asyncio.wait_for(conn.recv(), 30))
                seen.append((e["stream_id"], e["type"]))
                done += e["type"] == "response.completed"
            lanes_before_first_done = {
                s for s, _ in seen[: seen.index(("a", "response.completed"))]
            }
            assert lanes_before_first_done == {"a", "b"}  # b interleaved with a1
            a_events = [t for s, t in seen if s == "a"]
            # a2 starts only after a1 completed: the lane is FIFO and never overlaps.
            assert a_events.index("response.completed") < a_events.index("response.created", 1)

    run(main())


def test_cross_lane_fork_hits_and_failed_fork_keeps_the_parent(server_url: str) -> None:
    async def main() -> None:
        async with connect(ws_url(server_url)) as conn:
            parent = (await one(conn, create(input="root", stream_id="p")))[-1]["response"]["id"]
            bad = await one(
                conn,
                create(input="x", stream_id="f1", previous_response_id=parent, tool_choice="bogus"),
            )
            assert bad[-1]["type"] == "error" and bad[-1]["stream_id"] == "f1"
            fork = await one(
                conn, create(input="fork", stream_id="f2", previous_response_id=parent)
            )
            assert fork[-1]["response"]["sim_timing"]["cache"] == "hit"
            again = await one(conn, create(input="on", stream_id="p", previous_response_id=parent))
            assert again[-1]["response"]["sim_timing"]["cache"] == "hit"

    run(main())


def test_failed_same_lane_continuation_evicts_the_referenced_response(server_url: str) -> None:
    async def main() -> None:
        async with connect(ws_url(server_url)) as conn:
            rid = (await one(conn, create(input="root")))[-1]["response"]["id"]
            bad = await one(conn, create(input="x", previous_response_id=rid, tool_choice="bogus"))
            assert bad[-1]["error"]["param"] == "tool_choice" and bad[-1]["status"] == 400
            miss = await one(conn, create(input="y", previous_response_id=rid))
            err = miss[-1]
            assert err["type"] == "error" and err["error"]["code"] == "previous_response_not_found"
            assert err["error"]["param"] == "previous_response_id"

    run(main())


def test_store_true_miss_falls_back_to_the_store_on_a_new_connection(server_url: str) -> None:
    async def main() -> None:
        async with connect(ws_url(server_url)) as conn:
            rid = (await one(conn, create(input="root", store=True)))[-1]["response"]["id"]
        async with connect(ws_url(server_url)) as conn:
            nostore = await one(conn, create(input="y", previous_response_id=rid, store=False))
            # store=false needs the cache: the new connection has none.
            assert nostore[-1]["error"]["code"] == "previous_response_not_found"
            got = await one(conn, create(input="y", previous_response_id=rid, store=True))
            assert got[-1]["type"] == "response.completed"
            assert got[-1]["response"]["sim_timing"]["cache"] == "store"

    run(main())


def test_generate_false_warms_up_without_output(server_url: str) -> None:
    async def main() -> None:
        async with connect(ws_url(server_url)) as conn:
            warm = await one(conn, create(input="system prompt", generate=False, tools=TOOLS))
            assert [e["type"] for e in warm] == [
                "response.created",
                "response.in_progress",
                "response.completed",
            ]
            resp = warm[-1]["response"]
            assert resp["output"] == [] and resp["usage"]["output_tokens"] == 0
            assert resp["usage"]["input_tokens"] > 0
            nxt = await one(conn, create(input="go", previous_response_id=resp["id"], tools=TOOLS))
            assert nxt[-1]["response"]["sim_timing"]["cache"] == "hit"

    run(main())


def test_errors_keep_the_socket_open(server_url: str) -> None:
    async def main() -> None:
        async with connect(ws_url(server_url)) as conn:
            await conn.send('{"type": "response.cancel"}')
            e = orjson.loads(await conn.recv())
            assert e["type"] == "error" and e["error"]["code"] == "unknown_event_type"
            await conn.send("{nope")
            assert orjson.loads(await conn.recv())["error"]["code"] == "invalid_json"
            await conn.send(b"\x00binary")
            assert orjson.loads(await conn.recv())["error"]["code"] == "invalid_message"
            bg = await one(conn, create(input="x", background=True, stream_id="s"))
            assert bg[-1]["error"]["code"] == "unsupported_parameter"
            assert bg[-1]["stream_id"] == "s"
            bad = await one(conn, create(input="x", stream_id=""))
            assert bad[-1]["error"]["code"] == "invalid_stream_id"
            assert bad[-1]["error"]["param"] == "stream_id" and "stream_id" not in bad[-1]
            await conn.send(
                orjson.dumps(
                    {"type": "response.steer", "previous_response_id": "resp_1", "input": "hi"}
                ).decode()
            )
            steer = orjson.loads(await conn.recv())
            assert steer["type"] == "response.steer.failed"
            assert steer["error"]["code"] == "steering_not_supported"
            ok = await one(conn, create(input="still open"))
            assert ok[-1]["type"] == "response.completed"

    run(main())


def test_pings_are_answered_while_generating(server_url: str) -> None:
    async def main() -> None:
        async with connect(ws_url(server_url), ping_interval=0.05, ping_timeout=0.5) as conn:
            # ~0.8 s of decoding at 1,000 tokens/s: over a dozen ping rounds during one response.
            events = await one(
                conn, create(input="long", metadata={"loopbench.output_tokens": "800"})
            )
            assert events[-1]["type"] == "response.completed"
            assert conn.latency > 0  # a pong came back
            assert conn.state is websockets.protocol.State.OPEN

    run(main())


def test_lane_limit_queue_limit_and_message_size(small_server: str) -> None:
    async def main() -> None:
        async with connect(ws_url(small_server)) as conn:
            for lane in ("a", "b"):
                assert (await one(conn, create(input="x", stream_id=lane)))[-1]["type"] == (
                    "response.completed"
                )
            third = await one(conn, create(input="x", stream_id="c"))
            assert third[-1]["error"]["code"] == "websocket_stream_limit_reached"
            assert third[-1]["stream_id"] == "c" and "(2)" in third[-1]["error"]["message"]
            # one in flight, one queued, the third is refused (counted at admission: deterministic)
            meta = {"loopbench.output_tokens": "300"}
            for lane in ("a", "b", None):
                await conn.send(create(input="q", stream_id=lane, metadata=meta))
            got = await events_until(
                conn, lambda e: e["type"] == "error" and "sequence_number" not in e
            )
            assert got[-1]["status"] == 429 and got[-1]["error"]["code"] == "websocket_queue_full"
            assert "stream_id" not in got[-1]  # the third create (default lane) was the one refused
            await events_until(conn, lambda e: e["type"] == "response.completed")
            await events_until(conn, lambda e: e["type"] == "response.completed")
            await conn.send(create(input="y" * 5000))
            big = orjson.loads(await conn.recv())
            assert big["error"]["code"] == "message_too_large"

    run(main())


def test_cached_bytes_limit_turns_store_false_continuations_into_misses(small_server: str) -> None:
    async def main() -> None:
        async with connect(ws_url(small_server)) as conn:
            rid = (await one(conn, create(input="root")))[-1]["response"]["id"]
            miss = await one(conn, create(input="next", previous_response_id=rid))
            assert miss[-1]["error"]["code"] == "previous_response_not_found"

    run(main())


def test_lifetime_limit_error_then_close_1001(small_server: str) -> None:
    async def main() -> None:
        async with connect(ws_url(small_server)) as conn:
            assert (await one(conn, create(input="x")))[-1]["type"] == "response.completed"
            await asyncio.sleep(1.05)
            late = await one(conn, create(input="late"))
            assert late[-1]["error"]["code"] == "websocket_connection_limit_reached"
            assert "stream_id" not in late[-1]
            with pytest.raises(websockets.exceptions.ConnectionClosed) as info:
                await asyncio.wait_for(conn.recv(), 10)
            assert info.value.rcvd is not None and info.value.rcvd.code == 1001

    run(main())


def test_append_mode_pauses_and_resumes_one_response(server_url: str) -> None:
    async def main() -> None:
        async with connect(ws_url(server_url) + "?mode=append") as conn:
            first = await one_or_done(conn, create(input="go", tools=TOOLS, tool_choice="required"))
            done = first[-1]
            assert done["type"] == "response.done" and done["response"]["status"] == "in_progress"
            rid = done["response"]["id"]
            calls = [
                e["item"]
                for e in first
                if e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call"
            ]
            assert len(calls) == 1
            await conn.send(
                orjson.dumps(
                    {"type": "response.append", "response_id": "resp_other", "input": "x"}
                ).decode()
            )
            assert orjson.loads(await conn.recv())["error"]["code"] == "response_not_found"
            output = {"type": "function_call_output", "call_id": "call_wrong", "output": "x"}
            await conn.send(
                orjson.dumps(
                    {"type": "response.append", "response_id": rid, "input": [output]}
                ).decode()
            )
            assert orjson.loads(await conn.recv())["error"]["code"] == "invalid_append_input"
            output["call_id"] = calls[0]["call_id"]
            rest = await one_or_done(
                conn,
                orjson.dumps(
                    {
                        "type": "response.append",
                        "response_id": rid,
                        "input": [output],
                        "tool_choice": "none",
                    }
                ).decode(),
            )
            final = rest[-1]
            assert final["type"] == "response.completed" and final["response"]["id"] == rid
            # one response: sequence numbers continue across the pause
            assert rest[0]["sequence_number"] == done["sequence_number"] + 1
            assert final["response"]["output"][0]["type"] == "function_call"
            assert final["response"]["output"][-1]["type"] == "message"
            assert final["response"]["sim_timing"]["api_pre"] == 0.0

    run(main())


async def one_or_done(conn: ClientConnection, payload: str) -> list[dict[str, Any]]:
    await conn.send(payload)
    return await events_until(conn, lambda e: is_terminal(e) or e["type"] == "response.done")


def test_no_websocket_refuses_the_upgrade_with_a_client_error_saying_so() -> None:
    """``--no-websocket`` (an HTTP-only endpoint): the upgrade is a 404 with a JSON error
    that names the reason, not a 500 that reads as a crash."""
    with configured_server("--no-websocket") as url:
        host, port = url.removeprefix("http://").split("/")[0].split(":")
        request = (
            "GET /v1/responses HTTP/1.1\r\n"
            f"Host: {host}:{port}\r\n"
            "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Authorization: Bearer sk-loopbench\r\n\r\n"
        )
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(request.encode())
            raw = b""
            while chunk := sock.recv(65536):
                raw += chunk
        # and a WebSocket client library sees the same status
        with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
            asyncio.run(_open(ws_url(url)))
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 404 Not Found"
    assert "content-type: application/json" in [line.lower() for line in lines]
    error = orjson.loads(body)["error"]
    assert error["code"] == "websocket_disabled"
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("WebSocket mode is disabled on this server")
    assert refused.value.response.status_code == 404


async def _open(url: str) -> None:
    async with connect(url, additional_headers={"Authorization": "Bearer sk-loopbench"}):
        pass
