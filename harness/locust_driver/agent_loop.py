"""One rollout over one session: the blocking twin of :mod:`harness.transports.rollout_loop`.

The pure :class:`~harness.workload.agent.Transcript` decides what to send; this
module sends it through a blocking :class:`~.sessions.Session`, waits tool and
think time with an injected ``sleep`` (``gevent.sleep`` in a Locust worker)
and produces the records, field for field as the asyncio loop does.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.locust_driver.net import now_ns
from harness.locust_driver.sessions import Session
from harness.wire.errors import APIError, LoopbenchError, TransportError
from harness.workload.agent import Transcript
from harness.workload.plan import RolloutPlan
from harness.workload.records import RolloutRecord, TurnRecord

TurnSink = Callable[[TurnRecord], None]


def _error_kind(exc: LoopbenchError) -> str:
    if isinstance(exc, APIError) and exc.code:
        return exc.code
    return exc.kind if isinstance(exc, TransportError) else type(exc).__name__


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
) -> RolloutRecord:
    roll = RolloutRecord(transport=session.name, rollout_id=plan.rollout_id, round=round_index)
    roll.intended_start_ns = intended_start_ns
    roll.start_ns = now_ns()
    transcript = Transcript(plan, model=model, hints=hints)
    session.start_rollout()
    try:
        for index, turn in enumerate(plan.turns):
            if turn.think_ms > 0:
                t0 = now_ns()
                sleep(turn.think_ms / 1000)
                roll.client_ns += now_ns() - t0
            c0 = now_ns()
            inp = transcript.next_input(index)
            rec = TurnRecord(
                transport=session.name,
                rollout_id=plan.rollout_id,
                turn_index=index,
                round=round_index,
            )
            rec.intended_start_ns = c0
            rec.history_tokens = transcript.history_tokens
            roll.client_ns += now_ns() - c0
            try:
                stream = session.turn(inp, rec)
            except LoopbenchError as exc:
                rec.status = "error"
                rec.error_kind = _error_kind(exc)
                rec.error_message = str(exc)[:300]
                rec.done_ns = now_ns()
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
            c1 = now_ns()
            jobs = transcript.record_output(index, stream.function_calls)
            roll.client_ns += now_ns() - c1
            if turn.final or not jobs:
                continue
            # Parallel tool calls run concurrently on the client: the turn waits for the slowest.
            latencies = turn.tool_latency_ms or (0.0,)
            wait_ms = max(latencies[i % len(latencies)] for i in range(len(jobs)))
            t0 = now_ns()
            if wait_ms > 0:
                sleep(wait_ms / 1000)
            c2 = now_ns()
            roll.tool_ns += c2 - t0
            transcript.add_tool_outputs(index, jobs)
            roll.client_ns += now_ns() - c2
        else:
            roll.status = "completed"
    finally:
        session.end_rollout()
    roll.end_ns = now_ns()
    return roll
