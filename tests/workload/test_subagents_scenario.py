"""rollout.subagents: validation, the plans it draws, and plans without it unchanged."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from harness.workload.plan import conversations
from harness.workload.rollout import generate_rollouts
from harness.workload.scenario import InvalidScenarioError, load_scenario

BASE = """\
name: x
seed: 5
rollout:
  count: 3
  tool_calls: 6
  parallel_calls: 2
"""


def _load(tmp_path: Path, extra: str = ""):  # type: ignore[no-untyped-def]
    path = tmp_path / "s.yaml"
    path.write_text(BASE + extra)
    return load_scenario(str(path))


def test_bad_fields_are_named_with_the_expected_value(tmp_path: Path) -> None:
    extra = (
        "  subagents:\n    join: later\n    turns: [-1]\n    tool_calls: -2\n    ws: lane\n"
        "    result_token: 5\n"
    )
    with pytest.raises(InvalidScenarioError) as info:
        _load(tmp_path, extra)
    problems = {p.key: p.detail for p in info.value.problems}
    assert problems["rollout.subagents.join"] == "expected one of wait, detach, got 'later'"
    assert problems["rollout.subagents.turns[0]"].startswith("expected ")
    assert "-1" in problems["rollout.subagents.turns[0]"]
    assert problems["rollout.subagents.tool_calls"] == "expected a number ≥ 0, got -2"
    assert problems["rollout.subagents.ws"] == (
        "expected one of connection, lanes, got 'lane' (did you mean 'lanes'?)"
    )
    assert problems["rollout.subagents.result_token"].startswith("unknown field")
    assert all(str(tmp_path / "s.yaml") in str(p) for p in info.value.problems)


def test_subagents_answer_calls_of_the_allowed_turns(tmp_path: Path) -> None:
    scenario = _load(tmp_path, "  subagents: {count: 3, turns: [1, 2], result_tokens: 77}\n")
    without = generate_rollouts(_load(tmp_path))
    for plan, plain in zip(generate_rollouts(scenario), without, strict=True):
        ids = [s.subagent_id for t in plan.turns for s in t.subagents]
        assert ids == [1, 2, 3]  # in fork order
        for turn, before in zip(plan.turns, plain.turns, strict=True):
            assert turn.tool_calls == before.tool_calls
            assert turn.output_tokens == before.output_tokens
            if turn.subagents:
                assert turn.index in (1, 2)
            for i in range(turn.tool_calls):
                sub = [s for s in turn.subagents if s.call_index == i]
                if sub:
                    # the call's output is the sub-agent's result; its time is the sub-agent's
                    assert turn.tool_output_tokens[i] == sub[0].result_tokens == 77
                    assert turn.tool_latency_ms[i] == 0
                else:
                    assert turn.tool_output_tokens[i] == before.tool_output_tokens[i]
                    assert turn.tool_latency_ms[i] == before.tool_latency_ms[i]
        convs = conversations(plan)
        assert [c for c, _ in convs] == [0, 1, 2, 3]
        assert all(sub.turns[-1].final for _, sub in convs)


def test_more_subagents_than_calls_fork_only_what_fits(tmp_path: Path) -> None:
    scenario = _load(tmp_path, "  subagents: {count: 9, turns: [0]}\n")
    for plan in generate_rollouts(scenario):
        assert len(plan.turns[0].subagents) == plan.turns[0].tool_calls == 2


# sha256 of repr(generate_rollouts(...))[:16] on the commit before rollout.subagents existed,
# with TurnPlan's later `warmup=False` and RolloutPlan's `ws_chains=None,
# resends_reasoning=None` in the repr (the same hashes without them)
UNCHANGED = {
    "tiny": "a63ec4219408a08b",
    "quickstart": "e6376db8a1f264cc",
    "codex-reasoning": "f4fd2f11f7e27f1b",
    "burst-storm": "a79b256c1e2cce10",
}


@pytest.mark.parametrize("name", sorted(UNCHANGED))
def test_plans_without_subagents_are_unchanged(name: str) -> None:
    plans = generate_rollouts(load_scenario(name))
    assert hashlib.sha256(repr(plans).encode()).hexdigest()[:16] == UNCHANGED[name]


def test_a_trace_brings_its_own_subagents(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("name: x\nrollout:\n  trace: t.jsonl\n  subagents: {count: 2}\n")
    with pytest.raises(InvalidScenarioError) as info:
        load_scenario(str(path))
    (problem,) = info.value.problems
    assert problem.key == "rollout.subagents"
    assert problem.detail.startswith("expected no section next to rollout.trace")
