"""What the recorded client did with its context, learned from the exchanges (docs/traces.md).

Request and response bodies in (as a client and the server sent them), the trace's ``client``
out: over WebSocket whether the turns chained (``previous_response_id``) or re-sent the whole
input, and whether a re-sent context carried the model's reasoning items back.  The
openai-agents SDK re-sends everything and its reasoning items by id alone, without their
content (``include: []``), so the reasoning never re-enters the context; Codex CLI
chains over WebSocket and, over HTTP, re-sends its reasoning encrypted.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from harness.record.observe import Exchange, build_trace, summarize
from harness.workload.trace import TraceClient, dump_trace, parse_trace

MS = 1_000_000
INSTRUCTIONS = "You are a coding assistant."


def _response(i: int, final: bool) -> dict[str, Any]:
    reasoning = {"type": "reasoning", "id": f"rs_{i}", "summary": [], "encrypted_content": "b" * 80}
    if final:
        last = {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Done."}],
        }
    else:
        last = {
            "type": "function_call",
            "call_id": f"call_{i}",
            "name": "read_file",
            "arguments": "{}",
        }
    usage = {
        "input_tokens": 100 + 50 * i,
        "output_tokens": 40,
        "output_tokens_details": {"reasoning_tokens": 30},
    }
    return {"id": f"resp_{i}", "status": "completed", "output": [reasoning, last], "usage": usage}


def _session(
    transport: str, *, chain: bool, reasoning_back: bool, turns: int = 3
) -> list[Exchange]:
    """One client's tool loop: each request as the client builds it, each answer a reasoning
    item and a call (the last: a reasoning item and the answer)."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "Read notes.txt"}]
    exchanges = []
    previous: str | None = None
    new: list[dict[str, Any]] = list(items)
    for i in range(turns):
        req: dict[str, Any] = {
            "model": "m",
            "instructions": INSTRUCTIONS,
            "tools": [],
            "stream": True,
        }
        if chain and previous is not None:
            req |= {"previous_response_id": previous, "input": new}
        else:
            req |= {"input": list(items)}
        req["include"] = ["reasoning.encrypted_content"] if reasoning_back else []
        if transport == "ws":
            req["type"] = "response.create"
        resp = _response(i, final=i == turns - 1)
        if transport == "ws":
            body = orjson.dumps({"type": "response.completed", "response": resp})
        else:
            body = (
                b"data: " + orjson.dumps({"type": "response.completed", "response": resp}) + b"\n\n"
            )
        times = (i * 100 * MS, i * 100 * MS + 10 * MS)
        ex = summarize("responses", transport, 1, orjson.dumps(req), 200, body, {}, times)
        assert ex is not None
        exchanges.append(ex)
        reasoning, call = resp["output"]
        output = {
            "type": "function_call_output",
            "call_id": call.get("call_id"),
            "output": "# notes",
        }
        new = [output]
        if reasoning_back:
            items += [reasoning, call, output]
        else:
            # the SDK's way: the reasoning item by its id, without its content
            items += [{"type": "reasoning", "id": reasoning["id"], "summary": []}, call, output]
        previous = resp["id"]
    return exchanges


def _client(exchanges: list[Exchange]) -> TraceClient | None:
    _, rollouts = build_trace(exchanges)
    assert len(rollouts) == 1 and len(rollouts[0].turns) == 3
    return rollouts[0].client


def test_a_websocket_client_that_resends_everything_and_no_reasoning() -> None:
    # the openai-agents SDK's WebSocket model
    client = _client(_session("ws", chain=False, reasoning_back=False))
    assert client == TraceClient(ws_chains=False, resends_reasoning=False)


def test_a_websocket_client_that_chains() -> None:
    # Codex CLI over WebSocket: the server holds the reasoning, so nothing says what the
    # client would re-send
    client = _client(_session("ws", chain=True, reasoning_back=True))
    assert client == TraceClient(ws_chains=True, resends_reasoning=None)


@pytest.mark.parametrize("back", [True, False])
def test_an_http_client_keeps_or_drops_its_reasoning(back: bool) -> None:
    # over HTTP the transport decides chaining (http or http-chained): not recorded
    client = _client(_session("http", chain=False, reasoning_back=back))
    assert client == TraceClient(ws_chains=None, resends_reasoning=back)


def test_a_session_that_shows_nothing_records_nothing() -> None:
    # one turn: no later request to learn from
    _, rollouts = build_trace(_session("http", chain=False, reasoning_back=False, turns=1))
    assert rollouts[0].client is None
    assert '"client"' not in dump_trace(rollouts)


def test_the_client_survives_the_file() -> None:
    header, rollouts = build_trace(_session("ws", chain=False, reasoning_back=False))
    text = dump_trace(rollouts, header)
    assert '"client":{"ws_chains":false,"resends_reasoning":false}' in text
    [again] = parse_trace(text.splitlines())
    assert again.client == TraceClient(ws_chains=False, resends_reasoning=False)
