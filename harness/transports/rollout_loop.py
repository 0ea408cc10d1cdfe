"""Run one rollout over one transport: the asyncio half of the agent loop.

The pure :class:`~harness.workload.agent.Transcript` decides what to send; this
module sends it, waits the tool latencies, and produces the records.  Time is
read here, at the edge, with ``perf_counter_ns``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from harness.transports.base import Transport
from harness.wire.errors import APIError, LoopbenchError, TransportError
from harness.workload.agent import Transcript
from harness.workload.plan import RolloutPlan
from harness.workload.records import RolloutRecord, TurnRecord

TurnSink = Callable[[TurnRecord], None]


async def run_rollout(
    transport: Transport,
    plan: RolloutPlan,
    *,
    intended_start_ns: int,
    round_index: int = 0,
    model: str = "sim-model",
    on_turn: TurnSink,
    hints: bool = True,
) -> RolloutRecord:
    roll = RolloutRecord(transport=transport.name, rollout_id=plan.rollout_id, round=round_index)
    roll.intended_start_ns = intended_start_ns
    roll.start_ns = time.perf_counter_ns()
    transcript = Transcript(plan, model=model, hints=hints)
    session = await transport.session()
    try:
        for index, turn in enumerate(plan.turns):
            if turn.think_ms > 0:
                t0 = time.perf_counter_ns()
                await asyncio.sleep(turn.think_ms / 1000)
                roll.client_ns += time.perf_counter_ns() - t0
            c0 = time.perf_counter_ns()
            inp = transcript.next_input(index)
            rec = TurnRecord(
                transport=transport.name,
                rollout_id=plan.rollout_id,
                turn_index=index,
                round=round_index,
            )
            rec.intended_start_ns = c0
            rec.history_tokens = transcript.history_tokens
            roll.client_ns += time.perf_counter_ns() - c0
            try:
                stream = await session.turn(inp, rec)
            except LoopbenchError as exc:
                rec.status = "error"
                rec.error_kind = (
                    exc.code
                    if isinstance(exc, APIError) and exc.code
                    else (exc.kind if isinstance(exc, TransportError) else type(exc).__name__)
                )
                rec.error_message = str(exc)[:300]
                rec.done_ns = time.perf_counter_ns()
                roll.turns += 1
                roll.errors += 1
                roll.status = "error"
                roll.error_kind = rec.error_kind
                roll.recoveries += rec.recoveries
                on_turn(rec)
                break
            sent_ns = rec.sent_ns
            stream.fill(rec)
            rec.sent_ns = sent_ns
            roll.turns += 1
            roll.model_ns += rec.done_ns - rec.sent_ns
            roll.recoveries += rec.recoveries
            roll.recovery_ns += rec.recovery_ns
            if rec.new_connection:
                roll.connections += 1
            if not rec.ok:
                roll.errors += 1
                roll.status = rec.status
                roll.error_kind = rec.error_kind or rec.status
                on_turn(rec)
                break
            on_turn(rec)
            c1 = time.perf_counter_ns()
            jobs = transcript.record_output(index, stream.function_calls)
            roll.client_ns += time.perf_counter_ns() - c1
            if turn.final or not jobs:
                continue
            # Parallel tool calls run concurrently on the client: the turn waits for the slowest.
            latencies = turn.tool_latency_ms or (0.0,)
            wait_ms = max(latencies[i % len(latencies)] for i in range(len(jobs)))
            t0 = time.perf_counter_ns()
            if wait_ms > 0:
                await asyncio.sleep(wait_ms / 1000)
            c2 = time.perf_counter_ns()
            roll.tool_ns += c2 - t0
            transcript.add_tool_outputs(index, jobs)
            roll.client_ns += time.perf_counter_ns() - c2
        else:
            roll.status = "completed"
    finally:
        await session.close()
    roll.end_ns = time.perf_counter_ns()
    return roll
