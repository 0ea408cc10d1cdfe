"""The recovery policy and a WebSocket turn's recovery bookkeeping, without sockets."""

from __future__ import annotations

import pytest

from harness.client.conversation import Conversation
from harness.client.recovery import MAX_RECOVERIES_PER_TURN, Recovery, recovery_for
from harness.client.shaping import RequestShaping
from harness.client.stream import ResponseStream
from harness.wire.errors import APIError, ErrorKind, TransportError, WsClosed
from harness.wire.events import loads
from harness.wire.transports import transport_spec
from harness.workload.agent import Transcript
from harness.workload.plan import RolloutPlan, TurnPlan
from harness.workload.records import TurnRecord

NOT_FOUND = APIError(400, "previous_response_not_found", "gone")
LIMIT = APIError(400, "websocket_connection_limit_reached", "60 minutes")


@pytest.mark.parametrize(
    ("name", "exc", "full_sent", "expected"),
    [
        ("ws", NOT_FOUND, False, Recovery.RESEND_FULL),
        ("ws", NOT_FOUND, True, Recovery.FAIL),
        ("ws-store", NOT_FOUND, False, Recovery.RESEND_FULL),
        ("ws", LIMIT, False, Recovery.RECONNECT),
        ("ws-store", LIMIT, False, Recovery.RECONNECT_KEEP_CHAIN),
        ("ws", WsClosed(1011), False, Recovery.RECONNECT),
        ("ws-store", WsClosed(1006), True, Recovery.RECONNECT_KEEP_CHAIN),
        ("ws-store", WsClosed(1008), False, Recovery.FAIL),
        ("ws", WsClosed(1000), False, Recovery.FAIL),
        ("ws-append", APIError(404, "response_not_found", ""), False, Recovery.RESEND_FULL),
        ("ws-append", WsClosed(1001), False, Recovery.RECONNECT),
        ("ws", APIError(404, "response_not_found", ""), False, Recovery.FAIL),
        ("ws", APIError(503, "service_unavailable", ""), False, Recovery.FAIL),
        # HTTP never retries, whatever the error
        ("http-chained", NOT_FOUND, False, Recovery.FAIL),
        ("http", TransportError(ErrorKind.CONNECTION, "reset"), False, Recovery.FAIL),
    ],
)
def test_policy(name: str, exc: TransportError, full_sent: bool, expected: Recovery) -> None:
    assert recovery_for(transport_spec(name), exc, full_sent=full_sent) is expected


def _transcript() -> Transcript:
    turn = TurnPlan(0, 10, 1, (1.0,), (10,), 0.0)
    final = TurnPlan(1, 10, 0, (), (), 0.0)
    plan = RolloutPlan(0, 3, 20, 20, 10, (turn, final), 0, {})
    transcript = Transcript(plan)
    transcript.next_input(0)
    jobs = transcript.record_output(0, [{"call_id": "call_1", "name": "run_tool"}])
    transcript.add_tool_outputs(0, jobs)
    return transcript


@pytest.mark.parametrize(
    ("name", "failure", "chained_after"),
    [
        ("ws-store", WsClosed(1011), True),  # the store keeps the chain across connections
        ("ws", WsClosed(1011), False),  # a new connection has no cache: the full context
        ("ws", NOT_FOUND, False),
    ],
)
def test_a_recovered_turn_resends_what_the_policy_says(
    name: str, failure: TransportError, chained_after: bool
) -> None:
    conv = Conversation(transport_spec(name))
    conv.previous_response_id = "resp_1"
    rec = TurnRecord(name, 0, 1)
    turn = conv.ws_turn(_transcript().next_input(1), rec)
    first = loads(turn.request())
    assert first["previous_response_id"] == "resp_1"
    turn.start(100)
    turn.recover(failure)
    again = loads(turn.request())
    assert ("previous_response_id" in again) is chained_after
    assert len(again["input"]) == (1 if chained_after else 3)
    stream = turn.start(250)
    assert rec.recoveries == 1 and rec.sent_ns == 100
    stream.done = True  # what a terminal event sets
    stream.status = "completed"
    stream.response_id = "resp_2"
    assert turn.finish() is stream
    assert (rec.recovery_ns, stream.sent_ns, rec.sent_ns) == (150, 100, 100)
    assert conv.previous_response_id == "resp_2"


def test_a_turn_gives_up_after_the_last_recovery() -> None:
    conv = Conversation(transport_spec("ws"))
    rec = TurnRecord("ws", 0, 0)
    turn = conv.ws_turn(_transcript().next_input(1), rec)
    for _ in range(MAX_RECOVERIES_PER_TURN):
        turn.recover(WsClosed(1006))
    with pytest.raises(TransportError) as caught:
        turn.recover(WsClosed(1006))
    assert caught.value.kind == "recovery_exhausted"
    assert rec.recoveries == MAX_RECOVERIES_PER_TURN + 1
    # a close no rule recovers is raised as it is
    with pytest.raises(WsClosed):
        conv.ws_turn(_transcript().next_input(1), rec).recover(WsClosed(4000))


@pytest.mark.parametrize("name", ["ws", "ws-store", "ws-append"])
def test_a_recorded_warmup_goes_first_and_the_first_turn_chains_from_it(name: str) -> None:
    """A trace's ``warmup`` (docs/traces.md): ``generate: false`` with the instructions and
    tools and no input, then the first turn chained from its response, only the new items."""
    first = TurnPlan(0, 10, 0, (), (), 0.0, warmup=True)
    transcript = Transcript(RolloutPlan(0, 3, 20, 20, 10, (first,), 0, {}))
    inp = transcript.next_input(0)
    conv = Conversation(transport_spec(name))
    payload = conv.ws_warmup(inp)
    if name == "ws-append":
        assert payload is None  # one response per rollout: no warm-up to chain from
        return
    assert payload is not None
    body = loads(payload)
    assert body["generate"] is False and body["input"] == []
    assert body["instructions"] == inp.instructions and body["tools"] == inp.tools
    warm = ResponseStream(0)
    warm.feed(
        {"type": "response.created", "response": {"id": "resp_w", "status": "in_progress"}}, 1
    )
    warm.feed(
        {
            "type": "response.completed",
            "response": {"id": "resp_w", "status": "completed", "output": []},
        },
        2,
    )
    conv.warmed(warm)
    turn = loads(conv.ws_turn(inp, TurnRecord(name, 0, 0)).request())
    assert turn["previous_response_id"] == "resp_w" and turn["input"] == inp.new_items
    assert "generate" not in turn
    # once chained (or for a turn without a recorded warm-up) there is none to send
    assert conv.ws_warmup(inp) is None
    plain = Transcript(RolloutPlan(0, 3, 20, 20, 10, (TurnPlan(0, 10, 0, (), (), 0.0),), 0, {}))
    assert Conversation(transport_spec(name)).ws_warmup(plain.next_input(0)) is None


def test_a_websocket_request_counts_its_bytes_sent_in_bytes_not_characters() -> None:
    """Over HTTP ``bytes_sent`` is the body's bytes; over WebSocket it was its characters."""
    shaping = RequestShaping(extra_body={"responses": {"metadata": {"note": "café ☕"}}})
    conv = Conversation(transport_spec("ws"), shaping=shaping)
    rec = TurnRecord("ws", 0, 1)
    payload = conv.ws_turn(_transcript().next_input(1), rec).request()
    assert loads(payload)["metadata"]["note"] == "café ☕"
    assert rec.bytes_sent == len(payload) == len(payload.decode()) + 1 + 2
