"""How much the simulated model thinks: effort, adaptive thinking, budget ceilings (pure).

core/reasoning.py's budget follows the request's effort through the engine profile's
per-effort distribution; Messages ``thinking`` (``adaptive``, ``enabled`` with a
``budget_tokens`` ceiling, ``disabled``) and ``output_config.effort`` and Chat's
``reasoning_effort`` reach it through their parsers.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from reference_server.core import reasoning
from reference_server.core.chat import parse_chat
from reference_server.core.lengths import EFFORTS
from reference_server.core.messages import RequestError, parse_messages
from reference_server.core.profiles import EffortTokens, load_profiles
from reference_server.core.validation import reasoning_options

TABLE = EffortTokens()


def budget(effort: str | None, seed: int, **kw: Any) -> int:
    return reasoning.reasoning_budget(
        kw.pop("metadata", {}), effort, 0, efforts=TABLE, rng=random.Random(seed), **kw
    )


def test_the_budget_is_monotone_in_effort_for_every_seed() -> None:
    for seed in range(500):
        draws = [budget(e, seed) for e in EFFORTS]
        assert draws == sorted(draws), (seed, draws)
    # and it is a distribution, not a constant: the same effort varies across requests
    assert len({budget("medium", s) for s in range(200)}) > 50


def test_medians_follow_the_profile_and_the_draw_is_bounded() -> None:
    for effort in ("low", "medium", "high"):
        draws = sorted(budget(effort, s) for s in range(2001))
        median = TABLE.median(effort)
        assert median is not None
        assert 0.8 * median <= draws[1000] <= 1.25 * median, (effort, draws[1000])
        assert median // 8 <= draws[0] and draws[-1] <= median * 8


def test_the_hint_is_exact_and_no_effort_keeps_the_profile_default() -> None:
    assert budget("high", 1, metadata={"loopbench.reasoning_tokens": "80"}) == 80
    # a hint above a ceiling still wins: loopbench's own runs plan exactly
    assert budget("high", 1, metadata={"loopbench.reasoning_tokens": "5000"}, ceiling=1024) == 5000
    assert reasoning.reasoning_budget({}, None, 300, efforts=TABLE, rng=random.Random(1)) == 300
    assert budget("none", 1) == 0


def test_budget_tokens_is_a_ceiling_not_a_plan() -> None:
    draws = [budget("medium", s, ceiling=2000) for s in range(300)]
    assert max(draws) <= 2000
    assert sum(d < 2000 for d in draws) > 200  # most answers think less than they may


def _messages(**extra: Any) -> dict[str, Any]:
    return {
        "model": "claude",
        "max_tokens": 32000,
        "messages": [{"role": "user", "content": "hi"}],
        **extra,
    }


@pytest.mark.parametrize(
    ("extra", "effort", "ceiling"),
    [
        ({}, "none", None),
        ({"thinking": {"type": "disabled"}}, "none", None),
        ({"thinking": {"type": "adaptive"}}, "high", None),
        ({"thinking": {"type": "adaptive"}, "output_config": {"effort": "low"}}, "low", None),
        ({"thinking": {"type": "enabled", "budget_tokens": 4000}}, "high", 4000),
        (
            {
                "thinking": {"type": "enabled", "budget_tokens": 4000},
                "output_config": {"effort": "medium"},
            },
            "medium",
            4000,
        ),
        ({"output_config": {"effort": "max"}}, "none", None),
    ],
)
def test_messages_thinking_sets_effort_and_ceiling(
    extra: dict[str, Any], effort: str, ceiling: int | None
) -> None:
    req = parse_messages(_messages(**extra)).create
    assert reasoning_options(req.raw).effort == effort
    assert req.reasoning_ceiling == ceiling
    assert "loopbench.reasoning_tokens" not in req.metadata


def test_omitted_thinking_has_no_summary() -> None:
    shown = parse_messages(_messages(thinking={"type": "adaptive"})).create
    omitted = parse_messages(_messages(thinking={"type": "adaptive", "display": "omitted"})).create
    assert reasoning_options(shown.raw).summary and not reasoning_options(omitted.raw).summary
    assert reasoning_options(omitted.raw).effort == "high"


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"thinking": {"type": "sometimes"}}, "thinking.type"),
        ({"output_config": {"effort": "extreme"}}, "output_config.effort"),
        ({"output_config": "high"}, "output_config"),
    ],
)
def test_messages_thinking_errors_name_the_field(extra: dict[str, Any], field: str) -> None:
    with pytest.raises(RequestError) as info:
        parse_messages(_messages(**extra))
    assert info.value.message.startswith(field + ":")


def test_chat_reasoning_effort_reaches_the_budget() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    assert reasoning_options(
        parse_chat({**body, "reasoning_effort": "high"}).create.raw
    ).effort == ("high")
    assert reasoning_options(parse_chat(body).create.raw).effort is None


def test_shipped_profiles_carry_the_effort_table() -> None:
    for engine in ("cerebras-spark", "gpu-legacy"):
        table = load_profiles(engine=engine)[1].reasoning_effort_tokens
        medians = [table.median(e) for e in EFFORTS]
        assert medians == sorted(medians) and table.median("medium")
