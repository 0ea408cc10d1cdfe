"""``POST /v1/chat/completions`` through the official ``openai`` SDK with strict validation.

Real reference servers on port 0 (docs/server.md "Chat Completions"): ``stream: false``
and streamed creates, the ``.stream`` helper, a tool loop of several turns with parallel
calls whose second turn reads the first turn's prefix from the shared prefix cache,
``reasoning_content``, ``tool_choice``, and errors in the OpenAI shape (401, 400 naming
the chat field, 429, a mid-stream failure).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from harness.wire.tokens import count_tokens
from tests.server.conftest import configured_server

KEY = "sk-chat-test"
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "description": "Run the test suite.",
            "parameters": {
                "type": "object",
                "properties": {"pattern": {"type": "string"}},
                "required": ["pattern"],
            },
        },
    },
]


def hints(output: int = 12, *, parallel: int | None = None, reasoning: int = 0) -> dict[str, str]:
    out = {"loopbench.output_tokens": str(output), "loopbench.reasoning_tokens": str(reasoning)}
    if parallel is not None:
        out["loopbench.parallel_calls"] = str(parallel)
    return out


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with configured_server("--api-key", KEY, "--default-tool-calls", "3") as base:
        yield base


@pytest.fixture()
def client(url: str) -> Iterator[OpenAI]:
    with OpenAI(api_key=KEY, base_url=url, max_retries=0, _strict_response_validation=True) as c:
        yield c


def test_non_streaming_completion_is_one_strictly_valid_object(client: OpenAI) -> None:
    done = client.chat.completions.create(
        model="sim",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        metadata=hints(12),
    )
    assert done.object == "chat.completion" and done.id.startswith("chatcmpl-")
    choice = done.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    assert choice.message.content is not None and len(choice.message.content) == 48
    assert done.usage is not None and done.usage.completion_tokens == 12
    # 4 characters a token, 4 framing tokens per message.
    assert done.usage.prompt_tokens == count_tokens("Be brief.") + count_tokens("hi") + 2 * 4


def test_streamed_chunks_open_with_the_role_and_end_with_usage_and_sim_timing(
    client: OpenAI,
) -> None:
    stream = client.chat.completions.create(
        model="sim",
        messages=[{"role": "user", "content": "hello there"}],
        stream=True,
        stream_options={"include_usage": True},
        metadata=hints(20),
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text) == 80
    finishing = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishing[-1] == "stop" and finishing.count("stop") == 1
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == 20
    assert last.usage.total_tokens == last.usage.prompt_tokens + 20
    timing = (last.model_extra or {})["sim_timing"]
    assert timing["ttft"] > 0 and timing["cache"] == "none"


def test_no_usage_chunk_unless_asked(client: OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model="sim", messages=[{"role": "user", "content": "x"}], stream=True, metadata=hints(4)
        )
    )
    assert all(c.usage is None and c.choices for c in chunks)


def test_stream_helper_accumulates_the_completion(client: OpenAI) -> None:
    with client.chat.completions.stream(
        model="sim", messages=[{"role": "user", "content": "hi"}], metadata=hints(8)
    ) as stream:
        deltas = [e.delta for e in stream if e.type == "content.delta"]
        final = stream.get_final_completion()
    assert "".join(deltas) == final.choices[0].message.content
    assert final.choices[0].finish_reason == "stop"


def _turn(client: OpenAI, messages: list[Any], **hint: Any) -> Any:
    with client.chat.completions.stream(
        model="sim",
        messages=messages,
        tools=TOOLS,
        stream_options={"include_usage": True},
        metadata=hints(24, **hint),
    ) as stream:
        return stream.get_final_completion()


def test_a_tool_loop_with_parallel_calls_reads_the_shared_prefix_cache(client: OpenAI) -> None:
    messages: list[Any] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test in the parser module, please."},
    ]
    usages = []
    for _ in range(5):
        done = _turn(client, messages, parallel=2)
        usages.append(done.usage)
        message = done.choices[0].message
        if done.choices[0].finish_reason != "tool_calls":
            break
        calls = message.tool_calls or []
        assert len(calls) == 2 and len({c.id for c in calls}) == 2
        schema = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
        for call in calls:
            assert set(json.loads(call.function.arguments)) == set(
                schema[call.function.name]["required"]
            )
        messages.append(message.model_dump(exclude_none=True, exclude={"parsed"}))
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "ok " * 30})
    # The scripted agent: 3 calls along the chain (--default-tool-calls), two per turn, then an answer.
    assert len(usages) == 3 and messages[-1]["role"] == "tool"
    first, second = usages[0], usages[1]
    assert first.prompt_tokens_details.cached_tokens == 0
    # Stateless like `http`: the whole history is sent, the first turn's input is cached.
    assert second.prompt_tokens_details.cached_tokens == first.prompt_tokens
    assert second.prompt_tokens > first.prompt_tokens + 2 * 30


def test_reasoning_streams_as_reasoning_content_before_the_answer(client: OpenAI) -> None:
    chunks = list(
        client.chat.completions.create(
            model="sim",
            messages=[{"role": "user", "content": "think"}],
            stream=True,
            stream_options={"include_usage": True},
            metadata=hints(10, reasoning=60),
        )
    )
    kinds = []
    for c in chunks:
        if c.choices:
            extra = c.choices[0].delta.model_extra or {}
            if extra.get("reasoning_content"):
                kinds.append("reasoning")
            if c.choices[0].delta.content:
                kinds.append("text")
    assert kinds[0] == "reasoning" and "text" in kinds
    assert kinds.index("text") > max(i for i, k in enumerate(kinds) if k == "reasoning")
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 60
    assert usage.completion_tokens == 70


def test_tool_choice_required_calls_and_none_answers(client: OpenAI) -> None:
    base: dict[str, Any] = {"model": "sim", "tools": TOOLS, "metadata": hints(10)}
    msgs: list[Any] = [{"role": "user", "content": "go"}]
    forced = client.chat.completions.create(messages=msgs, tool_choice="required", **base)
    assert forced.choices[0].finish_reason == "tool_calls"
    named = client.chat.completions.create(
        messages=msgs, tool_choice={"type": "function", "function": {"name": "run_tests"}}, **base
    )
    assert [c.function.name for c in named.choices[0].message.tool_calls or []] == ["run_tests"]
    plain = client.chat.completions.create(messages=msgs, tool_choice="none", **base)
    assert plain.choices[0].finish_reason == "stop" and plain.choices[0].message.tool_calls is None


def test_max_completion_tokens_cuts_the_answer_with_length(client: OpenAI) -> None:
    done = client.chat.completions.create(
        model="sim",
        messages=[{"role": "user", "content": "long"}],
        max_completion_tokens=5,
        metadata=hints(50),
    )
    assert done.choices[0].finish_reason == "length"
    assert done.usage is not None and done.usage.completion_tokens == 5


# -- errors ------------------------------------------------------------------------------------


def test_a_missing_or_wrong_key_is_401(url: str) -> None:
    with (
        OpenAI(api_key="sk-wrong", base_url=url, max_retries=0) as wrong,
        pytest.raises(openai.AuthenticationError) as info,
    ):
        wrong.chat.completions.create(model="sim", messages=[{"role": "user", "content": "x"}])
    assert info.value.code == "invalid_api_key"
    response = httpx.post(f"{url}/chat/completions", json={"model": "sim", "messages": []})
    assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([{"role": "tool", "tool_call_id": "call_x", "content": "r"}], "messages[0].tool_call_id"),
        (
            [{"role": "user", "content": "a"}, {"role": "tool", "content": "r"}],
            "messages[1].tool_call_id",
        ),
        ([{"role": "wizard", "content": "a"}], "messages[0].role"),
        ([{"role": "assistant"}], "messages[0].content"),
        ([{"role": "user", "content": 7}], "messages[0].content"),
        ([], "messages"),
    ],
)
def test_a_bad_message_is_400_naming_the_chat_field(
    client: OpenAI, messages: list[Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="sim", messages=messages)
    body: Any = info.value.body
    assert body["param"] == param and body["type"] == "invalid_request_error"


def test_limits_are_named_as_the_client_sent_them(client: OpenAI) -> None:
    msgs: list[Any] = [{"role": "user", "content": "x"}]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="sim", messages=msgs, max_tokens=999_999)
    assert info.value.param == "max_tokens" and "max_tokens" in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="sim", messages=msgs, n=2)
    assert info.value.param == "n"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="sim", messages=msgs, stream_options={"include_usage": True}
        )
    assert info.value.param == "stream_options"


def test_a_failure_mid_stream_is_one_error_chunk_and_no_done(client: OpenAI, url: str) -> None:
    body = {
        "model": "sim",
        "messages": [{"role": "user", "content": "x"}],
        "stream": True,
        "metadata": {"loopbench.fail": "mid_stream"},
    }
    with pytest.raises(openai.APIError) as info:
        list(client.chat.completions.create(**body))
    assert "injected" in info.value.message
    raw = httpx.post(
        f"{url}/chat/completions", json=body, headers={"authorization": f"Bearer {KEY}"}
    )
    frames = [line for line in raw.text.split("\n\n") if line]
    assert json.loads(frames[-1].removeprefix("data: "))["error"]["type"] == "server_error"
    assert "[DONE]" not in raw.text


def test_the_rate_limit_is_429_with_retry_after() -> None:
    msgs: list[Any] = [{"role": "user", "content": "x"}]
    with (
        configured_server("--rate-limit-rps", "0.01", "--rate-limit-burst", "1") as base,
        OpenAI(api_key="k", base_url=base, max_retries=0) as c,
    ):
        c.chat.completions.create(model="sim", messages=msgs, metadata=hints(2))
        with pytest.raises(openai.RateLimitError) as info:
            c.chat.completions.create(model="sim", messages=msgs)
    assert info.value.response.headers["retry-after"]
    assert info.value.code == "rate_limit_exceeded"
