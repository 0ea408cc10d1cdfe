"""``sent_input_tokens``: the tokens each request carried, from the bodies as sent (pure).

A 3-turn rollout replayed over a stateless transport sends the whole conversation every turn;
a chained one (``http-chained``, ``ws``) sends, after its first turn, the instructions, the tool
definitions and the turn's new items only.  The client core (harness/client/conversation.py)
fills the field for both edges.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from harness.client.api_conversation import ApiConversation
from harness.client.conversation import Conversation
from harness.client.rollout import context_options
from harness.wire.events import loads
from harness.wire.tokens import FIXED_WIDTH
from harness.wire.transports import transport_spec
from harness.workload.agent import Transcript, items_tokens
from harness.workload.records import TurnRecord
from harness.workload.rollout import RolloutPlan, TurnPlan

PLAN = RolloutPlan(
    0,
    200,
    20,
    60,
    10,
    (
        TurnPlan(0, 10, 1, (), (80,), 0.0),
        TurnPlan(1, 10, 1, (), (80,), 0.0),
        TurnPlan(2, 10, 0, (), (), 0.0),
    ),
    0,
    {},
)


def _rollout(transport: str) -> tuple[list[dict[str, Any]], list[TurnRecord]]:
    """The request bodies and turn records of PLAN over ``transport``, each turn answered by
    one call."""
    spec = transport_spec(transport)
    transcript = Transcript(PLAN, **context_options(spec, PLAN))
    conv = ApiConversation(spec) if spec.api in ("chat", "messages") else Conversation(spec)
    bodies, recs = [], []
    for i in range(3):
        inp = transcript.next_input(i)
        rec = TurnRecord(transport, 0, i)
        rec.history_tokens = transcript.history_tokens
        raw = conv.ws_turn(inp, rec).request() if spec.websocket else conv.http_request(inp, rec)
        bodies.append(loads(raw))
        recs.append(rec)
        conv.previous_response_id = f"resp_{i}"
        call = {"type": "function_call", "call_id": f"c{i}", "name": "run_tool", "arguments": "{}"}
        if i < 2:
            transcript.add_tool_outputs(i, transcript.record_output(i, [call]))
    return bodies, recs


def _carried(body: dict[str, Any]) -> int:
    """What a Responses body carries, counted from the body itself (4 characters a token)."""
    base = FIXED_WIDTH.count(body["instructions"]) + FIXED_WIDTH.count(
        orjson.dumps(body["tools"]).decode()
    )
    return base + items_tokens(body["input"])


@pytest.mark.parametrize("transport", ["http", "http-chained", "ws"])
def test_the_count_is_what_the_body_carried(transport: str) -> None:
    bodies, recs = _rollout(transport)
    assert [r.sent_input_tokens for r in recs] == [_carried(b) for b in bodies]


def test_stateless_sends_the_history_chained_sends_the_new_input() -> None:
    _, http = _rollout("http")
    _, chained = _rollout("http-chained")
    _, ws = _rollout("ws")
    _, chat = _rollout("chat")
    # stateless: the whole history every turn, the client's own count of it
    for recs in (http, chat):
        assert [r.sent_input_tokens for r in recs] == [r.history_tokens for r in recs]
    # the first turn has nothing to chain from; afterwards only the new input goes out
    for recs in (chained, ws):
        assert recs[0].sent_input_tokens == http[0].sent_input_tokens
        for r, whole in zip(recs[1:], http[1:], strict=True):
            assert 0 < r.sent_input_tokens < whole.sent_input_tokens, (r.transport, r.turn_index)
    # the same conversation: the chained transports send the same, and far less
    assert [r.sent_input_tokens for r in chained] == [r.sent_input_tokens for r in ws]
    assert http[2].sent_input_tokens - chained[2].sent_input_tokens > 100
