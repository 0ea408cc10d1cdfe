"""A real agent loop over the public SDK: tool_choice "auto" until the model answers.

The loop does what agent code does: parse each call's JSON arguments, dispatch by
name to a Python function with those keyword arguments, send the results back,
repeat.  A schema violation in the server's arguments would raise a TypeError in
the dispatch, so the loop also checks that the arguments are usable.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai import OpenAI

from tests.function_tools import strict_tool
from tests.server.test_sdk_conformance import SDK_WS_LEGACY

TOOLS: list[dict[str, Any]] = [
    strict_tool(
        "list_dir", "List a directory.", path={"type": "string"}, depth={"type": "integer"}
    ),
    strict_tool(
        "grep",
        "Search files.",
        pattern={"type": "string"},
        case={"type": "string", "enum": ["sensitive", "insensitive"]},
    ),
]


def list_dir(path: str, depth: int) -> str:
    assert isinstance(path, str) and isinstance(depth, int)
    return json.dumps({"entries": ["a.py", "b.py"], "depth": depth})


def grep(pattern: str, case: str) -> str:
    assert case in ("sensitive", "insensitive")
    return json.dumps({"matches": 2, "pattern": pattern})


DISPATCH = {"list_dir": list_dir, "grep": grep}
META = {"loopbench.tool_calls": "4", "loopbench.output_tokens": "24"}
#: what every turn of the agent sends besides its input and chaining, over either transport
AGENT: dict[str, Any] = {"model": "sim", "tools": TOOLS, "tool_choice": "auto", "metadata": META}


def run_tools(calls: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function_call_output",
            "call_id": call.call_id,
            "output": DISPATCH[call.name](**json.loads(call.arguments)),
        }
        for call in calls
    ]


def test_agent_loop_over_http_chains_to_a_final_answer(server_url: str) -> None:
    client = OpenAI(
        api_key="sk-test", base_url=server_url, max_retries=0, _strict_response_validation=True
    )
    prev = None
    new_input: Any = "Find where the config is loaded."
    steps = 0
    for _ in range(10):
        resp = client.responses.create(input=new_input, previous_response_id=prev, **AGENT)
        calls = [item for item in resp.output if item.type == "function_call"]
        if not calls:
            break
        steps += 1
        new_input = run_tools(calls)
        prev = resp.id
    client.close()
    assert steps == 4
    assert resp.status == "completed" and len(resp.output_text) == 24 * 4


@SDK_WS_LEGACY
def test_agent_loop_over_websocket_to_a_final_answer(server_url: str) -> None:
    client = OpenAI(api_key="sk-test", base_url=server_url, max_retries=0)
    steps = 0
    final_text = ""
    with client.responses.connect() as conn:
        prev = None
        new_input: Any = "Find where the config is loaded."
        for _ in range(10):
            extra = {"previous_response_id": prev} if prev else {}
            conn.response.create(input=new_input, store=False, **AGENT, **extra)
            for event in conn:
                if event.type == "error":
                    pytest.fail(f"error event: {event}")
                if event.type == "response.completed":
                    resp = event.response
                    break
            calls = [item for item in resp.output if item.type == "function_call"]
            if not calls:
                final_text = resp.output_text
                break
            steps += 1
            new_input = run_tools(calls)
            prev = resp.id
    assert steps == 4
    assert len(final_text) == 24 * 4
