"""Run one rollout over one transport: the asyncio edge of :mod:`harness.client.rollout`.

The stepper decides; this module sleeps with ``asyncio.sleep``, runs each turn
over the transport's session and reads the clock (``perf_counter_ns``).
"""

from __future__ import annotations

import asyncio
import time

from harness.client.rollout import RolloutSteps, Step, TurnSink
from harness.transports.base import Transport
from harness.wire.errors import LoopbenchError
from harness.workload.plan import RolloutPlan
from harness.workload.records import RolloutRecord


async def run_rollout(
    transport: Transport,
    plan: RolloutPlan,
    *,
    intended_start_ns: int,
    round_index: int = 0,
    model: str = "sim-model",
    on_turn: TurnSink,
    hints: bool = True,
    compact_at_tokens: int | None = None,
    rollout_key: str | None = None,
) -> RolloutRecord:
    """Run ``plan`` to its end; ``rollout_key`` names the rollout in its session-affinity
    header (harness/client/shaping.py).  The transport's token convention sizes its text."""
    steps = RolloutSteps(
        plan,
        transport=transport.name,
        intended_start_ns=intended_start_ns,
        round_index=round_index,
        model=model,
        hints=hints,
        on_turn=on_turn,
        clock=time.perf_counter_ns,
        compact_at_tokens=compact_at_tokens,
        tokens=transport.options.tokens,
    )
    session = await transport.session(rollout_key)
    try:
        while (step := steps.next()) is not Step.DONE:
            if step is Step.SLEEP:
                await asyncio.sleep(steps.sleep_s)
                continue
            try:
                stream = await session.turn(steps.turn_input, steps.turn_record)
            except LoopbenchError as exc:
                steps.failed(exc)
            else:
                steps.answered(stream)
    finally:
        await session.close()
    return steps.finish()
