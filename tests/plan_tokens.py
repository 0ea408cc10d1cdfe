"""Token counts of a rollout plan from the plan alone: the tests' oracle for what a transcript
sends (they lived in harness/workload/rollout.py, where nothing else used them)."""

from __future__ import annotations

from harness.wire.plural import counted
from harness.workload.plan import RolloutPlan


def _check_index(plan: RolloutPlan, turn_index: int) -> None:
    if not 0 <= turn_index < len(plan.turns):
        raise IndexError(
            f"turn {turn_index} out of range for rollout {plan.rollout_id} "
            f"({counted(len(plan.turns), 'turn')})"
        )


def new_tokens(plan: RolloutPlan, turn_index: int) -> int:
    """Input tokens turn ``turn_index`` adds: the user prompt, then the previous turn's tool outputs."""
    _check_index(plan, turn_index)
    if turn_index == 0:
        return plan.user_prompt_tokens
    return sum(plan.turns[turn_index - 1].tool_output_tokens)


def history_tokens(plan: RolloutPlan, turn_index: int) -> int:
    """Input tokens of the whole conversation at turn ``turn_index`` (what stateless HTTP re-sends).

    System prompt + tool schemas + user prompt + every earlier turn's output (its reasoning
    too: stateless HTTP re-sends the reasoning items) and tool outputs (so it includes
    :func:`new_tokens` of this turn).
    """
    _check_index(plan, turn_index)
    total = plan.system_tokens + plan.tool_schema_tokens + plan.user_prompt_tokens
    for turn in plan.turns[:turn_index]:
        total += turn.output_tokens + turn.reasoning_tokens + sum(turn.tool_output_tokens)
    return total
