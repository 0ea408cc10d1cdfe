"""Harness memory per recorded turn: synthetic records through the accumulator and the writer.

Everything a run keeps per turn goes through the same two sinks as in
:func:`harness.run.runner.run_plans`: :class:`~harness.metrics.summary.Accumulator`
(histograms, per-second token buckets, per-rollout latencies for the paired
comparison) and :class:`~harness.report.results.ResultsWriter` (rows buffered
and flushed in gzip members).  Python heap growth is measured with
``tracemalloc`` after a warm-up (so fixed-size histograms are not counted as
growth) and scaled to a million turns; the cost of recording is timed in a
separate pass without ``tracemalloc`` (which slows allocation several-fold), less
the time it takes to build the synthetic records themselves.
"""

from __future__ import annotations

import gc
import random
import tempfile
import time
import tracemalloc
from dataclasses import dataclass

from harness.metrics.summary import Accumulator
from harness.report.results import ResultsWriter
from harness.workload.records import RolloutRecord, TurnRecord

#: synthetic rollouts: turns each, and output deltas (hence ITL samples) per turn
TURNS_PER_ROLLOUT = 10
DELTAS_PER_TURN = 60
#: synthetic clock: a new turn every this many ns (1,000 turns/s, as a busy run)
TURN_SPACING_NS = 1_000_000


@dataclass(frozen=True, slots=True)
class MemoryFigures:
    turns: int
    bytes_per_turn: float
    us_per_turn: float

    @property
    def mb_per_million_turns(self) -> float:
        return self.bytes_per_turn * 1e6 / 1e6


def synthetic_turn(i: int, rng: random.Random) -> TurnRecord:
    rollout, index = divmod(i, TURNS_PER_ROLLOUT)
    t = 10_000_000_000 + i * TURN_SPACING_NS
    itl = [rng.randint(1_500_000, 2_500_000) for _ in range(DELTAS_PER_TURN - 1)]
    first = t + rng.randint(20_000_000, 60_000_000)
    return TurnRecord(
        transport="ws",
        rollout_id=rollout,
        turn_index=index,
        intended_start_ns=t,
        sent_ns=t,
        first_event_ns=first - 1_000_000,
        first_token_ns=first,
        last_token_ns=first + sum(itl),
        done_ns=first + sum(itl) + 500_000,
        status="completed",
        response_id=f"resp_{i:032x}",
        input_tokens=1200,
        cached_tokens=1000,
        output_tokens=DELTAS_PER_TURN * 2,
        delta_events=DELTAS_PER_TURN,
        burst_tokens_max=200,
        sim_api_pre_ms=12.0,
        sim_api_queue_ms=0.0,
        sim_engine_queue_ms=0.0,
        sim_prefill_ms=25.0,
        sim_decode_ms=119.0,
        sim_api_post_ms=0.0,
        sim_ttft_ms=first / 1e6 - t / 1e6 - 0.3,
        sim_cache="hit",
        itl_ns=itl,
    )


def synthetic_rollout(i: int) -> RolloutRecord:
    t = 10_000_000_000 + i * TURNS_PER_ROLLOUT * TURN_SPACING_NS
    return RolloutRecord(
        transport="ws",
        rollout_id=i,
        intended_start_ns=t,
        start_ns=t,
        end_ns=t + TURNS_PER_ROLLOUT * TURN_SPACING_NS,
        turns=TURNS_PER_ROLLOUT,
        status="completed",
    )


def _feed(acc: Accumulator, writer: ResultsWriter, start: int, stop: int) -> None:
    rng = random.Random(start)
    for i in range(start, stop):
        rec = synthetic_turn(i, rng)
        writer.add_turn(rec)
        acc.add_turn(rec)
        if rec.turn_index == TURNS_PER_ROLLOUT - 1:
            roll = synthetic_rollout(rec.rollout_id)
            writer.add_rollout(roll)
            acc.add_rollout(roll)


def measure_memory(turns: int, warmup: int = 2_000) -> MemoryFigures:
    """Heap growth per turn over ``turns`` recorded turns, and the time to record one."""
    with tempfile.TemporaryDirectory(prefix="loopbench-selfbench-") as tmp:
        writer = ResultsWriter(f"{tmp}/timed", {"run_id": "selfbench-memory"})
        acc = Accumulator()
        t0 = time.perf_counter()
        _feed(acc, writer, 0, turns)
        fed = time.perf_counter() - t0
        # Building the synthetic records is not recording: time it alone and take it out.
        rng = random.Random(0)
        t0 = time.perf_counter()
        for i in range(turns):
            synthetic_turn(i, rng)
        built = time.perf_counter() - t0
        us_per_turn = max(0.0, fed - built) / turns * 1e6
        writer.close()
        del acc, writer

        gc.collect()
        writer = ResultsWriter(f"{tmp}/traced", {"run_id": "selfbench-memory"})
        acc = Accumulator()
        tracemalloc.start()
        try:
            _feed(acc, writer, 0, warmup)
            gc.collect()
            base = tracemalloc.get_traced_memory()[0]
            _feed(acc, writer, warmup, warmup + turns)
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
            writer.close()
    return MemoryFigures(turns, max(0, grown) / turns, us_per_turn)
