"""Hinted function calls are exactly as long as the hint (core/output.py, core/arguments.py; pure).

loopbench's own runs send ``loopbench.output_tokens`` (and ``loopbench.parallel_calls``) and
count on the response being exactly that long (docs/protocol.md §5): a replayed trace
compares each turn's output tokens with the recorded ones.  Checked over many seeds, hints
and call counts for loopbench's synthetic tool and for the openai-agents SDK's tools as
captured (tests/data/agents/).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from harness.wire.tokens import count_tokens
from harness.workload.agent import synthetic_tool
from reference_server.core.arguments import make_arguments
from reference_server.core.output import OutputPlan
from tests.agent_requests import bodies
from tests.reference_server.plans import hinted_plan

SEEDS = 200


def _agents_sdk_tool(name: str) -> dict[str, Any]:
    """One function tool the openai-agents SDK sent, as captured."""
    for body in bodies("openai-agents-http"):
        for tool in body.get("tools") or []:
            if tool.get("name") == name:
                return dict(tool)
    raise AssertionError(f"tests/data/agents/openai-agents-http.json: no tool named {name!r}")


# (tool, the fewest tokens a call of it can be: its shortest valid arguments)
EXACT_TOOLS = {
    # {"command":"ls"}: 16 characters
    "synthetic": (synthetic_tool(200, random.Random(0)), 4),
    # {"command":"ls","timeout_s":120}: 32 characters at most (timeout_s is 5-120 seconds)
    "agents-sdk:run_command": (_agents_sdk_tool("run_command"), 8),
}


def _hinted_calls(tool: dict[str, Any], hint: int, n_calls: int, seed: int) -> OutputPlan:
    return hinted_plan(
        hint,
        seed,
        tools=[tool],
        tool_choice="required",
        metadata={
            "loopbench.output_tokens": str(hint),
            "loopbench.parallel_calls": str(n_calls),
        },
    )


@pytest.mark.parametrize("key", list(EXACT_TOOLS))
def test_hinted_calls_total_exactly_the_hint(key: str) -> None:
    """The hint over n calls is the hint, not n times its floor share (167 over two calls
    was 166: the replay of a recorded openai-agents turn came out a token short)."""
    tool, shortest = EXACT_TOOLS[key]
    for seed in range(SEEDS):
        rng = random.Random(seed)
        n_calls = rng.randint(1, 4)
        # every fifth hint at the floor, where a short call has no token to spare
        low = shortest * n_calls
        hint = low + seed % n_calls if seed % 5 == 0 else rng.randint(low, 3000)
        plan = _hinted_calls(tool, hint, n_calls, seed)
        tokens = [c.tokens for c in plan.calls]
        assert len(tokens) == n_calls and not plan.truncated
        assert sum(tokens) == plan.output_tokens == hint, (key, seed, hint, n_calls, tokens)
        # what the plan counts is what the arguments weigh (what usage and the deltas carry)
        assert tokens == [count_tokens(c.arguments) for c in plan.calls]
        assert max(tokens) - min(tokens) <= 1  # still split evenly


@pytest.mark.parametrize("key", list(EXACT_TOOLS))
def test_hinted_arguments_are_exactly_the_hinted_tokens(key: str) -> None:
    tool, shortest = EXACT_TOOLS[key]
    for seed in range(SEEDS):
        n_tokens = random.Random(seed).randint(shortest, 600)
        text = make_arguments(tool, n_tokens, random.Random(seed))
        assert count_tokens(text) == n_tokens, (key, seed, n_tokens, text)


def test_a_hint_below_what_the_schema_allows_is_counted_as_sent() -> None:
    """Exactness has a floor: a call is at least its shortest valid arguments, and a schema
    with no free string (the SDK's read_file: a path and a line count) cannot grow.  The plan
    then counts what it sends, so usage and the streamed deltas agree with each other."""
    for tool, hint in (
        (EXACT_TOOLS["synthetic"][0], 5),  # two calls of at least 4 tokens each
        (_agents_sdk_tool("read_file"), 200),
    ):
        for seed in range(SEEDS):
            plan = _hinted_calls(tool, hint, 2, seed)
            assert plan.output_tokens == sum(count_tokens(c.arguments) for c in plan.calls)
            assert plan.output_tokens != hint
