"""The seeded rollout generator: scenario → concrete turns.

Every transport replays the *same* list of :class:`RolloutPlan` so that
comparisons are paired.  Each rollout draws from its own generator, seeded from
``(scenario.seed, rollout index)``: rollout *i* is identical whatever
``rollout.count`` is, and changing the load section (schedule) never changes
the rollouts' shapes, because the schedule has a separate stream too.
"""

from __future__ import annotations

import hashlib
import random

from harness.core.distributions import Distribution
from harness.core.plan import RolloutPlan, TurnPlan
from harness.core.scenario import RolloutConfig, Scenario
from harness.core.schedule import Start, schedule_starts
from harness.errors import ScenarioError

__all__ = ["derive_seed", "generate_rollouts", "history_tokens", "new_tokens"]


def derive_seed(seed: int, label: str) -> int:
    """A 63-bit seed for one named stream of a run (stable across Python versions)."""
    digest = hashlib.blake2b(f"loopbench:{seed}:{label}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def _count(dist: Distribution, rng: random.Random, floor: int) -> int:
    return max(floor, round(dist.sample(rng)))


def _ms(dist: Distribution, rng: random.Random) -> float:
    # Microsecond resolution is far below any tool latency worth simulating.
    return round(max(0.0, dist.sample(rng)), 3)


def _make_rollout(
    cfg: RolloutConfig, rollout_id: int, seed: int, start: Start, tags: dict[str, str]
) -> RolloutPlan:
    rng = random.Random(seed)
    # Draw order is part of the reproducibility contract: keep it fixed.
    system = _count(cfg.system_tokens, rng, 0)
    tool_schema = _count(cfg.tool_schema_tokens, rng, 0)
    user = _count(cfg.user_prompt_tokens, rng, 1)
    remaining = _count(cfg.tool_calls, rng, 0)
    turns: list[TurnPlan] = []
    step = 0
    while remaining > 0:
        calls = min(remaining, _count(cfg.parallel_calls, rng, 1))
        think = _ms(cfg.think_ms, rng)
        output = _count(cfg.step_output_tokens, rng, 1)
        growth = cfg.tool_output_growth**step
        latencies = tuple(_ms(cfg.tool_latency_ms, rng) for _ in range(calls))
        outputs = tuple(
            max(1, round(cfg.tool_output_tokens.sample(rng) * growth)) for _ in range(calls)
        )
        turns.append(TurnPlan(step, output, calls, latencies, outputs, think))
        remaining -= calls
        step += 1
    think = _ms(cfg.think_ms, rng)
    final = _count(cfg.final_answer_tokens, rng, 1)
    turns.append(TurnPlan(step, final, 0, (), (), think))
    return RolloutPlan(
        rollout_id=rollout_id,
        seed=seed,
        system_tokens=system,
        tool_schema_tokens=tool_schema,
        user_prompt_tokens=user,
        turns=tuple(turns),
        start_offset_ns=start.offset_ns,
        tags=tags,
    )


def generate_rollouts(scenario: Scenario) -> list[RolloutPlan]:
    """The scenario's rollouts, in intended start order, identical on every call.

    Closed loop: ``rollout.count`` rollouts with ``start_offset_ns = 0``.  Open
    loop: one rollout per scheduled start (see :mod:`harness.core.schedule`).
    Tags: ``phase`` (``warmup``/``measure``: the first ``load.warmup_rollouts``
    are excluded from statistics), ``round`` (the interleaving round, ``0`` when
    sequential) and ``arrival`` (``closed``/``base``/``burst``).
    """
    cfg = scenario.rollout
    if cfg.trace is not None:
        raise ScenarioError(
            scenario.source, "rollout.trace", "trace replay is not supported by this version"
        )
    load = scenario.load
    schedule_rng = random.Random(derive_seed(scenario.seed, "schedule"))
    starts = schedule_starts(load, cfg.count, schedule_rng)
    n = len(starts)
    rounds = load.rounds if load.order == "interleaved" else 1
    plans: list[RolloutPlan] = []
    for i, start in enumerate(starts):
        tags = {
            "phase": "warmup" if i < load.warmup_rollouts else "measure",
            "round": str(i * rounds // n),
            "arrival": start.source,
        }
        seed = derive_seed(scenario.seed, f"rollout:{i}")
        plans.append(_make_rollout(cfg, i, seed, start, tags))
    return plans


def _check_index(plan: RolloutPlan, turn_index: int) -> None:
    if not 0 <= turn_index < len(plan.turns):
        raise IndexError(
            f"turn {turn_index} out of range for rollout {plan.rollout_id} "
            f"({len(plan.turns)} turns)"
        )


def new_tokens(plan: RolloutPlan, turn_index: int) -> int:
    """Input tokens turn ``turn_index`` adds: the user prompt, then the previous turn's tool outputs."""
    _check_index(plan, turn_index)
    if turn_index == 0:
        return plan.user_prompt_tokens
    return sum(plan.turns[turn_index - 1].tool_output_tokens)


def history_tokens(plan: RolloutPlan, turn_index: int) -> int:
    """Input tokens of the whole conversation at turn ``turn_index`` (what stateless HTTP re-sends).

    System prompt + tool schemas + user prompt + every earlier turn's output and
    tool outputs (so it includes :func:`new_tokens` of this turn).
    """
    _check_index(plan, turn_index)
    total = plan.system_tokens + plan.tool_schema_tokens + plan.user_prompt_tokens
    for turn in plan.turns[:turn_index]:
        total += turn.output_tokens + sum(turn.tool_output_tokens)
    return total
