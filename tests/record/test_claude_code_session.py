"""A Claude Code session as ``loopbench record`` sees it is one rollout (pure observer).

Claude Code 2.1 re-sends its conversation every turn but not unchanged: the ``system``
message it keeps inside ``messages`` is rewritten between the first and the second turn,
and the tools grow when it loads a deferred one (both seen in the capture of
tests/data/agents/).  The requests below are its real last request
(tests/data/agents/claude-code.json) cut back to its first turn, with the system message
and tools as they were then; the responses are the Messages stream of the server.
"""

from __future__ import annotations

from typing import Any

import orjson

from harness.record.observe import MESSAGES, Exchange, build_trace, summarize
from tests.agent_requests import captured


def _sse(*events: dict[str, Any]) -> bytes:
    return b"".join(
        f"event: {e['type']}\ndata: ".encode() + orjson.dumps(e) + b"\n\n" for e in events
    )


def _response(blocks: list[dict[str, Any]], stop: str) -> bytes:
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "msg_x", "usage": {"input_tokens": 900}}}
    ]
    for i, block in enumerate(blocks):
        events.append({"type": "content_block_start", "index": i, "content_block": block})
        events.append({"type": "content_block_stop", "index": i})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop},
            "usage": {"output_tokens": 40, "input_tokens": 900},
        }
    )
    events.append({"type": "message_stop"})
    return _sse(*events)


def _exchange(body: dict[str, Any], response: bytes, t: int) -> Exchange:
    ex = summarize(MESSAGES, "http", t, orjson.dumps(body), 200, response, {}, (t, t + 20))
    assert ex is not None
    return ex


def test_a_claude_code_session_whose_system_message_and_tools_change_is_one_rollout() -> None:
    last = captured("claude-code")["requests"][2]["body"]
    roles = [m["role"] for m in last["messages"]]
    assert roles[:4] == ["user", "system", "assistant", "user"]
    first = dict(last, messages=[dict(m) for m in last["messages"][:2]], tools=last["tools"][:-1])
    first["messages"][1]["content"] = "Placeholder of the first turn's system message."
    use = last["messages"][2]["content"][0]
    assert use["type"] == "tool_use"
    exchanges = [
        _exchange(first, _response([use], "tool_use"), 1_000),
        _exchange(last, _response([{"type": "text", "text": ""}], "end_turn"), 2_000),
    ]
    _, rollouts = build_trace(exchanges)
    [rollout] = rollouts
    assert [len(t.tool_calls) for t in rollout.turns] == [1, 0]
