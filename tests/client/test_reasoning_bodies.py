"""What each transport sends on a reasoning turn, without sockets: the Codex round trip.

Stateless ``http`` asks for the encrypted reasoning and sends every reasoning item it received
back, in place in the history; the chained and WebSocket transports never do (the server holds
them).  The bytes on the wire are the same bodies (tests/transports/test_parity.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.client.bodies import http_body, ws_create
from harness.client.conversation import Conversation
from harness.wire.events import loads
from harness.wire.transports import TRANSPORTS, transport_spec
from harness.workload.agent import HINT_REASONING_TOKENS, Transcript
from harness.workload.plan import RolloutPlan, TurnPlan
from harness.workload.records import TurnRecord


def _plan(reasoning: int) -> RolloutPlan:
    turns = tuple(TurnPlan(i, 10, 1, (1.0,), (10,), 0.0, reasoning) for i in range(3))
    final = TurnPlan(3, 10, 0, (), (), 0.0, reasoning)
    return RolloutPlan(0, 3, 20, 20, 10, (*turns, final), 0, {})


def _reasoning_item(i: int) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": f"rs_{i}",
        "summary": [{"type": "summary_text", "text": "Look."}],
        "encrypted_content": f"blob{i}" * 100,
    }


def _answer(i: int, reasoning: int = 300) -> list[dict[str, Any]]:
    """A turn's output items: its reasoning (when it reasoned), then its call."""
    call = {"type": "function_call", "call_id": f"call_{i}", "name": "run_tool", "arguments": "{}"}
    return [_reasoning_item(i), call] if reasoning else [call]


def _sent(name: str, reasoning: int) -> list[dict[str, Any]]:
    """The request bodies of a 4-turn rollout over ``name``, each turn answered by a reasoning
    item and a call (chained transports name the previous response)."""
    spec = transport_spec(name)
    stateless = not spec.chained and not spec.websocket
    transcript = Transcript(_plan(reasoning), resend_reasoning=stateless)
    conv = Conversation(spec)
    bodies = []
    for i in range(4):
        inp = transcript.next_input(i)
        rec = TurnRecord(name, 0, i)
        if spec.websocket:
            body = loads(conv.ws_turn(inp, rec).request())
        else:
            body = loads(conv.http_request(inp, rec))
        body["bytes_sent"] = rec.bytes_sent
        bodies.append(body)
        conv.previous_response_id = f"resp_{i}"
        if i < 3:
            jobs = transcript.record_output(i, _answer(i, reasoning), reasoning)
            transcript.add_tool_outputs(i, jobs)
    return bodies


def _reasoning_ids(body: dict[str, Any]) -> list[str]:
    return [it["id"] for it in body["input"] if it.get("type") == "reasoning"]


def test_stateless_http_resends_every_reasoning_item_in_place() -> None:
    bodies = _sent("http", 300)
    for i, body in enumerate(bodies):
        assert body["include"] == ["reasoning.encrypted_content"]
        assert body["reasoning"] == {"summary": "auto"}
        assert body["metadata"][HINT_REASONING_TOKENS] == "300"
        assert body["store"] is False
        assert _reasoning_ids(body) == [f"rs_{j}" for j in range(i)]
    # in place: each reasoning item right before the call it led to, as received
    last = bodies[-1]["input"]
    kinds = [it.get("type", "message") for it in last]
    assert kinds == ["message", *["reasoning", "function_call", "function_call_output"] * 3]
    assert last[1] == _reasoning_item(0)


# the Responses transports; chat and messages: tests/client/test_chat_messages.py
@pytest.mark.parametrize(
    "name", [t.name for t in TRANSPORTS if t.api == "responses" and t.name != "http"]
)
def test_chained_and_websocket_transports_never_resend_reasoning(name: str) -> None:
    bodies = _sent(name, 300)
    for body in bodies:
        assert "include" not in body
        assert _reasoning_ids(body) == []
        assert body["reasoning"] == {"summary": "auto"}
        assert body["metadata"][HINT_REASONING_TOKENS] == "300"


def test_body_grows_faster_on_http_with_reasoning() -> None:
    def growth(name: str, reasoning: int) -> int:
        sizes = [b["bytes_sent"] for b in _sent(name, reasoning)]
        return sizes[-1] - sizes[0]

    # http: the history and the reasoning items; chained: only the new items, either way
    assert growth("http", 300) > growth("http", 0) + 3 * 500
    assert growth("http-chained", 300) == growth("http-chained", 0)


def test_a_turn_without_reasoning_sends_nothing_of_it() -> None:
    transcript = Transcript(_plan(0), resend_reasoning=True)
    inp = transcript.next_input(0)
    body = http_body(transport_spec("http"), inp, None)
    assert "reasoning" not in body and "include" not in body
    assert HINT_REASONING_TOKENS not in body["metadata"]
    assert "reasoning" not in ws_create(transport_spec("ws"), inp, None)
    # the output budget covers the reasoning as the API counts it
    assert Transcript(_plan(300)).next_input(0).max_output_tokens >= 2 * (300 + 10)


def test_history_tokens_grow_by_the_reasoning_on_every_transport() -> None:
    grown = {}
    for resend in (True, False):
        transcript = Transcript(_plan(300), resend_reasoning=resend)
        transcript.next_input(0)
        before = transcript.history_tokens
        transcript.record_output(0, _answer(0), 300)
        grown[resend] = transcript.history_tokens - before
    assert grown[True] == grown[False] > 300
