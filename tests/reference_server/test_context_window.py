"""The context-window rules, pure: what fits, what truncation: auto drops, what is refused."""

from __future__ import annotations

from typing import Any

import pytest

from reference_server.core.context_window import Limits, fit, requested_output, truncation_mode
from reference_server.core.conversation import Conversation
from reference_server.core.profiles import ProfileError, load_profiles
from reference_server.core.validation import RequestError, parse_create


def msg(tokens: int) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": "abcd" * (tokens - 4)}


def call(call_id: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}"}


def output(call_id: str, tokens: int) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": "abcd" * (tokens - 4)}


def test_fits_unchanged() -> None:
    conv = Conversation.build("abcd" * 6, [msg(100)])
    fitted = fit(
        conv, "abcd" * 6, extra_tokens=50, output_tokens=40, window=200, truncation="disabled"
    )
    assert fitted.conv is conv and not fitted.truncated


def test_disabled_refuses_with_the_numbers() -> None:
    conv = Conversation.build(None, [msg(100), msg(100)])
    with pytest.raises(RequestError) as err:
        fit(conv, None, extra_tokens=10, output_tokens=50, window=200, truncation="disabled")
    assert err.value.status == 400 and err.value.code == "context_length_exceeded"
    assert err.value.param == "input"
    assert "210 input tokens + 50 requested output tokens" in err.value.message


def test_auto_keeps_instructions_and_drops_a_call_with_its_outputs() -> None:
    items = [call("a"), call("b"), output("a", 100), output("b", 20), msg(30), msg(40)]
    conv = Conversation.build("abcd" * 16, items)  # 20 tokens of instructions
    fitted = fit(conv, "abcd" * 16, extra_tokens=0, output_tokens=10, window=130, truncation="auto")
    # Dropping call a takes output a (after call b) with it; call b and its output stay.
    assert fitted.dropped_items == 2 and fitted.dropped_tokens == 5 + 100
    kept = fitted.conv.chain_items
    assert [it.get("call_id") for it in kept[:2]] == ["b", "b"]
    assert fitted.conv.items[0]["role"] == "developer"  # the instructions
    assert fitted.conv.tokens == 20 + 5 + 20 + 30 + 40


def test_auto_never_drops_the_newest_item() -> None:
    conv = Conversation.build(None, [msg(10), msg(300)])
    with pytest.raises(RequestError):
        fit(conv, None, extra_tokens=0, output_tokens=0, window=200, truncation="auto")


def test_requested_output_and_truncation_mode() -> None:
    limits = Limits(400_000, 1000)
    req = parse_create({"model": "m", "input": "x", "metadata": {"loopbench.output_tokens": "70"}})
    assert requested_output(req, 200, limits) == 70
    assert requested_output(parse_create({"model": "m", "input": "x"}), 200, limits) == 200
    capped = parse_create(
        {"model": "m", "input": "x", "metadata": {"loopbench.output_tokens": "5000"}}
    )
    assert requested_output(capped, 200, limits) == 1000
    explicit = parse_create({"model": "m", "input": "x", "max_output_tokens": 30})
    assert requested_output(explicit, 200, limits) == 30
    assert truncation_mode(req) == "disabled"
    with pytest.raises(RequestError):
        truncation_mode(parse_create({"model": "m", "input": "x", "truncation": "yes"}))


def test_profile_limits_default_and_override() -> None:
    _, engine = load_profiles()
    assert (engine.context_window_tokens, engine.max_output_tokens) == (400_000, 128_000)
    _, small = load_profiles(
        overrides={"engine.context_window_tokens": "1000", "engine.max_output_tokens": "100"}
    )
    assert (small.context_window_tokens, small.max_output_tokens) == (1000, 100)
    with pytest.raises(ProfileError, match=r"engine\.max_output_tokens"):
        load_profiles(overrides={"engine.max_output_tokens": "500000"})
