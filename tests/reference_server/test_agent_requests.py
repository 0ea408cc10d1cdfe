"""What today's agents send is accepted, as the real APIs accept it (pure: bodies in, requests out).

Every body here was sent by a real agent (Codex CLI, Claude Code, the openai-agents SDK;
tests/data/agents/README.md) and is replayed through the server's own parsers: the
Responses create (HTTP and WebSocket), Messages and Chat Completions.  Next to each
acceptance, the refusal that keeps it meaningful: what the real API refuses still is.
"""

from __future__ import annotations

from typing import Any

import pytest

from reference_server.core.chat import parse_chat
from reference_server.core.conversation import ITEM_OVERHEAD_TOKENS, item_tokens
from reference_server.core.messages import parse_messages
from reference_server.core.validation import RequestError, parse_create
from tests.agent_requests import CHAT, MESSAGES, RESPONSES, bodies, captured, ids


def body_of(name: str, index: int) -> dict[str, Any]:
    return bodies(name)[index]


@pytest.mark.parametrize(("name", "index"), ids(RESPONSES))
def test_every_captured_responses_body_is_accepted(name: str, index: int) -> None:
    websocket = "connection" in captured(name)
    body = body_of(name, index)
    req = parse_create(body, websocket=websocket)
    assert len(req.input_items) == len(body["input"])
    # the hosted and custom tools it offers are kept (charged) but never callable
    callable_ = {t["name"] for t in req.tools if t.get("type") == "function"}
    offered = {t.get("name") for t in body.get("tools", []) if t.get("type") == "function"}
    assert callable_ == offered


@pytest.mark.parametrize(("name", "index"), ids(MESSAGES))
def test_every_captured_messages_body_is_accepted(name: str, index: int) -> None:
    body = body_of(name, index)
    req = parse_messages(body)
    deferred = {t["name"] for t in body["tools"] if t.get("defer_loading")}
    callable_ = {t["name"] for t in req.create.tools if t.get("type") == "function"}
    assert callable_ and not callable_ & deferred


@pytest.mark.parametrize(("name", "index"), ids(CHAT))
def test_every_captured_chat_body_is_accepted(name: str, index: int) -> None:
    req = parse_chat(body_of(name, index))
    assert req.create.input_items


def test_codex_output_of_its_own_tool_without_call_id_is_accepted_and_charged() -> None:
    body = body_of("codex-http", 0)
    outputs = [
        it for it in body["input"] if it["type"] == "function_call_output" and "call_id" not in it
    ]
    assert [(o["name"], o["namespace"]) for o in outputs] == [("goal_objective", "agent")]
    req = parse_create(body)
    (item,) = [it for it in req.input_items if it.get("name") == "goal_objective"]
    assert item_tokens(item) > ITEM_OVERHEAD_TOKENS
    # ... but an output that names neither a call nor a tool answers nothing: still refused
    del outputs[0]["name"]
    with pytest.raises(RequestError) as err:
        parse_create(body)
    assert err.value.code == "missing_required_parameter"
    assert err.value.param is not None and err.value.param.endswith(".call_id")
    outputs[0]["namespace"] = 3
    outputs[0]["call_id"] = "call_1"
    with pytest.raises(RequestError, match="namespace"):
        parse_create(body)


def test_codex_fields_are_accepted_and_reasoning_items_are_charged() -> None:
    body = body_of("codex-http", 1)
    for key in ("prompt_cache_key", "client_metadata", "include", "text", "parallel_tool_calls"):
        assert key in body, key
    assert body["text"] == {"verbosity": "low"}
    req = parse_create(body)
    reasoning = [it for it in req.input_items if it["type"] == "reasoning"]
    assert reasoning and all(it["encrypted_content"] and it["content"] is None for it in reasoning)
    assert all(item_tokens(it) > ITEM_OVERHEAD_TOKENS for it in reasoning)
    kinds = {t.get("type") for t in req.tools}
    assert {"custom", "tool_search", "web_search", "function"} <= kinds


def test_codex_websocket_warm_up_and_chained_turns_are_accepted() -> None:
    first, *rest = bodies("codex-ws")
    assert first["generate"] is False and first["store"] is False
    assert not parse_create(first, websocket=True).generate
    for body in rest:
        assert parse_create(body, websocket=True).previous_response_id


CUSTOM_AND_HOSTED_ITEMS: list[dict[str, Any]] = [
    {"type": "custom_tool_call", "call_id": "call_1", "name": "apply_patch", "input": "*** x"},
    {"type": "custom_tool_call_output", "call_id": "call_1", "output": "Done."},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"query": "q"}},
    {"type": "tool_search_call", "id": "ts_1", "arguments": {"query": "files"}},
    {"type": "tool_search_output", "id": "to_1", "tools": [{"type": "function", "name": "f"}]},
    {"type": "local_shell_call", "call_id": "c2", "action": {"command": ["ls"]}},
    {"type": "mcp_call", "id": "mcp_1", "name": "lookup", "arguments": "{}", "output": "x"},
]


def test_custom_tool_calls_and_hosted_tool_items_are_context() -> None:
    body = {"model": "m", "input": [*CUSTOM_AND_HOSTED_ITEMS, {"role": "user", "content": "go"}]}
    req = parse_create(body)
    assert [it.get("type") for it in req.input_items[:-1]] == [
        it["type"] for it in CUSTOM_AND_HOSTED_ITEMS
    ]
    assert all(item_tokens(it) > ITEM_OVERHEAD_TOKENS for it in req.input_items)
    body["input"][0] = {"type": "custom_tool_call", "call_id": "call_1", "name": "apply_patch"}
    with pytest.raises(RequestError) as err:
        parse_create(body)
    assert err.value.param == "input[0].input"
    body["input"][0] = {"type": "no_such_item"}
    with pytest.raises(RequestError, match="unsupported input item type 'no_such_item'"):
        parse_create(body)


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "allowed_tools", "mode": "required", "tools": []}, "required"),
        ({"type": "allowed_tools", "mode": "auto", "tools": []}, "auto"),
        ({"type": "web_search"}, "none"),
        ({"type": "custom", "name": "apply_patch"}, "none"),
        ({"type": "function", "name": "f"}, {"type": "function", "name": "f"}),
    ],
)
def test_responses_tool_choice_objects(choice: dict[str, Any], expected: Any) -> None:
    tools = [
        {"type": "function", "name": "f", "parameters": {"type": "object"}},
        {"type": "custom", "name": "apply_patch"},
    ]
    req = parse_create({"model": "m", "input": "x", "tools": tools, "tool_choice": choice})
    assert req.tool_choice == expected


def test_a_system_message_inside_messages_is_system_text_in_its_place() -> None:
    body = body_of("claude-code", 0)
    (at,) = [i for i, m in enumerate(body["messages"]) if m["role"] == "system"]
    assert body["messages"][at]["output_config"] == {"effort": "medium"}
    req = parse_messages(body)
    system_items = [
        it for it in req.create.input_items if it["type"] == "message" and it["role"] == "system"
    ]
    # the top-level system blocks, then the one from `messages`, after the first user message
    assert len(system_items) == len(body["system"]) + 1
    assert system_items[-1]["content"] == body["messages"][at]["content"]
    first_user = next(i for i, it in enumerate(req.create.input_items) if it["role"] == "user")
    assert req.create.input_items.index(system_items[-1]) > first_user
    body["messages"][at]["role"] = "moderator"
    with pytest.raises(RequestError, match="'user', 'assistant' or 'system'"):
        parse_messages(body)


def test_context_management_is_checked_not_applied() -> None:
    body = body_of("claude-code", 0)
    assert body["context_management"]["edits"][0]["type"] == "clear_thinking_20251015"
    with_it = parse_messages(body).input_tokens
    del body["context_management"]
    assert parse_messages(body).input_tokens == with_it
    body["context_management"] = {"edits": [{"keep": "all"}]}
    with pytest.raises(RequestError, match=r"context_management\.edits\.0"):
        parse_messages(body)


def test_deferred_and_server_tools_are_accepted_and_never_callable() -> None:
    body = body_of("claude-code", 0)
    body["tools"] += [
        {"type": "mcp_toolset", "mcp_server_name": "docs"},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
        {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"},
    ]
    req = parse_messages(body)
    kinds = [t["type"] for t in req.create.tools]
    assert kinds.count("deferred") == sum(1 for t in body["tools"] if t.get("defer_loading"))
    assert kinds[-3:] == ["mcp_toolset", "web_search_20250305", "tool_search_tool_regex_20251119"]
    # a deferred tool is charged its name only, not its schema
    deferred = next(t for t in body["tools"] if t.get("defer_loading"))
    assert {"type": "deferred", "name": deferred["name"]} in req.create.tools


def test_server_tool_blocks_sent_back_are_context_and_unknown_blocks_refused() -> None:
    body: dict[str, Any] = {
        "model": "m",
        "max_tokens": 100,
        "messages": [
            {"role": "user", "content": "look it up"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "server_tool_use",
                        "id": "srvtoolu_1",
                        "name": "web_search",
                        "input": {},
                    },
                    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                    {"type": "text", "text": "found"},
                ],
            },
            {"role": "user", "content": "thanks"},
        ],
    }
    req = parse_messages(body)
    assert len(req.create.input_items) == 5
    assert all(item_tokens(it) > ITEM_OVERHEAD_TOKENS for it in req.create.input_items)
    body["messages"][1]["content"][0]["type"] = "no_such_block"
    with pytest.raises(RequestError, match="unsupported content block type 'no_such_block'"):
        parse_messages(body)


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def test_chat_fields_the_openai_sdk_and_frameworks_send() -> None:
    body = body_of("openai-agents-chat", 1)
    body.pop("max_tokens")
    body.update(
        max_completion_tokens=300,
        parallel_tool_calls=False,
        reasoning_effort="low",
        stream=True,
        stream_options={"include_usage": True, "include_obfuscation": False},
        tool_choice={
            "type": "function",
            "function": {"name": body["tools"][0]["function"]["name"]},
        },
        verbosity="low",
        prompt_cache_key="session-1",
        service_tier="auto",
        safety_identifier="u1",
        store=False,
    )
    req = parse_chat(body)
    assert req.create.max_output_tokens == 300 and req.max_tokens_field == "max_completion_tokens"
    assert not req.create.parallel_tool_calls and req.include_usage
    assert req.create.tool_choice == {
        "type": "function",
        "name": body["tools"][0]["function"]["name"],
    }


def test_chat_custom_tools_and_allowed_tools_choice() -> None:
    custom = {"type": "custom", "custom": {"name": "apply_patch", "format": {"type": "text"}}}
    body: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "tools": [TOOL, custom],
        "tool_choice": {
            "type": "allowed_tools",
            "allowed_tools": {"mode": "required", "tools": []},
        },
    }
    req = parse_chat(body)
    assert req.create.tool_choice == "required"
    assert [t["type"] for t in req.create.tools] == ["function", "custom"]
    body["tool_choice"] = {"type": "custom", "custom": {"name": "apply_patch"}}
    assert parse_chat(body).create.tool_choice == "none"
    body["tools"] = [custom]
    body["tool_choice"] = "required"
    with pytest.raises(RequestError, match="needs at least one function"):
        parse_chat(body)
    body["tools"] = [{"type": "custom", "custom": {}}]
    with pytest.raises(RequestError) as err:
        parse_chat(body)
    assert err.value.param == "tools[0].custom.name"


@pytest.mark.parametrize("name", [["f"], {"n": "f"}, None])
def test_a_forced_function_named_by_a_non_string_is_a_400_in_either_api(name: Any) -> None:
    """The forced name is looked up among the tools' names by equality: a list or object
    there (unhashable) is the same 400 as an unknown name, never a TypeError (a 500)."""
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    with pytest.raises(RequestError) as err:
        parse_create(
            {
                "model": "m",
                "input": "x",
                "tools": tools,
                "tool_choice": {"type": "function", "name": name},
            }
        )
    assert (err.value.status, err.value.param) == (400, "tool_choice.name")
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "x"}],
        "tools": [TOOL],
        "tool_choice": {"type": "function", "function": {"name": name}},
    }
    with pytest.raises(RequestError) as err:
        parse_chat(body)
    assert (err.value.status, err.value.param) == (400, "tool_choice.function.name")
