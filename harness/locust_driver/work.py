"""Master-side work distribution: what a free Locust user runs next.  Pure; the clock is passed in.

Phases, claims, waits and lost rollouts: docs/distributed.md, "What runs where", "Faults" and
"Load shapes".  A lost rollout is not run again: the same rollout id run twice would pair twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from harness.run.rounds import interleaving_rounds
from harness.workload.plan import RolloutPlan

ClaimKind = Literal["run", "wait", "done"]


@dataclass(frozen=True, slots=True)
class Claim:
    kind: ClaimKind
    phase: int = -1
    transport: str = ""
    round: int = 0
    plan: RolloutPlan | None = None
    #: open loop: ns from the answer until the intended start (negative: already late)
    start_in_ns: int | None = None


@dataclass(slots=True)
class Phase:
    transport: str
    round: int
    plans: list[RolloutPlan]
    open_loop: bool
    next_index: int = 0
    claimed: set[int] = field(default_factory=set)
    finished: set[int] = field(default_factory=set)
    lost: set[int] = field(default_factory=set)
    t0_ns: int | None = None
    base_offset_ns: int = 0

    @property
    def complete(self) -> bool:
        return len(self.finished) + len(self.lost) >= len(self.plans)


class WorkQueue:
    def __init__(
        self,
        plans: Sequence[RolloutPlan],
        transports: Sequence[str],
        *,
        open_loop: bool,
        rounds: int = 1,
    ) -> None:
        if not transports:
            raise ValueError("work queue: transports: expected at least one, got none")
        self.open_loop = open_loop
        self.phases: list[Phase] = []
        for round_index, chunk in enumerate(interleaving_rounds(plans, rounds)):
            for name in transports:
                base = min((p.start_offset_ns for p in chunk), default=0)
                self.phases.append(Phase(name, round_index, chunk, open_loop, base_offset_ns=base))
        self.current = 0
        self.claimed = 0
        self.finished = 0
        self.lost = 0

    @property
    def done(self) -> bool:
        return self.current >= len(self.phases)

    @property
    def in_flight(self) -> int:
        return self.claimed - self.finished - self.lost

    @property
    def total(self) -> int:
        return sum(len(p.plans) for p in self.phases)

    def _advance(self) -> None:
        while self.current < len(self.phases) and self.phases[self.current].complete:
            self.current += 1

    def claim(self, now_ns: int) -> Claim:
        self._advance()
        if self.done:
            return Claim("done")
        phase = self.phases[self.current]
        if phase.next_index >= len(phase.plans):
            return Claim("wait")
        plan = phase.plans[phase.next_index]
        phase.next_index += 1
        phase.claimed.add(plan.rollout_id)
        self.claimed += 1
        start_in: int | None = None
        if phase.open_loop:
            if phase.t0_ns is None:
                phase.t0_ns = now_ns
            start_in = phase.t0_ns + plan.start_offset_ns - phase.base_offset_ns - now_ns
        return Claim("run", self.current, phase.transport, phase.round, plan, start_in)

    def finish(self, phase_index: int, rollout_id: int) -> None:
        """A claimed rollout was run to its end (successfully or not); unknown ones are ignored."""
        self._end(phase_index, rollout_id, lost=False)

    def lose(self, phase_index: int, rollout_id: int) -> bool:
        """A claimed rollout will never be reported (its worker died): end it as lost.

        False if it had already ended (or was never claimed).
        """
        return self._end(phase_index, rollout_id, lost=True)

    def _end(self, phase_index: int, rollout_id: int, *, lost: bool) -> bool:
        if not 0 <= phase_index < len(self.phases):
            return False
        phase = self.phases[phase_index]
        if rollout_id in phase.finished | phase.lost or rollout_id not in phase.claimed:
            return False
        (phase.lost if lost else phase.finished).add(rollout_id)
        self.lost += lost
        self.finished += not lost
        self._advance()
        return True

    def unclaimed(self, transport: str, warmup: int) -> int:
        """Measured rollouts (id >= ``warmup``) of ``transport`` never handed out."""
        return sum(
            1
            for phase in self.phases
            if phase.transport == transport
            for p in phase.plans
            if p.rollout_id >= warmup and p.rollout_id not in phase.claimed
        )

    def due_within(self, now_ns: int, horizon_ns: int) -> int:
        """Unclaimed rollouts of the current phase whose intended start is within ``horizon_ns``."""
        if self.done:
            return 0
        phase = self.phases[self.current]
        rest = phase.plans[phase.next_index :]
        if not phase.open_loop:
            return len(rest)
        t0 = now_ns if phase.t0_ns is None else phase.t0_ns
        limit = now_ns + horizon_ns - t0 + phase.base_offset_ns
        return sum(1 for p in rest if p.start_offset_ns <= limit)
