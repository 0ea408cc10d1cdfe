"""The seeded rollout generator: scenario → concrete turns.

Every transport replays the *same* list of :class:`RolloutPlan` so that
comparisons are paired.  Each rollout draws from its own generator, seeded from
``(scenario.seed, rollout index)``: rollout *i* is identical whatever
``rollout.count`` is, and changing the load section (schedule) never changes
the rollouts' shapes, because the schedule has a separate stream too.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass

from harness.wire.errors import ScenarioError
from harness.workload.agent import ITEM_OVERHEAD_TOKENS, requested_output_tokens
from harness.workload.distributions import Distribution
from harness.workload.plan import RolloutPlan, SubagentPlan, TurnPlan, conversations, derive_seed
from harness.workload.scenario import ConversationShape, RolloutConfig, Scenario, SubagentsConfig
from harness.workload.schedule import Start, schedule_starts
from harness.workload.trace import (
    TraceRollout,
    read_trace,
    recording_gaps,
    resolve_trace_path,
    trace_plan,
)

# Rollouts averaged to estimate the mean output per rollout in throughput mode:
# the first N of the run itself, so the estimate is exact for short runs and
# within ~1-3% (typical token CVs) for long ones.
THROUGHPUT_SAMPLE = 500


def _count(dist: Distribution, rng: random.Random, floor: int) -> int:
    return max(floor, round(dist.sample(rng)))


def _ms(dist: Distribution, rng: random.Random) -> float:
    # Microsecond resolution is far below any tool latency worth simulating.
    return round(max(0.0, dist.sample(rng)), 3)


def _draw_turns(cfg: ConversationShape, rng: random.Random, remaining: int) -> list[TurnPlan]:
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
    return turns


def _draw_prompt(cfg: ConversationShape, rng: random.Random) -> tuple[int, int, int]:
    """System, tool-schema and user-prompt tokens of a conversation's first request.

    Drawn first, in this order: the draw order is part of the reproducibility contract.
    """
    system = _count(cfg.system_tokens, rng, 0)
    tool_schema = _count(cfg.tool_schema_tokens, rng, 0)
    return system, tool_schema, _count(cfg.user_prompt_tokens, rng, 1)


def _make_rollout(
    cfg: RolloutConfig, rollout_id: int, seed: int, start: Start, tags: dict[str, str]
) -> RolloutPlan:
    rng = random.Random(seed)
    prompt = _draw_prompt(cfg, rng)
    remaining = _count(cfg.tool_calls, rng, 0)
    turns = _draw_turns(cfg, rng, remaining)
    if cfg.reasoning_tokens is not None:
        # Its own stream: adding reasoning to a scenario leaves every other draw as it was, so
        # the rollouts with and without reasoning are the same rollouts.
        reasoning_rng = random.Random(derive_seed(seed, "reasoning"))
        turns = [
            dataclasses.replace(t, reasoning_tokens=_count(cfg.reasoning_tokens, reasoning_rng, 0))
            for t in turns
        ]
    if cfg.subagents is not None:
        # Its own stream too: the parent's turns are those of the same scenario without
        # sub-agents, except the calls the sub-agents answer.
        turns = _fork_subagents(cfg.subagents, turns, seed)
    return RolloutPlan(
        rollout_id, seed, *prompt, tuple(turns), start_offset_ns=start.offset_ns, tags=tags
    )


def _fork_subagents(cfg: SubagentsConfig, turns: list[TurnPlan], seed: int) -> list[TurnPlan]:
    """Give ``cfg.count`` sub-agents to tool calls of the forking turns (ids in fork order).

    A sub-agent answers one call: that call's output is the sub-agent's result and its own
    latency is zero (the sub-agent's time replaces it).  More sub-agents than the allowed
    turns have calls are not forked.
    """
    rng = random.Random(derive_seed(seed, "subagents"))
    allowed = set(cfg.turns) if cfg.turns is not None else None
    slots = [
        (t.index, call)
        for t in turns
        if not t.final and (allowed is None or t.index in allowed)
        for call in range(t.tool_calls)
    ]
    wanted = min(len(slots), _count(cfg.count, rng, 0))
    chosen = sorted(rng.sample(slots, wanted))
    by_turn: dict[int, list[SubagentPlan]] = {}
    for sub_id, (turn_index, call) in enumerate(chosen, start=1):
        sub_seed = derive_seed(seed, f"subagent:{sub_id}")
        sub_rng = random.Random(sub_seed)
        prompt = _draw_prompt(cfg, sub_rng)
        result = _count(cfg.result_tokens, sub_rng, 1)
        sub_turns = _draw_turns(cfg, sub_rng, _count(cfg.tool_calls, sub_rng, 0))
        # Its final answer is the parent's tool output (sent as such): one size for both.
        sub_turns[-1] = dataclasses.replace(sub_turns[-1], output_tokens=max(1, result))
        by_turn.setdefault(turn_index, []).append(
            SubagentPlan(
                sub_id,
                sub_seed,
                *prompt,
                tuple(sub_turns),
                call_index=call,
                result_tokens=result,
                join=cfg.join,
            )
        )
    out: list[TurnPlan] = []
    for t in turns:
        subs = by_turn.get(t.index)
        if not subs:
            out.append(t)
            continue
        latencies = list(t.tool_latency_ms)
        outputs = list(t.tool_output_tokens)
        for sub in subs:
            latencies[sub.call_index] = 0.0
            outputs[sub.call_index] = sub.result_tokens
        out.append(
            dataclasses.replace(
                t,
                tool_latency_ms=tuple(latencies),
                tool_output_tokens=tuple(outputs),
                subagents=tuple(subs),
            )
        )
    return out


def load_scenario_trace(scenario: Scenario) -> list[TraceRollout] | None:
    """Read the trace a scenario replays (``None`` when it draws from distributions)."""
    if scenario.rollout.trace is None:
        return None
    return read_trace(resolve_trace_path(scenario.rollout.trace, scenario.source))


def scenario_trace_gaps(scenario: Scenario) -> list[str]:
    """What the recording of the trace a scenario replays missed (empty: nothing, or no trace)."""
    if scenario.rollout.trace is None:
        return []
    return recording_gaps(resolve_trace_path(scenario.rollout.trace, scenario.source))


def _plan_at(
    scenario: Scenario,
    trace: Sequence[TraceRollout] | None,
    i: int,
    start: Start,
    tags: dict[str, str],
) -> RolloutPlan:
    seed = derive_seed(scenario.seed, f"rollout:{i}")
    if trace:
        # Rollout i replays recorded task i (cycling): paired across transports like a draw.
        return trace_plan(trace[i % len(trace)], i, seed, start.offset_ns, tags)
    return _make_rollout(scenario.rollout, i, seed, start, tags)


def _rollout_count(scenario: Scenario, trace: Sequence[TraceRollout] | None) -> int:
    cfg = scenario.rollout
    # Replaying a trace once is what "rollout.trace: FILE" means unless a count is written.
    if trace and "count" not in cfg.model_fields_set:
        return len(trace)
    return cfg.count


@dataclass(frozen=True, slots=True)
class ThroughputDerivation:
    """How a throughput target became an arrival rate (reported in the summary)."""

    target_tps: float
    mean_output_tokens: float
    arrival_rate: float  # rollouts/s at the sustained target
    burst_rates: tuple[float, ...]  # rollouts/s during each TPS burst, in load order


def throughput_derivation(
    scenario: Scenario, trace: Sequence[TraceRollout] | None = None
) -> ThroughputDerivation | None:
    """Mean output tokens per rollout and the derived rates (``None`` unless throughput mode)."""
    target = scenario.load.throughput
    if scenario.load.mode != "throughput" or target is None:
        return None
    if trace is None:
        trace = load_scenario_trace(scenario)
    if trace:
        mean = sum(r.output_tokens for r in trace) / len(trace)
    else:
        zero = Start(0, "closed")
        total = 0
        for i in range(THROUGHPUT_SAMPLE):
            plan = _plan_at(scenario, None, i, zero, {})
            # reasoning is output the engine decodes too
            total += sum(t.output_tokens + t.reasoning_tokens for t in plan.turns)
        mean = total / THROUGHPUT_SAMPLE
    return ThroughputDerivation(
        target_tps=target.tps,
        mean_output_tokens=mean,
        arrival_rate=target.tps / mean,
        burst_rates=tuple(b.tps / mean for b in target.bursts),
    )


def generate_rollouts(
    scenario: Scenario, trace: Sequence[TraceRollout] | None = None
) -> list[RolloutPlan]:
    """The scenario's rollouts, in intended start order, identical on every call.

    Closed loop: ``rollout.count`` rollouts with ``start_offset_ns = 0``.  Open
    loop: one rollout per scheduled start (see :mod:`harness.workload.schedule`);
    throughput mode derives the rate with :func:`throughput_derivation`.
    With ``rollout.trace`` the rollouts replay the recorded ones (read from the
    file unless ``trace`` is given), cycling through them; ``rollout.count``
    defaults to the number of recorded rollouts.
    Tags: ``phase`` (``warmup``/``measure``: the first ``load.warmup_rollouts``
    are excluded from statistics), ``round`` (the interleaving round, ``0`` when
    sequential) and ``arrival`` (``closed``/``base``/``burst``).
    """
    if trace is None:
        trace = load_scenario_trace(scenario)
    load = scenario.load
    derived = throughput_derivation(scenario, trace)
    schedule_rng = random.Random(derive_seed(scenario.seed, "schedule"))
    try:
        starts = schedule_starts(
            load,
            _rollout_count(scenario, trace),
            schedule_rng,
            derived.mean_output_tokens if derived else None,
        )
    except ValueError as exc:
        raise ScenarioError(scenario.source, "load", str(exc)) from None
    n = len(starts)
    rounds = load.rounds if load.order == "interleaved" else 1
    plans: list[RolloutPlan] = []
    for i, start in enumerate(starts):
        tags = {
            "phase": "warmup" if i < load.warmup_rollouts else "measure",
            "round": str(i * rounds // n),
            "arrival": start.source,
        }
        plans.append(_plan_at(scenario, trace, i, start, tags))
    check_context_window(scenario, plans)
    return plans


def context_tokens(plan: RolloutPlan) -> list[tuple[int, int]]:
    """Per turn, what it asks of the context window: (history, requested output).

    The history counts the framing tokens of every item (instructions, user prompt,
    each function call and its output) and the requested output is the turn's
    ``max_output_tokens``.  An estimate from the plan, as the endpoint counts it: the
    tool definitions' JSON and the calls' arguments move the server's count by a few
    tokens per item.
    """
    history = plan.system_tokens + plan.tool_schema_tokens + plan.user_prompt_tokens
    history += 2 * ITEM_OVERHEAD_TOKENS  # the instructions and the user prompt
    out: list[tuple[int, int]] = []
    for turn in plan.turns:
        out.append((history, requested_output_tokens(turn)))
        history += turn.output_tokens + sum(turn.tool_output_tokens)
        history += 2 * ITEM_OVERHEAD_TOKENS * turn.tool_calls
    return out


def check_context_window(scenario: Scenario, plans: Sequence[RolloutPlan]) -> None:
    """Refuse rollouts that would outgrow ``context_window_tokens`` (unless they compact).

    The endpoint would answer the turn with ``context_length_exceeded`` (and every
    transport would fail the rollout there), so the run would measure failures: say
    so before it starts, naming the first rollout and turn and the numbers.
    """
    window = scenario.window_tokens
    if scenario.rollout.compact_at_tokens is not None:
        return  # validated below the window: the history is compacted before it gets there
    for root in plans:
        for conv_id, plan in conversations(root):
            for index, (history, output) in enumerate(context_tokens(plan)):
                if history + output <= window:
                    continue
                where = f" sub-agent {conv_id}" if conv_id else ""
                raise ScenarioError(
                    scenario.source,
                    "context_window_tokens",
                    f"expected rollouts that fit the context window of {window:,} tokens, but "
                    f"rollout {plan.rollout_id}{where} turn {index} needs {history + output:,} (history "
                    f"{history:,} + requested output {output:,}); set rollout.compact_at_tokens "
                    "below the window, shorten the rollout, or set context_window_tokens to "
                    "your endpoint's",
                )
