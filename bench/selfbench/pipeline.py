"""The full pipeline: loopbench's real client path against the bare server of the ceiling.

The server is the one the bare readers of :mod:`.raw` count (:mod:`.lib_server`
or :mod:`.raw_server`: the same events, one write per event), so what differs
between the two figures is the client's work only: the transport parses every event, stamps
it and feeds the per-response state machine,
:func:`~harness.transports.rollout_loop.run_rollout` fills the turn record, and every
record goes to an :class:`~harness.metrics.summary.Accumulator` and a
:class:`~harness.report.results.ResultsWriter`, as in a run.
"""

from __future__ import annotations

import asyncio
import tempfile
import time

from bench.selfbench.procs import SelfbenchError
from bench.selfbench.raw import Rate
from bench.selfbench.raw_server import LIFECYCLE_EVENTS
from harness.metrics.summary import Accumulator
from harness.report.results import ResultsWriter
from harness.run.measurement import pool_size
from harness.transports import TransportOptions, make_transport
from harness.transports.rollout_loop import run_rollout
from harness.workload.plan import RolloutPlan, TurnPlan
from harness.workload.records import TurnRecord
from harness.workload.scenario import Load


def _plan(rollout_id: int, tokens: int) -> RolloutPlan:
    return RolloutPlan(
        rollout_id=rollout_id,
        seed=rollout_id,
        system_tokens=20,
        tool_schema_tokens=40,
        user_prompt_tokens=20,
        turns=(TurnPlan(index=0, output_tokens=tokens, tool_calls=0),),
    )


async def drive(
    base_url: str, transport_name: str, streams: int, per_stream: int, rounds: int = 1
) -> Rate:
    """``streams`` concurrent one-turn rollouts of ``per_stream`` tokens, ``rounds`` times each."""
    # `streams` agents running rollouts back to back: a closed loop of that concurrency
    pool = pool_size(Load(concurrency=streams))
    options = TransportOptions(base_url=base_url, max_connections=pool)
    transport = make_transport(transport_name, options)
    acc = Accumulator()
    events = 0
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="loopbench-selfbench-") as tmp:
        writer = ResultsWriter(f"{tmp}/run", {"run_id": "selfbench-pipeline"})

        def on_turn(rec: TurnRecord) -> None:
            nonlocal events
            writer.add_turn(rec)
            acc.add_turn(rec)
            if rec.ok:
                events += rec.delta_events + LIFECYCLE_EVENTS
            else:
                errors.append(f"{rec.error_kind}: {rec.error_message}")

        async def agent(i: int) -> None:
            for r in range(rounds):
                rid = i * rounds + r
                roll = await run_rollout(
                    transport,
                    _plan(rid, per_stream),
                    intended_start_ns=time.perf_counter_ns(),
                    on_turn=on_turn,
                )
                writer.add_rollout(roll)
                acc.add_rollout(roll)

        try:
            cpu0 = time.process_time()
            t0 = time.perf_counter_ns()
            await asyncio.gather(*(agent(i) for i in range(streams)))
            t1 = time.perf_counter_ns()
            cpu = time.process_time() - cpu0
        finally:
            await transport.aclose()
            writer.close()
    if errors:
        raise SelfbenchError(
            f"pipeline {transport_name}: {len(errors)} turn(s) failed, first: {errors[0]}"
        )
    return Rate(events, (t1 - t0) / 1e9, streams, cpu)
