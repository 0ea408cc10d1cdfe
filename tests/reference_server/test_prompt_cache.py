"""Messages prompt caching, pure (reference_server/core/messages.py; docs/model.md §15)."""

from __future__ import annotations

from typing import Any

import pytest

from reference_server.core.conversation import ITEM_OVERHEAD_TOKENS
from reference_server.core.messages import LOOKBACK_BLOCKS, cache_usage, parse_messages
from reference_server.core.validation import RequestError

MARK = {"type": "ephemeral"}


def _body(blocks: int, marked: tuple[int, ...], **extra: Any) -> dict[str, Any]:
    content = [
        {
            "type": "text",
            "text": "abcd" * (i + 1),
            **({"cache_control": MARK} if i in marked else {}),
        }
        for i in range(blocks)
    ]
    return {
        "model": "m",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": content}],
        **extra,
    }


def _through(i: int) -> int:
    """Tokens of blocks 0..i (block k is k + 1 tokens of text plus the framing)."""
    return sum(k + 1 + ITEM_OVERHEAD_TOKENS for k in range(i + 1))


def test_no_breakpoint_reads_and_writes_nothing() -> None:
    req = parse_messages(_body(3, ()))
    assert req.cache_reads == [] and req.cache_writes == [] and req.create.cache_prefixes == []
    assert cache_usage(req.cache_writes, 0, 100) == {
        "input_tokens": 100,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def test_writes_at_breakpoints_reads_back_twenty_blocks() -> None:
    req = parse_messages(_body(30, (29,)))
    assert [t for _, t in req.cache_writes] == [_through(29)]
    reads = [t for _, t in req.cache_reads]
    assert reads == [_through(i) for i in range(29 - LOOKBACK_BLOCKS, 30)]
    assert req.input_tokens == _through(29)


def test_the_split_reads_the_cached_prefix_and_writes_up_to_the_last_breakpoint() -> None:
    req = parse_messages(_body(4, (1, 2)))
    assert [t for _, t in req.cache_writes] == [_through(1), _through(2)]
    split = cache_usage(req.cache_writes, _through(1), req.input_tokens)
    assert split == {
        "input_tokens": req.input_tokens - _through(2),
        "cache_creation_input_tokens": _through(2) - _through(1),
        "cache_read_input_tokens": _through(1),
    }


def test_tools_come_first_and_their_breakpoint_is_a_prefix_of_every_other() -> None:
    tools = [{"name": "t", "input_schema": {"type": "object"}, "cache_control": MARK}]
    req = parse_messages(_body(2, (1,), tools=tools))
    (tool_key, tool_tokens), (_, last) = req.cache_writes
    assert 0 < tool_tokens < last == req.input_tokens
    # Different tools make different keys: a changed tool list re-reads nothing.
    other = parse_messages(_body(2, (1,), tools=[dict(tools[0], name="u")]))
    assert {k for k, _ in other.cache_reads}.isdisjoint(k for k, _ in req.cache_reads)
    assert tool_key in {k for k, _ in req.cache_reads}


def test_prompt_cache_keys_never_equal_conversation_prefixes() -> None:
    req = parse_messages(_body(3, (0, 1, 2)))
    assert {k for k, _ in req.cache_reads}.isdisjoint(h for h, _ in req.conv.prefix_hashes)


def test_a_fifth_breakpoint_is_refused() -> None:
    with pytest.raises(RequestError, match="maximum of 4 blocks with cache_control"):
        parse_messages(_body(5, (0, 1, 2, 3, 4)))
