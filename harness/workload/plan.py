"""Concrete rollouts: what one agent does, turn by turn, fixed by a seed.

A :class:`RolloutPlan` is produced by the seeded generator in
:mod:`harness.workload.rollout` and replayed identically by every transport, so a
comparison between transports is paired on the same work.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


def derive_seed(seed: int, label: str) -> int:
    """A 63-bit seed for one named stream of a run (stable across Python versions)."""
    digest = hashlib.blake2b(f"loopbench:{seed}:{label}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """One model call of a rollout and the client work that follows it.

    ``tool_calls`` parallel function calls (0: the final answer); the client then runs call
    i for ``tool_latency_ms[i]`` (the turn waits for the longest) and returns
    ``tool_output_tokens[i]`` tokens.  ``think_ms`` is client time before the send;
    ``reasoning_tokens`` the model decodes before the visible output (0: it does not reason).
    """

    index: int
    output_tokens: int
    tool_calls: int
    tool_latency_ms: tuple[float, ...] = ()
    tool_output_tokens: tuple[int, ...] = ()
    think_ms: float = 0.0
    reasoning_tokens: int = 0
    #: sub-agents this turn forks (each stands for one of its ``tool_calls``: the "task" tool
    #: whose result is the sub-agent's final answer); they run concurrently with the turn's
    #: other tools and with each other, and the next turn waits for every one that joins
    subagents: tuple[SubagentPlan, ...] = ()
    #: a ``generate: false`` request prepares the connection before this (first) turn, which
    #: then chains from it: replayed by the WebSocket transports, skipped over HTTP
    warmup: bool = False

    @property
    def final(self) -> bool:
        return self.tool_calls == 0


@dataclass(frozen=True, slots=True)
class SubagentPlan:
    """A conversation a turn forks: its own instructions, prompt and turns, replayed by the
    same transport as its parent (docs/traces.md, docs/model.md).

    ``call_index`` is the parent turn's tool call it answers (its output, for the parent's
    next turn, is ``result_tokens`` tokens).  ``join`` is ``"wait"`` (the parent's next turn
    waits for it, as a task tool does) or ``"detach"`` (it runs on; the rollout still ends
    only when it does).  Its turns may fork sub-agents of their own.
    """

    subagent_id: int
    seed: int
    system_tokens: int
    tool_schema_tokens: int
    user_prompt_tokens: int
    turns: tuple[TurnPlan, ...]
    call_index: int = 0
    result_tokens: int = 100
    join: str = "wait"
    #: as :attr:`RolloutPlan.ws_chains` and :attr:`RolloutPlan.resends_reasoning`
    ws_chains: bool | None = None
    resends_reasoning: bool | None = None


@dataclass(frozen=True, slots=True)
class RolloutPlan:
    """A whole agent rollout.

    ``start_offset_ns`` is the intended start relative to the run's start
    (open-loop schedules); closed-loop runs leave it at 0 and start a rollout
    when an agent slot frees up.
    """

    rollout_id: int
    seed: int
    system_tokens: int
    tool_schema_tokens: int
    user_prompt_tokens: int
    turns: tuple[TurnPlan, ...]
    start_offset_ns: int = 0
    tags: dict[str, str] = field(default_factory=dict)
    #: what a recorded client did with the context (a trace's ``client``; None: the
    #: transport's way): over WebSocket, chain each turn from the previous response (False:
    #: send the whole input every turn) ...
    ws_chains: bool | None = None
    #: ... and, when the whole context goes out, send the earlier reasoning items back
    #: (False: the reasoning never re-enters the context)
    resends_reasoning: bool | None = None

    @property
    def tool_call_count(self) -> int:
        return sum(t.tool_calls for t in self.turns)


def subagent_rollout(parent: RolloutPlan, sub: SubagentPlan) -> RolloutPlan:
    """A sub-agent's conversation as a plan of its own (the parent's id and tags: its turn
    records belong to the parent's rollout)."""
    return RolloutPlan(
        rollout_id=parent.rollout_id,
        seed=sub.seed,
        system_tokens=sub.system_tokens,
        tool_schema_tokens=sub.tool_schema_tokens,
        user_prompt_tokens=sub.user_prompt_tokens,
        turns=sub.turns,
        start_offset_ns=parent.start_offset_ns,
        tags=parent.tags,
        ws_chains=sub.ws_chains,
        resends_reasoning=sub.resends_reasoning,
    )


def conversations(plan: RolloutPlan) -> list[tuple[int, RolloutPlan]]:
    """Every conversation of ``plan`` as (conversation id, plan): the root (0), then its
    sub-agents depth-first in fork order."""
    out: list[tuple[int, RolloutPlan]] = [(0, plan)]

    def walk(conv: RolloutPlan) -> None:
        for turn in conv.turns:
            for sub in turn.subagents:
                child = subagent_rollout(plan, sub)
                out.append((sub.subagent_id, child))
                walk(child)

    walk(plan)
    return out
