"""The output policy without loopbench's hints (core/output.py, pure).

Lengths are drawn from the engine profile and only cut by the request's limit; the
finish reason says "cut" only when the limit cut; thinking is followed by an answer;
tools are picked by the profile's weights, the same seed the same tool.  With hints
the plan is exact, as loopbench's own runs need.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from reference_server.core.output import Lengths, OutputPlan, plan_output
from reference_server.core.profiles import DEFAULT_TOOL_WEIGHTS, load_profiles
from reference_server.core.reasoning import reasoning_budget
from reference_server.core.tool_weights import callable_tools, pick_tool

ENGINE = load_profiles()[1]
LENGTHS = Lengths(ENGINE.text_tokens, ENGINE.tool_call_tokens, weights=ENGINE.tool_weights)


def _fn(name: str, **props: Any) -> dict[str, Any]:
    return {
        "type": "function",
        "name": name,
        "parameters": {"type": "object", "properties": props, "required": list(props)},
    }


# Claude Code's tool list, by name (the schemas' shapes do not matter here).
CLAUDE_CODE = [
    _fn("Agent", prompt={"type": "string"}),
    _fn("Bash", command={"type": "string"}),
    _fn("Edit", file_path={"type": "string"}, new_string={"type": "string"}),
    _fn("Read", file_path={"type": "string"}),
    _fn("Write", file_path={"type": "string"}, content={"type": "string"}),
    _fn("Glob", pattern={"type": "string"}),
    _fn("Grep", pattern={"type": "string"}),
    _fn("TodoWrite", todos={"type": "array"}),
    _fn("AskUserQuestion", question={"type": "string"}),
    _fn("ExitPlanMode", plan={"type": "string"}),
    _fn("Skill", skill={"type": "string"}),
    {**_fn("CronCreate", cron={"type": "string"}), "defer_loading": True},
    {"type": "web_search_20250305", "name": "web_search"},
    {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
]


def plan(
    seed: int,
    *,
    cap: int | None = None,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: Any = "none",
    metadata: dict[str, str] | None = None,
    reasoning: int = 0,
    lengths: Lengths = LENGTHS,
) -> OutputPlan:
    return plan_output(
        tools=tools or [],
        tool_choice=tool_choice,
        parallel_tool_calls=True,
        metadata=metadata or {},
        max_output_tokens=cap,
        chain_function_calls=0,
        default_output_tokens=None,
        default_auto_tool_calls=3,
        rng=random.Random(seed),
        reasoning_tokens=reasoning,
        lengths=lengths,
    )


def test_text_length_is_drawn_and_a_large_cap_never_sets_it() -> None:
    drawn = [plan(s, cap=128_000) for s in range(500)]
    assert not any(p.truncated for p in drawn)
    lengths = sorted(p.text_tokens for p in drawn)
    assert 150 <= lengths[250] <= 400  # the profile's median, 250
    assert lengths[-1] <= ENGINE.text_tokens.max and len(set(lengths)) > 100


def test_the_cap_cuts_and_only_a_cut_is_truncated() -> None:
    for seed in range(300):
        free = plan(seed).text_tokens
        for cap in (free - 1, free, free + 1, 40):
            if cap < 1:
                continue
            capped = plan(seed, cap=cap)
            assert capped.text_tokens == min(free, cap)
            assert capped.truncated == (free > cap), (seed, free, cap)


def test_tool_call_arguments_follow_the_call_distribution_not_the_cap() -> None:
    write = [_fn("Write", file_path={"type": "string"}, content={"type": "string"})]
    plans = [plan(s, cap=32_000, tools=write, tool_choice="required") for s in range(300)]
    sizes = sorted(p.calls[0].tokens for p in plans)
    assert not any(p.truncated for p in plans)
    assert 30 <= sizes[150] <= 120 and sizes[-1] < 2100  # median 60, max 2,000 (+ the path)
    tight = [plan(s, cap=20, tools=write, tool_choice="required") for s in range(300)]
    for free, cut in zip(plans, tight, strict=True):
        assert cut.truncated == (free.calls[0].tokens > 20)


def test_hints_stay_exact() -> None:
    synthetic = [_fn("run_tool", command={"type": "string"})]
    meta = {"loopbench.output_tokens": "300"}
    for seed in range(50):
        assert plan(seed, metadata=meta).text_tokens == 300
        assert plan(seed, metadata=meta, cap=128_000).text_tokens == 300
        cut = plan(seed, metadata=meta, cap=120)
        assert (cut.text_tokens, cut.truncated) == (120, True)
        calls = plan(
            seed,
            metadata={**meta, "loopbench.parallel_calls": "3"},
            tools=synthetic,
            tool_choice="required",
        ).calls
        assert [c.tokens for c in calls] == [100, 100, 100]


def test_a_fixed_default_replaces_the_draw() -> None:
    fixed = plan_output(
        tools=[],
        tool_choice="none",
        parallel_tool_calls=True,
        metadata={},
        max_output_tokens=4096,
        chain_function_calls=0,
        default_output_tokens=200,
        default_auto_tool_calls=3,
        rng=random.Random(1),
        lengths=LENGTHS,
    )
    assert (fixed.text_tokens, fixed.truncated) == (200, False)


def test_thinking_is_always_followed_by_an_answer() -> None:
    """Adaptive thinking at every effort, Claude Code's cap and tools: never only thinking."""
    table = ENGINE.reasoning_effort_tokens
    for effort in ("low", "medium", "high", "max"):
        for seed in range(200):
            budget = reasoning_budget({}, effort, 0, efforts=table, rng=random.Random(seed))
            assert budget > 0
            for choice in ("auto", "none"):
                p = plan(seed, cap=32_000, tools=CLAUDE_CODE, tool_choice=choice, reasoning=budget)
                assert p.reasoning_tokens == budget and not p.truncated
                assert p.calls or p.text_tokens > 0
    # a budget_tokens ceiling below max_tokens leaves room for the answer
    ceiling = reasoning_budget({}, "max", 0, efforts=table, rng=random.Random(3), ceiling=1024)
    p = plan(3, cap=1025, reasoning=ceiling)
    assert ceiling == 1024 and p.text_tokens >= 1
    # only the cap cuts thinking short of an answer
    cut = plan(3, cap=500, reasoning=600)
    assert cut.truncated and not cut.calls and cut.text_tokens == 0


def test_tools_are_picked_by_weight_and_seed() -> None:
    counts: Counter[str] = Counter()
    for seed in range(3000):
        p = plan(seed, tools=CLAUDE_CODE, tool_choice="auto")
        counts[p.calls[0].name] += 1
        again = plan(seed, tools=CLAUDE_CODE, tool_choice="auto")
        assert again.calls == p.calls  # the same seed, the same call
    acting = sum(counts[n] for n in ("Bash", "Read", "Edit", "Write", "Glob", "Grep"))
    assert acting / 3000 > 0.85, counts
    assert counts["AskUserQuestion"] + counts["ExitPlanMode"] < 30, counts
    # tools the server does not model, and deferred ones, are never called
    assert not {"web_search", "apply_patch", "CronCreate"} & set(counts)
    assert counts["Bash"] > counts["Read"] > counts["TodoWrite"]


def test_the_profile_table_decides() -> None:
    only_read = Lengths(ENGINE.text_tokens, ENGINE.tool_call_tokens, weights={"read": 1, "*": 0})
    names = {
        plan(s, tools=CLAUDE_CODE, tool_choice="required", lengths=only_read).calls[0].name
        for s in range(200)
    }
    assert names == {"Read"}
    # a call owed when every tool weighs 0 still happens, uniformly
    nothing = {"*": 0.0}
    tools = callable_tools(CLAUDE_CODE)
    picked = {pick_tool(tools, nothing, random.Random(s))["name"] for s in range(300)}
    assert picked == {t["name"] for t in tools}


def test_shipped_profiles_carry_the_default_tables() -> None:
    for engine in ("cerebras-spark", "gpu-legacy"):
        profile = load_profiles(engine=engine)[1]
        assert profile.tool_weights == DEFAULT_TOOL_WEIGHTS
        assert list(profile.tool_weights)[-1] == "*"
