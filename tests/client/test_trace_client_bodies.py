"""A trace's ``client`` in, the replayed request bodies out (pure: no sockets).

A recorded client that re-sent its whole input over WebSocket and never sent its reasoning
back (the openai-agents SDK) is replayed that way: ``ws`` names no previous response and
sends the history without reasoning items, ``http`` sends no reasoning items and asks for
none.  A trace that says nothing keeps each transport's way (Codex's).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from harness.client.conversation import Conversation
from harness.client.rollout import context_options
from harness.wire.events import loads
from harness.wire.transports import transport_spec
from harness.workload.agent import Transcript
from harness.workload.records import TurnRecord
from harness.workload.trace import parse_trace, trace_plan

TURN = {
    "output_tokens": 10,
    "reasoning_tokens": 300,
    "tool_calls": [{"latency_ms": 1.0, "output_tokens": 10}],
}
FINAL = {"output_tokens": 10, "reasoning_tokens": 300, "tool_calls": []}


def _trace(client: dict[str, Any] | None) -> str:
    rollout: dict[str, Any] = {
        "type": "rollout",
        "system_tokens": 20,
        "user_prompt_tokens": 10,
        "turns": [TURN, TURN, FINAL],
    }
    if client is not None:
        rollout["client"] = client
    return orjson.dumps(rollout).decode()


def _answer(i: int) -> list[dict[str, Any]]:
    reasoning = {
        "type": "reasoning",
        "id": f"rs_{i}",
        "summary": [],
        "encrypted_content": "b" * 400,
    }
    call = {"type": "function_call", "call_id": f"call_{i}", "name": "run_tool", "arguments": "{}"}
    return [reasoning, call]


def _bodies(
    transport: str, client: dict[str, Any] | None
) -> tuple[list[dict[str, Any]], Transcript]:
    """The request bodies of the trace's rollout replayed over ``transport``, each turn answered
    by a reasoning item and a call."""
    [rollout] = parse_trace([_trace(client)])
    plan = trace_plan(rollout, 0, 3, 0, {})
    spec = transport_spec(transport)
    transcript = Transcript(plan, **context_options(spec, plan))
    conv = Conversation(spec)
    bodies = []
    for i in range(3):
        inp = transcript.next_input(i)
        rec = TurnRecord(transport, 0, i)
        raw = conv.ws_turn(inp, rec).request() if spec.websocket else conv.http_request(inp, rec)
        bodies.append(loads(raw))
        conv.previous_response_id = f"resp_{i}"
        if i < 2:
            transcript.add_tool_outputs(i, transcript.record_output(i, _answer(i), 300))
    return bodies, transcript


def _kinds(body: dict[str, Any]) -> list[str]:
    return [it.get("type", "message") for it in body["input"]]


SDK = {"ws_chains": False, "resends_reasoning": False}


@pytest.mark.parametrize("transport", ["ws", "ws-store"])
def test_a_client_that_resent_everything_over_websocket_resends_on_replay(transport: str) -> None:
    bodies, _ = _bodies(transport, SDK)
    for i, body in enumerate(bodies):
        assert "previous_response_id" not in body
        assert "include" not in body
        assert _kinds(body) == ["message", *["function_call", "function_call_output"] * i]


def test_a_client_that_kept_no_reasoning_sends_none_over_http() -> None:
    bodies, transcript = _bodies("http", SDK)
    for i, body in enumerate(bodies):
        assert "include" not in body
        assert _kinds(body) == ["message", *["function_call", "function_call_output"] * i]
    # the context the replay counts holds no reasoning either
    _, kept = _bodies("http", None)
    assert kept.history_tokens - transcript.history_tokens >= 2 * 300


def test_reasoning_kept_over_a_resending_websocket_goes_back_encrypted() -> None:
    bodies, _ = _bodies("ws", {"ws_chains": False, "resends_reasoning": True})
    assert [b.get("include") for b in bodies] == [["reasoning.encrypted_content"]] * 3
    assert _kinds(bodies[2]) == [
        "message",
        *["reasoning", "function_call", "function_call_output"] * 2,
    ]
    assert all("previous_response_id" not in b for b in bodies)


def test_without_a_recorded_client_each_transport_keeps_its_way() -> None:
    ws, _ = _bodies("ws", None)
    assert [b.get("previous_response_id") for b in ws] == [None, "resp_0", "resp_1"]
    assert all(_kinds(b) in (["message"], ["function_call_output"]) for b in ws)
    http, _ = _bodies("http", None)
    assert _kinds(http[2]) == [
        "message",
        *["reasoning", "function_call", "function_call_output"] * 2,
    ]
    assert all(b["include"] == ["reasoning.encrypted_content"] for b in http)


def test_http_transports_chain_or_not_by_their_name() -> None:
    # ws_chains is the WebSocket client's choice; http-chained still chains
    bodies, _ = _bodies("http-chained", SDK)
    assert [b.get("previous_response_id") for b in bodies] == [None, "resp_0", "resp_1"]
