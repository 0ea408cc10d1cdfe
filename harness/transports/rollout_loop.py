"""Run one rollout over one transport: the asyncio edge of :mod:`harness.client.rollout`.

The stepper decides; this module sleeps with ``asyncio.sleep``, runs each turn
over the transport's session and reads the clock (``perf_counter_ns``).  A sub-agent's
conversation runs as a task of its own over a session of its own (or a lane of the
parent's WebSocket connection, ``--ws-subagents lanes``).
"""

from __future__ import annotations

import asyncio
import time
from typing import cast

from harness.client.rollout import RolloutSteps, Step, TurnSink
from harness.transports.base import Session, Transport
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
    await _converse(transport, steps, session, rollout_key)
    return steps.finish()


async def _converse(
    transport: Transport, steps: RolloutSteps, session: Session, rollout_key: str | None
) -> None:
    """Run one conversation to its end, and every sub-agent it forks as a task of its own;
    returns when all of them are done (the session is closed by then)."""
    tasks: dict[int, asyncio.Task[None]] = {}
    # The group cancels the sub-agents if this conversation is cancelled (an interrupted run)
    # and, on the way out, waits for the ones still running (detached).
    async with asyncio.TaskGroup() as group:
        try:
            while (step := steps.next()) is not Step.DONE:
                if step is Step.SLEEP:
                    await asyncio.sleep(steps.sleep_s)
                elif step is Step.FORK:
                    for child in steps.forks:
                        sub = await _subagent_session(transport, session, child, rollout_key)
                        tasks[child.conversation] = group.create_task(
                            _run_subagent(transport, child, sub, rollout_key)
                        )
                elif step is Step.JOIN:
                    await asyncio.wait([tasks[c.conversation] for c in steps.joining])
                else:
                    try:
                        stream = await session.turn(steps.turn_input, steps.turn_record)
                    except LoopbenchError as exc:
                        steps.failed(exc)
                    else:
                        steps.answered(stream)
        finally:
            await session.close()


async def _subagent_session(
    transport: Transport, parent: Session, child: RolloutSteps, rollout_key: str | None
) -> Session:
    # A WebSocket session in lanes mode opens its sub-agents' sessions as lanes of its own
    # connection; every other one gets a session of its own (a connection of its own over
    # WebSocket, requests on the shared pool over HTTP), as real clients run sub-agents.
    lane = getattr(parent, "lane", None)
    if lane is not None:
        return cast(Session, lane(child.conversation))
    return await transport.session(rollout_key)


async def _run_subagent(
    transport: Transport, steps: RolloutSteps, session: Session, rollout_key: str | None
) -> None:
    await _converse(transport, steps, session, rollout_key)
    steps.finish()
