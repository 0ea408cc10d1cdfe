"""``loopbench record``: the proxy relays bytes unchanged and writes what the client did.

Real sockets on 127.0.0.1: the session's reference server (tests/conftest.py) or a canned
upstream started here, the proxy in this process's event loop, and real clients through
it: the harness's own transports (http, ws, chat, messages) and the openai-agents SDK.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from harness.client.options import TransportOptions
from harness.record import observer_process
from harness.record.observe import build_trace
from harness.record.observer_process import ObserverError
from harness.record.proxy import (
    OBSERVERS,
    RecordingProxy,
    Upstream,
    write_trace,
)
from harness.report.results import load_run
from harness.transports import make_transport
from harness.wire.exit_codes import ExitCode
from harness.wire.ws_frames import encode_frame
from harness.workload.records import TurnRecord
from harness.workload.trace import TraceRollout, dump_trace, read_trace
from tests.runs import NO_MODELLED_WAITS, ROOT, run_cli, run_file, run_plans
from tests.server.conftest import hinted_body
from tests.transports.test_chat_messages import plans

pytestmark = pytest.mark.timeout(120)


@asynccontextmanager
async def recording(
    upstream: str, keep_content: bool = False, observer: str = "process"
) -> AsyncIterator[RecordingProxy]:
    proxy = RecordingProxy(Upstream.parse(upstream), keep_content=keep_content, observer=observer)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


def _base(proxy: RecordingProxy) -> str:
    return f"http://127.0.0.1:{proxy.port}/v1"


def _run(coro: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(coro(), 90))


# --- the harness's transports as clients ----------------------------------------------------


@pytest.mark.parametrize("observer", OBSERVERS)
@pytest.mark.parametrize("transport", ["http", "ws", "chat", "messages"])
def test_each_api_is_recorded_as_the_client_ran_it(
    server_url: str, transport: str, observer: str
) -> None:
    """The same reading wherever it runs: the observer's own process or a thread."""
    rollouts = plans(2)
    records: list[TurnRecord] = []

    async def main() -> list[TraceRollout]:
        async with recording(server_url, observer=observer) as proxy:
            if observer == "process":
                # the reading happens in another process, not on a thread of this one
                assert proxy._process is not None and proxy._process.child.pid != os.getpid()
            client = make_transport(transport, TransportOptions(_base(proxy)))
            await run_plans(client, rollouts, records.append)
        assert not proxy.errors
        return build_trace(proxy.exchanges)[1]

    trace = _run(main)
    assert all(r.status == "completed" for r in records)
    assert len(trace) == len(rollouts)
    for plan, rec in zip(rollouts, trace, strict=True):
        assert rec.meta["api"] == {"http": "responses", "ws": "responses"}.get(transport, transport)
        assert rec.meta["transport"] == ("ws" if transport == "ws" else "http")
        assert [len(t.tool_calls) for t in rec.turns] == [t.tool_calls for t in plan.turns]
        turns = [r for r in records if r.rollout_id == plan.rollout_id]
        assert [t.output_tokens for t in rec.turns] == [r.output_tokens for r in turns]
        assert [t.input_tokens for t in rec.turns] == [r.input_tokens for r in turns]
        assert [t.cached_tokens for t in rec.turns] == [r.cached_tokens for r in turns]
        for seen, planned in zip(rec.turns, plan.turns, strict=True):
            assert [c.output_tokens for c in seen.tool_calls] == list(planned.tool_output_tokens)
            # tool time: the client's tool latency, then the proxy's view of the gap
            assert all(c.latency_ms >= min(planned.tool_latency_ms) for c in seen.tool_calls)
        assert rec.user_prompt_tokens == plan.user_prompt_tokens
        assert not any(t.subagents for t in rec.turns)


# --- the openai-agents SDK, a sub-agent, and the replay -------------------------------------


def _agents_run(base_url: str) -> tuple[Any, list[str]]:
    from agents import (
        Agent,
        ModelSettings,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    looked_up: list[str] = []

    @function_tool
    def lookup(topic: str) -> str:
        """Look a topic up in the notes."""
        looked_up.append(topic)
        return "SECRET-NOTES " + topic + " " + "n" * 120

    client = AsyncOpenAI(base_url=base_url, api_key="sk-dummy-key-1234", max_retries=0)
    model = OpenAIResponsesModel(model="sim", openai_client=client)
    researcher = Agent(
        name="researcher",
        instructions="You research one topic with the lookup tool.",
        tools=[lookup],
        model=model,
        model_settings=ModelSettings(tool_choice="auto", metadata={"loopbench.tool_calls": "2"}),
    )
    main = Agent(
        name="main",
        instructions="You are a careful PRIVATE-INSTRUCTIONS assistant.",
        # two research calls at once: two sub-agents running concurrently, each with its tools
        tools=[researcher.as_tool(tool_name="research", tool_description="Research.")],
        model=model,
        model_settings=ModelSettings(
            tool_choice="auto",
            parallel_tool_calls=True,
            metadata={"loopbench.tool_calls": "2", "loopbench.parallel_calls": "2"},
        ),
    )

    async def go() -> Any:
        try:
            return await Runner.run(main, "USER-PROMPT: find out about asyncio.")
        finally:
            await client.close()

    return _run(go), looked_up


def _record_agents(server_url: str, keep_content: bool) -> tuple[Any, list[str], RecordingProxy]:
    holder: dict[str, Any] = {}

    async def main() -> None:
        async with recording(server_url, keep_content) as proxy:
            holder["proxy"] = proxy
            loop = asyncio.get_running_loop()
            # The SDK runs its own event loop: give it a thread, the proxy keeps this one.
            holder["result"] = await loop.run_in_executor(None, _agents_run, _base(proxy))

    _run(main)
    result, looked_up = holder["result"]
    return result, looked_up, holder["proxy"]


def test_openai_agents_sdk_is_recorded_then_replayed(fast_server_url: str, tmp_path: Path) -> None:
    result, looked_up, proxy = _record_agents(fast_server_url, keep_content=False)
    out = tmp_path / "agents.jsonl"
    write_trace(proxy.exchanges, str(out))
    text = out.read_text()
    # no content and no credential by default
    for secret in ("SECRET-NOTES", "PRIVATE-INSTRUCTIONS", "USER-PROMPT", "sk-dummy", "asyncio"):
        assert secret not in text
    [rollout] = read_trace(out)
    raw = result.raw_responses
    # the main agent's turns: what the SDK got back, call for call and token for token
    assert len(rollout.turns) == len(raw)
    for turn, resp in zip(rollout.turns, raw, strict=True):
        calls = [o for o in resp.output if o.type == "function_call"]
        assert len(turn.tool_calls) == len(calls)
        details = resp.usage.output_tokens_details
        reasoning = details.reasoning_tokens if details else 0
        assert turn.output_tokens == resp.usage.output_tokens - reasoning
        assert turn.input_tokens == resp.usage.input_tokens
    # the research tool ran a conversation of its own: recorded as the sub-agent answering it
    research = [
        (i, j)
        for i, resp in enumerate(raw)
        for j, o in enumerate(o for o in resp.output if o.type == "function_call")
        if o.name == "research"
    ]
    assert research, "the scripted model was expected to call the research tool"
    subs = [(i, t) for i, t in enumerate(rollout.turns) for _ in t.subagents]
    assert [i for i, _ in subs] == [i for i, _ in research]
    for i, j in research:
        call = rollout.turns[i].tool_calls[j]
        assert call.subagent is not None
        sub = rollout.turns[i].subagents[call.subagent]
        assert sub.join == "wait" and len(sub.turns) == 3  # two lookups, then its answer
        assert call.output_tokens == sub.result_tokens == sub.turns[-1].output_tokens
    # every lookup the SDK ran is a recorded tool call (main's and the sub-agent's)
    lookups = sum(1 for t in rollout.turns for c in t.tool_calls if c.subagent is None) + sum(
        len(t.tool_calls) for tt in rollout.turns for s in tt.subagents for t in s.turns
    )
    assert lookups == len(looked_up)

    # replay through `loopbench run` and compare the rollout's shape
    scenario = tmp_path / "replay.yaml"
    scenario.write_text(
        "name: agents-replay\nseed: 1\ntransports: [http]\n"
        "rollout:\n  trace: agents.jsonl\nload:\n  mode: closed\n  concurrency: 1\n"
    )
    # as `loopbench run FILE --run-id r`, in this process, without the report it does not read
    run_file(scenario, tmp_path / "results", server_args=NO_MODELLED_WAITS)
    run = load_run(tmp_path / "results" / "r")
    rows = run.turns[run.turns["rollout_id"] == 0]
    turns = rows[rows["conversation"] == 0].sort_values("turn_index")
    assert len(turns) == len(rollout.turns)
    assert list(turns["output_tokens"]) == [t.output_tokens for t in rollout.turns]
    # ... and the recorded sub-agents run again as concurrent conversations of their own
    recorded_subs = [s for t in rollout.turns for s in t.subagents]
    replayed_subs = rows[rows["conversation"] > 0].groupby("conversation")
    assert replayed_subs.ngroups == len(recorded_subs)
    assert sorted(len(g) for _, g in replayed_subs) == sorted(len(s.turns) for s in recorded_subs)
    assert set(rows[rows["conversation"] > 0]["parent_conversation"]) == {0}
    replayed = run.rollouts.iloc[0]
    assert int(replayed["turns"]) == len(rollout.turns) + sum(len(s.turns) for s in recorded_subs)
    # the replay waits the recorded tool time (each turn's longest call; a call a sub-agent
    # answers waits for the sub-agent instead, which subagent-aware transports replay)
    recorded_ms = sum(max((c.latency_ms for c in t.tool_calls), default=0) for t in rollout.turns)
    assert int(replayed["tool_ns"]) >= recorded_ms * 1e6 * 0.999


def test_keep_content_stores_the_bodies_in_meta(fast_server_url: str, tmp_path: Path) -> None:
    _, _, proxy = _record_agents(fast_server_url, keep_content=True)
    out = tmp_path / "kept.jsonl"
    write_trace(proxy.exchanges, str(out))
    text = out.read_text()
    assert "PRIVATE-INSTRUCTIONS" in text and "SECRET-NOTES" in text
    assert "sk-dummy" not in text  # headers are never stored
    [rollout] = read_trace(out)
    assert len(rollout.meta["content"]) == len(rollout.turns)


# --- bytes through unchanged ----------------------------------------------------------------


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


SSE_PARTS = [
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nx-odd-Header:  kept  \r\n"
    b"transfer-encoding: chunked\r\n\r\n",
    # an event split across chunks, and a chunk split across writes
    _chunk(b"event: response.created\ndata: "),
    _chunk(b'{"type":"response.created","response":{"id":"resp_1"}}\n\n')[:9],
    _chunk(b'{"type":"response.created","response":{"id":"resp_1"}}\n\n')[9:],
    _chunk(b'event: response.completed\ndata: {"type":"response.completed","response":{}}\n\n'),
    b"0\r\n\r\n",
]
ERROR_BODY = b'{"error":{"message":"upstream overloaded","type":"server_error","code":null}}'
ERROR_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 7\r\n"
    + f"content-length: {len(ERROR_BODY)}\r\n\r\n".encode()
    + ERROR_BODY
)


_STREAMING_BODY = b'{"model":"m","input":"hi","stream":true}'
#: one streaming Responses request, as a client writes it (the canned upstream answers SSE_PARTS)
_STREAMING_REQUEST = (
    b"POST /v1/responses HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
    + f"content-length: {len(_STREAMING_BODY)}\r\n\r\n".encode()
    + _STREAMING_BODY
)


async def _canned_upstream(received: list[bytes]) -> asyncio.Server:
    """Answers each request with SSE_PARTS (written apart) or, for /v1/fail, a 503."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await answer(reader, writer)
        except asyncio.IncompleteReadError:
            pass  # the proxy closed the connection
        finally:
            writer.close()
            await writer.wait_closed()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(
                next(
                    (
                        line.split(b":")[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    b"0",
                )
            )
            received.append(head + await reader.readexactly(length))
            if b" /v1/fail " in head:
                writer.write(ERROR_RESPONSE)
            else:
                for part in SSE_PARTS:
                    writer.write(part)
                    await writer.drain()
                    await asyncio.sleep(0.005)

    return await asyncio.start_server(serve, "127.0.0.1", 0)


async def _read_until(reader: asyncio.StreamReader, until: bytes | int) -> bytes:
    """Read until what came ends with ``until`` (bytes) or is ``until`` bytes long (int), or
    the peer closes."""
    data = b""
    while not (len(data) >= until if isinstance(until, int) else data.endswith(until)):
        chunk = await reader.read(65536)
        if not chunk:
            break
        data += chunk
    return data


async def _exchange(port: int, request: bytes, until: bytes | int) -> bytes:
    """What the server at ``port`` answers to ``request`` (:func:`_read_until`)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    data = await _read_until(reader, until)
    writer.close()
    await writer.wait_closed()
    return data


def test_bytes_and_upstream_errors_pass_through_unchanged() -> None:
    body = b'{"model":"m","input":"hi","stream":true}'
    request = (
        b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1:1\r\nAuthorization: Bearer sk-x\r\n"
        b"X-Custom:  spaced  \r\ncontent-type: application/json\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    received: list[bytes] = []

    async def main() -> tuple[bytes, bytes, RecordingProxy]:
        server = await _canned_upstream(received)
        port = server.sockets[0].getsockname()[1]
        try:
            async with recording(f"http://127.0.0.1:{port}/v1") as proxy:
                ok = await _exchange(proxy.port, request, b"0\r\n\r\n")
                fail = await _exchange(
                    proxy.port,
                    request.replace(b"/v1/responses", b"/v1/fail"),
                    ERROR_BODY,
                )
        finally:
            server.close()
            await server.wait_closed()
        return ok, fail, proxy

    ok, fail, proxy = _run(main)
    assert ok == b"".join(SSE_PARTS)
    assert fail == ERROR_RESPONSE
    # the upstream got the request as sent, but for the Host it needs
    port = Upstream.parse(f"http://127.0.0.1:{1}/v1")
    assert port.host_header == "127.0.0.1:1"
    assert received[0] == request.replace(b"Host: 127.0.0.1:1", received[0].split(b"\r\n")[1])
    assert received[0].split(b"\r\n")[1].startswith(b"Host: 127.0.0.1:")
    assert received[1].startswith(b"POST /v1/fail HTTP/1.1")
    # the failed exchange is counted, not replayed
    header, _ = build_trace(proxy.exchanges)
    assert header.meta["failed"] >= 1


def test_reference_server_answers_the_same_through_the_proxy(server_url: str) -> None:
    """Direct and proxied: the same events in the same order; an error body byte for byte."""
    import httpx

    body = {
        "model": "sim",
        "input": "hello",
        "stream": True,
        "metadata": {"loopbench.output_tokens": "12"},
    }
    bad = {"model": "sim", "input": 7}

    def events(base: str) -> tuple[list[str], int, bytes]:
        with httpx.Client(timeout=30) as client:
            with client.stream("POST", f"{base}/responses", json=body) as resp:
                text = resp.read().decode()
            kinds: list[str] = []
            for ln in text.splitlines():
                # how many deltas a stream carries depends on timing: compare the kinds
                if ln.startswith("event: ") and (not kinds or kinds[-1] != ln[7:]):
                    kinds.append(ln[7:])
            err = client.post(f"{base}/responses", json=bad)
            return kinds, err.status_code, err.content

    async def main() -> tuple[Any, Any]:
        async with recording(server_url) as proxy:
            loop = asyncio.get_running_loop()
            direct = await loop.run_in_executor(None, events, server_url)
            proxied = await loop.run_in_executor(None, events, _base(proxy))
        return direct, proxied

    direct, proxied = _run(main)
    assert direct[0] == proxied[0] and "response.completed" in direct[0]
    assert proxied[1] == direct[1] == 400
    assert json.loads(proxied[2])["error"] == json.loads(direct[2])["error"]


def test_unreachable_upstream_is_a_502_naming_it() -> None:
    async def main() -> bytes:
        async with recording("http://127.0.0.1:9/v1") as proxy:
            return await _exchange(
                proxy.port,
                b"POST /v1/responses HTTP/1.1\r\nHost: x\r\ncontent-length: 2\r\n\r\n{}",
                b"}}",
            )

    data = _run(main)
    assert data.startswith(b"HTTP/1.1 502 ")
    assert b"could not connect to the upstream 127.0.0.1:9" in data


# --- the command ------------------------------------------------------------------------------


RECORD_ARGV = (sys.executable, "-m", "harness", "record")


def _record_command(server_url: str, out: Path) -> subprocess.Popen[str]:
    """``loopbench record`` on any free port in front of ``server_url``, writing ``out``."""
    return subprocess.Popen(
        [*RECORD_ARGV, "--upstream", server_url, "--port", "0", "--out", str(out)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def test_record_command_writes_the_trace_on_sigterm(server_url: str, tmp_path: Path) -> None:
    from openai import OpenAI

    out = tmp_path / "cli.jsonl"
    proc = _record_command(server_url, out)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("loopbench record listening on http://127.0.0.1:"), line
        base = line.split()[4]
        client = OpenAI(base_url=base, api_key="sk-cli-secret", max_retries=0)
        resp = client.responses.create(
            model="sim",
            input="a task",
            tool_choice="none",
            metadata={"loopbench.output_tokens": "9"},
        )
        assert resp.usage is not None and resp.usage.output_tokens == 9
        err = _sigterm(proc, 30, ExitCode.INTERRUPTED)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "wrote" in err and "1 rollout from" in err
    [rollout] = read_trace(out)
    assert [t.output_tokens for t in rollout.turns] == [9]
    assert "sk-cli-secret" not in out.read_text()
    assert dump_trace([rollout])  # parses and dumps again


def _sigterm(proc: subprocess.Popen[str], timeout: float, code: int) -> str:
    """SIGTERM to a running ``loopbench record``, which must then exit with ``code``; its
    stderr."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == code, err
    return err


def _observer_pid(pid: int) -> int:
    """The observer's process among ``pid``'s children (multiprocessing's spawn)."""
    for _ in range(100):
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
                if b"spawn_main" in cmdline:
                    return int(child)
        time.sleep(0.1)
    raise AssertionError("no observer process")


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux /proc")
def test_record_command_exits_3_first_saying_so_when_its_observer_died(
    server_url: str, tmp_path: Path
) -> None:
    """The recorder's own failure is the run's outcome: exit 3 (record again), and the
    first line says what the trace misses; the trace is still written."""
    out = tmp_path / "lost.jsonl"
    proc = _record_command(server_url, out)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("loopbench record listening on ")
        os.kill(_observer_pid(proc.pid), signal.SIGKILL)
        err = _sigterm(proc, 30, 3)
    finally:
        if proc.poll() is None:
            proc.kill()
    first = err.splitlines()[0]
    assert first.startswith("error: the trace misses exchanges: the observer's process ended"), err
    assert "(exit code -9)" in first
    assert f"wrote {out}" in err
    header = json.loads(out.read_text().splitlines()[0])
    assert header["meta"]["lost"] == [first.removeprefix("error: the trace misses exchanges: ")]


def _frame(payload: bytes, mask: bytes | None = None, fin: bool = True, opcode: int = 1) -> bytes:
    return encode_frame(opcode, payload, masked=mask is not None, fin=fin, key=mask)


def test_websocket_frames_pass_through_unchanged_and_are_recorded() -> None:
    """A canned WebSocket upstream: the 101 and every frame reach each side byte for byte."""
    create = json.dumps(
        {"type": "response.create", "model": "m", "input": [], "stream_id": "lane-1"}
    ).encode()
    key = b"\x11\x22\x33\x44"
    upgrade = (
        b"GET /v1/responses HTTP/1.1\r\nHost: 127.0.0.1:1\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer sk-ws-secret\r\n\r\n"
    )
    # the request split in two fragments, a ping between them
    client_frames = (
        _frame(create[:20], key, fin=False)
        + _frame(b"", key, opcode=9)
        + _frame(create[20:], key, opcode=0)
    )
    completed = {
        "type": "response.completed",
        "stream_id": "lane-1",
        "response": {
            "id": "resp_ws1",
            "output": [{"type": "message", "content": [{"type": "output_text", "text": "ok"}]}],
            "usage": {"input_tokens": 12, "output_tokens": 3},
        },
    }
    server_bytes = (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
        # a response object carries "error": null from its first event on: not an end
        + _frame(
            b'{"type":"response.created","stream_id":"lane-1","response":{"id":"resp_ws1",'
            b'"error":null,"status":"in_progress"}}'
        )
        + _frame(json.dumps(completed).encode())
    )
    received = bytearray()

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.extend(await reader.readuntil(b"\r\n\r\n"))
        received.extend(await reader.readexactly(len(client_frames)))
        writer.write(server_bytes[:50])  # the 101 head split across writes
        await writer.drain()
        await asyncio.sleep(0.005)
        writer.write(server_bytes[50:])
        await writer.drain()
        await reader.read()  # until the proxy closes
        writer.close()
        await writer.wait_closed()

    async def main() -> tuple[bytes, RecordingProxy]:
        server = await asyncio.start_server(upstream, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with recording(f"http://127.0.0.1:{port}/v1") as proxy:
                got = await _exchange(proxy.port, upgrade + client_frames, len(server_bytes))
                for _ in range(100):  # the proxy notices the close
                    if not proxy.open_connections:
                        break
                    await asyncio.sleep(0.01)
        finally:
            server.close()
            await server.wait_closed()
        return got, proxy

    got, proxy = _run(main)
    assert got == server_bytes
    host = bytes(received).split(b"\r\n")[1]
    assert host.startswith(b"Host: 127.0.0.1:")
    assert bytes(received) == upgrade.replace(b"Host: 127.0.0.1:1", host) + client_frames
    [exchange] = proxy.exchanges
    assert (exchange.transport, exchange.response_id, exchange.output_tokens) == (
        "ws",
        "resp_ws1",
        3,
    )
    assert exchange.input_tokens == 12


# --- concurrent agents: `loopbench run` through the proxy -------------------------------------


#: subagents.yaml with shorter agents (4 calls, sub-agents of 2, not 10 and 4): the fork at
#: turn 1 is still reached, and its lognormal tool times still interleave the 4 lanes
SUBAGENTS = {
    "rollout.count": "8",
    "load.concurrency": "4",
    "rollout.tool_calls": "4",
    "rollout.subagents.tool_calls": "2",
    # the claim is the trace, not the timing: a loaded machine's 110 ms event-loop stall
    # made a 2-second run invalid (exit 3) once, which says nothing about the recording
    "load.max_schedule_lag_ms": "10000",
}


@pytest.mark.parametrize(
    ("scenario", "sets", "subagents", "transport"),
    [
        # tool times that differ, so that agents start while others run their tools
        (
            "tiny",
            {
                "rollout.count": "6",
                "load.concurrency": "3",
                "rollout.tool_latency_ms": "{dist: uniform, min: 5, max: 150}",
            },
            0,
            "http",
        ),
        ("subagents", SUBAGENTS, 2, "http"),
        ("subagents", SUBAGENTS, 2, "ws"),
    ],
)
def test_concurrent_runs_are_recorded_as_the_rollouts_they_ran(
    server_url: str,
    tmp_path: Path,
    scenario: str,
    sets: dict[str, str],
    subagents: int,
    transport: str,
) -> None:
    """Concurrent independent agents overlap in time: none may be filed under another."""

    async def main() -> RecordingProxy:
        async with recording(server_url) as proxy:
            argv: list[str | Path] = ["run", scenario, "--transports", transport, "--no-probe"]
            for key, value in sets.items():
                argv += ["--set", f"{key}={value}"]
            argv += ["--target", _base(proxy), "--out", tmp_path, "--run-id", "r", "-q"]
            # the trace is read, not the run's report
            run = functools.partial(run_cli, *argv, report=False)
            await asyncio.get_running_loop().run_in_executor(None, run)
        return proxy

    proxy = _run(main)
    assert not proxy.errors
    run = load_run(tmp_path / "r")
    header, trace = build_trace(proxy.exchanges)
    assert header.meta["failed"] == 0
    assert len(trace) == len(run.rollouts) == int(sets["rollout.count"])
    for rollout in trace:
        assert "forked_from" not in rollout.meta
        subs = [s for t in rollout.turns for s in t.subagents]
        assert len(subs) == subagents
        assert not any(t.subagents for s in subs for t in s.turns)
        for s in subs:
            assert s.join == "wait"
    # every turn the run made is in the trace, once
    turns = sum(len(r.turns) for r in trace) + sum(
        len(s.turns) for r in trace for t in r.turns for s in t.subagents
    )
    assert turns == len(run.turns)


def test_summarising_an_exchange_does_not_hold_up_the_relay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first exchange's summary is held back until the second one was relayed: the
    relay must not wait for it (with the thread observer, which shares this process; the
    process observer cannot hold it up by construction), and the trace still gets both once
    the proxy stops."""
    import threading

    from harness.record import observer as observer_module

    real = observer_module.summarize
    gate = threading.Event()
    held: list[bool] = []

    def held_back(*args: Any) -> Any:
        if not held:
            held.append(gate.wait(timeout=5))  # False: the relay waited for this summary
        return real(*args)

    monkeypatch.setattr(observer_module, "summarize", held_back)
    request = _STREAMING_REQUEST

    async def main() -> RecordingProxy:
        server = await _canned_upstream([])
        port = server.sockets[0].getsockname()[1]
        try:
            async with recording(f"http://127.0.0.1:{port}/v1", observer="thread") as proxy:
                first = await _exchange(proxy.port, request, b"0\r\n\r\n")
                second = await _exchange(proxy.port, request, b"0\r\n\r\n")
                gate.set()
                assert first == second == b"".join(SSE_PARTS)
        finally:
            server.close()
            await server.wait_closed()
        return proxy

    proxy = _run(main)
    assert held == [True]
    assert len(proxy.exchanges) == 2


def test_a_chat_session_keeps_every_question(server_url: str) -> None:
    """Three questions, each after the previous answer: three rollouts, one after another."""
    import httpx

    def session(base: str) -> list[int]:
        messages: list[dict[str, str]] = [{"role": "system", "content": "You answer. " * 20}]
        out = []
        with httpx.Client(timeout=30) as client:
            for question in ("first question " * 10, "second one " * 30, "third " * 50):
                messages.append({"role": "user", "content": question})
                resp = client.post(
                    f"{base}/chat/completions",
                    json={"model": "sim", "messages": messages, "max_tokens": 20},
                )
                assert resp.status_code == 200, resp.text
                answer = resp.json()["choices"][0]["message"]
                assert not answer.get("tool_calls")
                messages.append({"role": "assistant", "content": answer["content"]})
                out.append(resp.json()["usage"]["prompt_tokens"])
        return out

    async def main() -> tuple[list[int], RecordingProxy]:
        async with recording(server_url) as proxy:
            loop = asyncio.get_running_loop()
            prompts = await loop.run_in_executor(None, session, _base(proxy))
        return prompts, proxy

    prompts, proxy = _run(main)
    _, trace = build_trace(proxy.exchanges)
    assert len(trace) == 3
    assert [len(r.turns) for r in trace] == [1, 1, 1]
    assert [r.turns[0].input_tokens for r in trace] == prompts
    assert [r.meta.get("follows") for r in trace] == [None, trace[0].id, trace[1].id]
    assert not any(r.meta.get("truncated") for r in trace)
    # each question's own tokens (text length / 4), the history before it as its system prompt
    assert [r.user_prompt_tokens for r in trace] == [38, 83, 75]
    for r, p in zip(trace, prompts, strict=True):
        assert r.system_tokens + r.tool_schema_tokens + r.user_prompt_tokens == p


def test_aborted_and_unreadable_exchanges_are_counted_and_named(
    server_url: str, tmp_path: Path
) -> None:
    """A client that drops mid-stream and a body that is not JSON: both failed, both said."""
    import socket

    out = tmp_path / "aborted.jsonl"
    argv = ["record", "--upstream", server_url, "--port", "0", "--out", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )

    def post(port: int, body: bytes, read_all: bool) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(
                b"POST /v1/responses HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
                + body
            )
            got = sock.recv(65536)
            while read_all and (chunk := sock.recv(65536)):
                got += chunk
            return got  # closing now, mid-stream unless read_all

    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        port = int(line.split()[4].rsplit(":", 1)[1].split("/")[0])
        long_stream = json.dumps(
            hinted_body(20000, model="sim", input="a long answer", stream=True)
        ).encode()
        assert post(port, long_stream, read_all=False).startswith(b"HTTP/1.1 200")
        assert b" 400 " in post(port, b"this is not JSON", read_all=True).split(b"\r\n")[0]
        time.sleep(0.5)  # the proxy notices the dropped client on its next write
        err = _sigterm(proc, 60, ExitCode.INTERRUPTED)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "2 exchanges could not be read (first: connection " in err, err
    # the first one named: whichever the proxy noticed first
    assert (
        "the client closed the connection before the response ended" in err
        or "its request body is not JSON" in err
    )
    assert "(2 failed, not replayed)" in err
    header = json.loads(out.read_text().splitlines()[0])
    assert header["meta"]["failed"] == 2 and header["meta"]["exchanges"] == 2


def test_expect_100_continue_reaches_the_client_before_the_body() -> None:
    """A client that waits for 100 Continue before its body gets it through the proxy."""
    body = b'{"model":"m","input":"hi","stream":true}'
    head = (
        b"POST /v1/responses HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
        b"Expect: 100-continue\r\n" + f"content-length: {len(body)}\r\n\r\n".encode()
    )
    received: list[bytes] = []

    async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got = await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
        received.append(got + await reader.readexactly(len(body)))
        for part in SSE_PARTS:
            writer.write(part)
        await writer.drain()
        await reader.read()
        writer.close()

    async def main() -> tuple[bytes, bytes, RecordingProxy]:
        server = await asyncio.start_server(upstream, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with recording(f"http://127.0.0.1:{port}/v1") as proxy:
                reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
                writer.write(head)
                # the body only after the interim answer (no timeout fallback here)
                interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                writer.write(body)
                rest = await _read_until(reader, b"0\r\n\r\n")
                writer.close()
                await writer.wait_closed()
        finally:
            server.close()
            await server.wait_closed()
        return interim, rest, proxy

    interim, rest, proxy = _run(main)
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert rest == b"".join(SSE_PARTS)
    assert received[0].endswith(body)
    assert len(proxy.exchanges) == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("traffic_after", [True, False], ids=["traffic-after", "idle-after"])
def test_an_observer_process_that_dies_loses_the_trace_not_the_traffic(
    traffic_after: bool,
) -> None:
    """Killed mid-recording: the relay goes on forwarding, and stopping says the trace
    lost what the observer had read instead of hanging or raising (idle after the kill,
    the stop's sentinel is the first thing the relay fails to send)."""
    request = _STREAMING_REQUEST

    async def main() -> RecordingProxy:
        server = await _canned_upstream([])
        port = server.sockets[0].getsockname()[1]
        try:
            async with recording(f"http://127.0.0.1:{port}/v1") as proxy:
                assert await _exchange(proxy.port, request, b"0\r\n\r\n") == b"".join(SSE_PARTS)
                proxy._process.child.kill()
                proxy._process.child.join(10)
                if traffic_after:
                    got = await _exchange(proxy.port, request, b"0\r\n\r\n")
                    assert got == b"".join(SSE_PARTS)
        finally:
            server.close()
            await server.wait_closed()
        return proxy

    proxy = _run(main)
    assert proxy.exchanges == []
    assert proxy.observed.unread == []
    [why] = proxy.observed.lost
    assert why.startswith("the observer's process ended before it sent what it read"), why
    assert "(exit code -9)" in why, why


@pytest.mark.timeout(60)
def test_an_observer_process_that_does_not_start_is_named_not_taken_for_the_port(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The child dies before it says it is ready (here: its target raises TypeError)."""
    monkeypatch.setattr(observer_process, "serve_observer", sys.exit)

    async def main() -> str:
        proxy = RecordingProxy(Upstream.parse("http://127.0.0.1:9/v1"))
        with pytest.raises(ObserverError) as info:
            await proxy.start()
        assert proxy.port == 0 and proxy._process is None
        return str(info.value)

    message = _run(main)
    assert message == (
        "the recorder's observer process did not start (exit code 1); "
        "`--observer thread` reads the exchanges in the proxy's own process"
    )


def test_a_head_request_does_not_stall_the_next_request_on_its_connection(
    server_url: str,
) -> None:
    """Claude Code's connectivity check (``HEAD /api/hello``) then its first request, on one
    keep-alive connection: the HEAD's answer has a content-length and no body, and the proxy
    waited for that body, so the next request hung until the client gave up (30 s a session)."""
    body = b'{"model":"m","input":"hi","metadata":{"loopbench.output_tokens":"3"}}'
    post = (
        b"POST /v1/responses HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )

    async def read_until(reader: asyncio.StreamReader, done: Callable[[bytes], bool]) -> bytes:
        data = b""
        while not done(data):
            chunk = await asyncio.wait_for(reader.read(65536), 10)
            if not chunk:
                break
            data += chunk
        return data

    async def main() -> tuple[bytes, bytes]:
        async with recording(server_url, observer="thread") as proxy:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(b"HEAD /api/hello HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await read_until(reader, lambda d: d.endswith(b"\r\n\r\n"))
            writer.write(post)
            answer = await read_until(reader, lambda d: b'"status":"completed"' in d)
            writer.close()
            await writer.wait_closed()
            return head, answer

    head, answer = _run(main)
    assert head.startswith(b"HTTP/1.1 404") and b"content-length:" in head
    assert answer.startswith(b"HTTP/1.1 200") and b'"status":"completed"' in answer
