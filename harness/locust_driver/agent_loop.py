"""One rollout over one session: the gevent edge of :mod:`harness.client.rollout`.

The stepper decides; this module sleeps with the injected ``sleep``
(``gevent.sleep`` in a Locust worker), runs each turn over the blocking
:class:`~.sessions.Session` and reads the clock (:func:`~.net.now_ns`).
"""

from __future__ import annotations

from collections.abc import Callable

from harness.client.rollout import RolloutSteps, Step, TurnSink
from harness.locust_driver.net import now_ns
from harness.locust_driver.sessions import Session
from harness.wire.errors import LoopbenchError, UsageError
from harness.workload.plan import RolloutPlan
from harness.workload.records import RolloutRecord


def run_rollout(
    session: Session,
    plan: RolloutPlan,
    *,
    intended_start_ns: int,
    round_index: int,
    model: str,
    on_turn: TurnSink,
    sleep: Callable[[float], object],
    hints: bool = True,
    rollout_key: str | None = None,
) -> RolloutRecord:
    """Run ``plan`` to its end; ``rollout_key`` names it in its session-affinity header."""
    if any(turn.subagents for turn in plan.turns):
        # A trace may carry sub-agents the scenario check cannot see: refused, not half-run.
        raise UsageError(
            f"rollout {plan.rollout_id} forks sub-agents, which run under loopbench run only "
            "(the Locust edge runs one conversation per rollout); use loopbench run"
        )
    steps = RolloutSteps(
        plan,
        transport=session.name,
        intended_start_ns=intended_start_ns,
        round_index=round_index,
        model=model,
        hints=hints,
        on_turn=on_turn,
        clock=now_ns,
        tokens=session.options.tokens,
    )
    session.start_rollout(rollout_key)
    try:
        while (step := steps.next()) is not Step.DONE:
            if step is Step.SLEEP:
                sleep(steps.sleep_s)
                continue
            try:
                stream = session.turn(steps.turn_input, steps.turn_record)
            except LoopbenchError as exc:
                steps.failed(exc)
            else:
                steps.answered(stream)
    finally:
        session.end_rollout()
    return steps.finish()
