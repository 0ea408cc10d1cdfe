"""``POST /v1/messages`` through the official ``anthropic`` SDK with strict validation.

Real reference servers on port 0 (docs/server.md "Anthropic Messages"):
``messages.create`` (``stream=True`` and not) and the ``messages.stream`` helper, a tool
loop of ``tool_use`` / ``tool_result`` turns, prompt caching at ``cache_control``
breakpoints (written on one turn, read on the next, and the read skips prefill in the
engine: docs/model.md "Prompt caching"), thinking blocks sent back with their
signature, and errors raising the SDK's typed exceptions.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from anthropic import Anthropic

from harness.wire.tokens import count_tokens
from tests.server.conftest import configured_server

KEY = "sk-ant-test"
EPHEMERAL: dict[str, Any] = {"type": "ephemeral"}
TOOLS: list[Any] = [
    {
        "name": "read_file",
        "description": "Read a file of the repository.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
    {
        "name": "run_tests",
        "description": "Run the test suite.",
        "input_schema": {
            "type": "object",
            "properties": {"pattern": {"type": "string"}},
            "required": ["pattern"],
        },
    },
]
SYSTEM = "You are a careful coding agent working in a large repository. " * 8


def hints(output: int = 12, *, parallel: int | None = None, reasoning: int | None = None) -> Any:
    out = {"user_id": "tester", "loopbench.output_tokens": str(output)}
    if parallel is not None:
        out["loopbench.parallel_calls"] = str(parallel)
    if reasoning is not None:
        out["loopbench.reasoning_tokens"] = str(reasoning)
    return out


def root(base: str) -> str:
    """The SDK adds ``/v1/messages`` itself."""
    return base.removesuffix("/v1")


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with configured_server("--api-key", KEY, "--default-tool-calls", "3") as base:
        yield root(base)


@pytest.fixture()
def client(url: str) -> Iterator[Anthropic]:
    with Anthropic(api_key=KEY, base_url=url, max_retries=0, _strict_response_validation=True) as c:
        yield c


def test_a_message_without_streaming(client: Anthropic) -> None:
    done = client.messages.create(
        model="sim",
        max_tokens=100,
        messages=[{"role": "user", "content": "hi"}],
        metadata=hints(12),
    )
    assert done.type == "message" and done.role == "assistant" and done.id.startswith("msg_")
    assert done.stop_reason == "end_turn"
    assert [b.type for b in done.content] == ["text"]
    assert len(done.content[0].text) == 48  # type: ignore[union-attr]
    assert done.usage.output_tokens == 12
    assert done.usage.input_tokens == count_tokens("hi") + 4
    # No cache_control anywhere: nothing read, nothing written.
    assert done.usage.cache_read_input_tokens == 0
    assert done.usage.cache_creation_input_tokens == 0


def test_the_raw_stream_is_the_messages_event_sequence(client: Anthropic) -> None:
    events = list(
        client.messages.create(
            model="sim",
            max_tokens=100,
            messages=[{"role": "user", "content": "hello"}],
            metadata=hints(16),
            stream=True,
        )
    )
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start"
    assert kinds[1:3] == ["content_block_start", "content_block_delta"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    text = "".join(
        e.delta.text
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    assert len(text) == 64
    delta = events[-2]
    assert delta.type == "message_delta" and delta.delta.stop_reason == "end_turn"
    assert delta.usage.output_tokens == 16
    timing = (delta.model_extra or {})["sim_timing"]
    assert timing["ttft"] > 0


def _turn(client: Anthropic, messages: list[Any], **kw: Any) -> Any:
    """One turn as coding agents send it: breakpoints on the system, last tool and last block."""
    marked = [dict(m) for m in messages]
    last = marked[-1]
    blocks = [dict(b) for b in last["content"]]
    blocks[-1]["cache_control"] = EPHEMERAL
    marked[-1] = dict(last, content=blocks)
    tools = [*TOOLS[:-1], dict(TOOLS[-1], cache_control=EPHEMERAL)]
    with client.messages.stream(
        model="sim",
        max_tokens=4096,
        system=[{"type": "text", "text": SYSTEM, "cache_control": EPHEMERAL}],
        tools=tools,
        messages=marked,
        **kw,
    ) as stream:
        return stream.get_final_message()


def test_a_tool_loop_writes_then_reads_the_prompt_cache(client: Anthropic) -> None:
    messages: list[Any] = [
        {"role": "user", "content": [{"type": "text", "text": "Fix the failing parser test."}]}
    ]
    usages = []
    for _ in range(5):
        done = _turn(client, messages, metadata=hints(24, parallel=2))
        usages.append(done.usage)
        messages.append({"role": "assistant", "content": [b.model_dump() for b in done.content]})
        if done.stop_reason != "tool_use":
            break
        uses = [b for b in done.content if b.type == "tool_use"]
        assert len(uses) == 2 and all(set(u.input) for u in uses)  # type: ignore[arg-type]
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": u.id, "content": "ok " * 30}
                    for u in uses
                ],
            }
        )
    assert len(usages) == 3 and done.stop_reason == "end_turn"
    first, second = usages[0], usages[1]
    # Turn 1: everything up to the last breakpoint (the whole prompt) is read or written.
    assert first.input_tokens == 0
    assert first.cache_creation_input_tokens > count_tokens("Fix the failing parser test.")
    # Turn 2: turn 1's prompt is read; the new assistant turn and the results are written.
    assert second.cache_read_input_tokens == (
        first.cache_read_input_tokens + first.cache_creation_input_tokens
    )
    assert second.cache_creation_input_tokens > 2 * count_tokens("ok " * 30)
    assert second.input_tokens == 0


def test_the_prompt_cache_read_skips_prefill_in_the_engine(client: Anthropic) -> None:
    """The tokens read are the engine's cached tokens: they skip prefill as a prefix-cache hit does."""
    messages: list[Any] = [
        {"role": "user", "content": [{"type": "text", "text": "A question about caching " * 40}]}
    ]
    timings = []
    for _ in range(2):
        events = list(
            client.messages.create(
                model="sim",
                max_tokens=100,
                system=[{"type": "text", "text": SYSTEM, "cache_control": EPHEMERAL}],
                messages=[
                    dict(
                        messages[0],
                        content=[dict(messages[0]["content"][0], cache_control=EPHEMERAL)],
                    )
                ],
                metadata=hints(4),
                stream=True,
            )
        )
        start, delta = events[0], events[-2]
        assert start.type == "message_start" and delta.type == "message_delta"
        # message_start announces the split the engine then applies.
        assert start.message.usage.cache_read_input_tokens == delta.usage.cache_read_input_tokens
        timings.append(((delta.model_extra or {})["sim_timing"], delta.usage))
    (cold, cold_usage), (warm, warm_usage) = timings
    assert cold["cached_input_tokens"] == 0
    assert warm["cached_input_tokens"] == warm_usage.cache_read_input_tokens
    assert warm_usage.cache_read_input_tokens == cold_usage.cache_creation_input_tokens
    assert warm["prefill"] < cold["prefill"]


def test_without_breakpoints_nothing_is_cached_even_on_a_repeat(client: Anthropic) -> None:
    body: Any = {
        "model": "sim",
        "max_tokens": 50,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": "same prompt " * 20}],
        "metadata": hints(4),
    }
    client.messages.create(**body)
    again = client.messages.create(**body)
    assert again.usage.cache_read_input_tokens == 0
    assert again.usage.cache_creation_input_tokens == 0
    assert again.usage.input_tokens == count_tokens(SYSTEM) + count_tokens("same prompt " * 20) + 8


def test_more_than_four_breakpoints_is_400(client: Anthropic) -> None:
    blocks = [{"type": "text", "text": f"part {i}", "cache_control": EPHEMERAL} for i in range(5)]
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(
            model="sim", max_tokens=10, messages=[{"role": "user", "content": blocks}]
        )
    assert "maximum of 4 blocks with cache_control" in info.value.message
    body: Any = info.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"


def test_thinking_blocks_stream_with_a_signature_and_are_accepted_back(client: Anthropic) -> None:
    messages: list[Any] = [
        {"role": "user", "content": [{"type": "text", "text": "Think, then act."}]}
    ]
    thinking: Any = {"type": "enabled", "budget_tokens": 1024}
    first = _turn(client, messages, thinking=thinking, metadata=hints(20, parallel=1, reasoning=80))
    assert [b.type for b in first.content] == ["thinking", "tool_use"]
    block = first.content[0]
    assert block.thinking and block.signature  # type: ignore[union-attr]
    # Thinking tokens are output tokens.
    assert first.usage.output_tokens >= 80 + 1
    messages.append({"role": "assistant", "content": [b.model_dump() for b in first.content]})
    messages.append(
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": first.content[1].id, "content": "done"}  # type: ignore[union-attr]
            ],
        }
    )
    second = _turn(client, messages, thinking=thinking, metadata=hints(20, reasoning=80))
    assert second.content[0].type == "thinking"
    # The re-sent thinking is input: charged as the 80 tokens it was (its signature says so).
    assert second.usage.cache_read_input_tokens == (
        first.usage.cache_read_input_tokens + first.usage.cache_creation_input_tokens
    )
    assert second.usage.cache_creation_input_tokens >= 80


def test_tool_choice_any_calls_and_none_answers(client: Anthropic) -> None:
    base: Any = {
        "model": "sim",
        "max_tokens": 200,
        "tools": TOOLS,
        "messages": [{"role": "user", "content": "go"}],
        "metadata": hints(10),
    }
    forced = client.messages.create(tool_choice={"type": "any"}, **base)
    assert forced.stop_reason == "tool_use"
    named = client.messages.create(tool_choice={"type": "tool", "name": "run_tests"}, **base)
    assert [b.name for b in named.content if b.type == "tool_use"] == ["run_tests"]
    plain = client.messages.create(tool_choice={"type": "none"}, **base)
    assert plain.stop_reason == "end_turn" and plain.content[0].type == "text"


def test_max_tokens_cuts_the_answer(client: Anthropic) -> None:
    done = client.messages.create(
        model="sim", max_tokens=5, messages=[{"role": "user", "content": "x"}], metadata=hints(50)
    )
    assert done.stop_reason == "max_tokens" and done.usage.output_tokens == 5


# -- errors ------------------------------------------------------------------------------------


def test_a_wrong_key_is_an_authentication_error_and_bearer_works_too(url: str) -> None:
    with (
        Anthropic(api_key="sk-ant-wrong", base_url=url, max_retries=0) as wrong,
        pytest.raises(anthropic.AuthenticationError) as info,
    ):
        wrong.messages.create(
            model="sim", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    body: Any = info.value.body
    assert body["error"]["type"] == "authentication_error" and body["request_id"]
    with Anthropic(auth_token=KEY, base_url=url, max_retries=0) as bearer:
        done = bearer.messages.create(
            model="sim",
            max_tokens=5,
            messages=[{"role": "user", "content": "x"}],
            metadata=hints(2),
        )
    assert done.usage.output_tokens == 2
    missing = httpx.post(f"{url}/v1/messages", json={"model": "sim"})
    assert missing.status_code == 401 and "x-api-key" in missing.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            {
                "max_tokens": 5,
                "messages": [
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}
                ],
            },
            "messages.0.content.0.tool_use_id",
        ),
        ({"max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]}, "messages.0.role"),
        ({"max_tokens": 5, "messages": []}, "messages"),
        (
            {
                "max_tokens": 2000,
                "thinking": {"type": "enabled", "budget_tokens": 4000},
                "messages": [{"role": "user", "content": "x"}],
            },
            "budget_tokens",
        ),
    ],
)
def test_a_bad_request_is_a_bad_request_error_naming_the_field(
    client: Anthropic, body: dict[str, Any], field: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model="sim", **body)
    assert field in info.value.message


def test_max_tokens_is_required_and_capped(client: Anthropic, url: str) -> None:
    missing = httpx.post(
        f"{url}/v1/messages",
        json={"model": "sim", "messages": [{"role": "user", "content": "x"}]},
        headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
    )
    assert missing.status_code == 400 and "max_tokens" in missing.json()["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as info:
        # Streamed: the SDK refuses a non-streamed create this long before sending it.
        client.messages.create(
            model="sim",
            max_tokens=999_999,
            messages=[{"role": "user", "content": "x"}],
            stream=True,
        )
    assert "max_tokens" in info.value.message and "max_output_tokens" not in info.value.message


def test_a_failure_mid_stream_is_an_error_event(client: Anthropic) -> None:
    with pytest.raises(anthropic.APIStatusError) as info:
        list(
            client.messages.create(
                model="sim",
                max_tokens=20,
                messages=[{"role": "user", "content": "x"}],
                metadata={"loopbench.fail": "mid_stream"},
                stream=True,
            )
        )
    body: Any = info.value.body
    assert body["type"] == "error" and body["error"]["type"] == "api_error"


def test_the_rate_limit_is_a_rate_limit_error() -> None:
    msgs: Any = [{"role": "user", "content": "x"}]
    with (
        configured_server("--rate-limit-rps", "0.01", "--rate-limit-burst", "1") as base,
        Anthropic(api_key="k", base_url=root(base), max_retries=0) as c,
    ):
        c.messages.create(model="sim", max_tokens=5, messages=msgs, metadata=hints(2))
        with pytest.raises(anthropic.RateLimitError) as info:
            c.messages.create(model="sim", max_tokens=5, messages=msgs)
    assert info.value.response.headers["retry-after"]
    body: Any = info.value.body
    assert body["error"]["type"] == "rate_limit_error"


@pytest.mark.parametrize(
    ("status", "error", "kind"),
    [
        (503, anthropic.OverloadedError, "overloaded_error"),
        (500, anthropic.InternalServerError, "api_error"),
    ],
)
def test_injected_faults_are_typed_server_errors(
    status: int, error: type[anthropic.APIStatusError], kind: str
) -> None:
    with (
        configured_server("--fault", f"error_rate.{status}=1") as base,
        Anthropic(api_key="k", base_url=root(base), max_retries=0) as c,
        pytest.raises(error) as info,
    ):
        c.messages.create(model="sim", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    body: Any = info.value.body
    assert body["error"]["type"] == kind


def test_oversized_bodies_are_413_in_each_api_shape() -> None:
    big = {"model": "sim", "max_tokens": 5, "messages": [{"role": "user", "content": "x" * 4096}]}
    with configured_server("--max-body-bytes", "2048") as base:
        messages = httpx.post(f"{root(base)}/v1/messages", json=big)
        chat = httpx.post(f"{base}/chat/completions", json=big)
        # The server answers a valid request afterwards.
        small = httpx.post(
            f"{root(base)}/v1/messages",
            json={**big, "messages": [{"role": "user", "content": "x"}]},
        )
    assert messages.status_code == 413
    assert messages.json()["error"]["type"] == "request_too_large"
    assert chat.status_code == 413 and chat.json()["error"]["code"] == "request_too_large"
    assert small.status_code == 200 and small.json()["type"] == "message"


def test_chat_and_messages_share_the_engine_stream_slots() -> None:
    """With one engine stream slot, a message waits while a chat completion streams."""
    with (
        configured_server("--set", "engine.max_streams=1") as base,
        httpx.Client(timeout=60) as http,
        Anthropic(api_key="k", base_url=root(base), max_retries=0) as c,
    ):
        body = {
            "model": "sim",
            "messages": [{"role": "user", "content": "long"}],
            "stream": True,
            "metadata": {"loopbench.output_tokens": "3000", "loopbench.reasoning_tokens": "0"},
        }
        with http.stream("POST", f"{base}/chat/completions", json=body) as chat:
            lines = chat.iter_lines()
            # The role chunk, then the first content: the chat completion holds the slot now.
            while '"content":"' not in next(lines).replace('"content":""', ""):
                pass
            done = c.messages.create(
                model="sim", max_tokens=5, messages=[{"role": "user", "content": "x"}]
            )
    timing = (done.model_extra or {})["sim_timing"]
    assert timing["engine_queue"] > 0


def test_the_disconnect_fault_cuts_both_streams_after_the_first_delta() -> None:
    chat_body = {
        "model": "sim",
        "messages": [{"role": "user", "content": "x"}],
        "stream": True,
        "metadata": {"loopbench.output_tokens": "200", "loopbench.reasoning_tokens": "0"},
    }
    messages_body = {**chat_body, "max_tokens": 300}
    with (
        configured_server("--fault", "disconnect_rate=1") as base,
        httpx.Client(timeout=30) as http,
    ):
        for url, body, end in (
            (f"{base}/chat/completions", chat_body, "data: [DONE]"),
            (f"{root(base)}/v1/messages", messages_body, "message_stop"),
        ):
            seen: list[str] = []
            with (
                pytest.raises(httpx.RemoteProtocolError),
                http.stream("POST", url, json=body) as response,
            ):
                seen.extend(response.iter_lines())
            text = "\n".join(seen)
            assert end not in text, url
            assert '"content":"' in text.replace('"content":""', "") or "text_delta" in text


def test_a_non_streamed_message_carries_its_thinking_block(client: Anthropic) -> None:
    done = client.messages.create(
        model="sim",
        max_tokens=2000,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=[{"role": "user", "content": "think"}],
        metadata=hints(8, reasoning=50),
    )
    assert [b.type for b in done.content] == ["thinking", "text"]
    block: Any = done.content[0]
    assert block.thinking and block.signature.startswith("rs_")
    assert done.usage.output_tokens == 58
