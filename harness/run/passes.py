"""One pass of the load: a transport running a set of rollouts, and the client's own health.

The asyncio pieces :mod:`harness.run.runner` and the A/B gate (:mod:`harness.gate.ab`)
both drive a :class:`~harness.run.measurement.Measurement` with: the closed-loop
agents and the open-loop dispatcher (coordinated-omission safe: each rollout is
measured from its intended start), the counters of a pass for the progress
display, and the watch over this process's own health (GC, loop lag, CPU).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.client.shaping import rollout_key
from harness.metrics import definitions as D
from harness.metrics.hdr import Histogram
from harness.run.health import LOOP_WATCH_INTERVAL_S, ClientHealth, CpuMeter
from harness.run.progress import PassProgress
from harness.run.schedule_stats import ScheduleStats
from harness.transports import Transport
from harness.transports.rollout_loop import run_rollout
from harness.wire import quiet_gc
from harness.workload.plan import RolloutPlan
from harness.workload.records import RolloutRecord, TurnRecord
from harness.workload.scenario import Load, Scenario

_TTFT = D.get("ttft_ms")


@dataclass(slots=True)
class PassCounts:
    """Counters of one transport pass, for the progress display (cheap; no statistics here)."""

    total: int
    done: int = 0
    turns: int = 0
    errors: int = 0
    late: int = 0
    dropped: int = 0
    schedule_end_ns: int = 0  # open loop: when the last intended start is due
    ttft_ms: deque[float] = field(default_factory=lambda: deque(maxlen=200))

    def snapshot(
        self, name: str, round_index: int, rounds: int, started_ns: int, finished: bool = False
    ) -> PassProgress:
        now = time.perf_counter_ns()
        ttft = sorted(self.ttft_ms)[len(self.ttft_ms) // 2] if self.ttft_ms else None
        left = max(0.0, (self.schedule_end_ns - now) / 1e9) if self.schedule_end_ns else None
        return PassProgress(
            transport=name,
            round=round_index,
            rounds=rounds,
            done=self.done,
            total=self.total,
            turns=self.turns,
            errors=self.errors,
            dropped=self.dropped,
            late=self.late,
            ttft_p50_ms=ttft,
            elapsed_s=(now - started_ns) / 1e9,
            finished=finished,
            schedule_left_s=left,
        )


RolloutStarter = Callable[[RolloutPlan, int], Coroutine[Any, Any, None]]


async def run_pass(
    transport: Transport,
    plans: Sequence[RolloutPlan],
    scenario: Scenario,
    round_index: int,
    on_turn: Callable[[TurnRecord], None],
    on_rollout: Callable[[RolloutRecord], None],
    live: PassCounts,
    sched: ScheduleStats,
    duration_s: float | None,
    *,
    hints: bool = True,
    turn_hook: Callable[[TurnRecord], None] | None = None,
    run_id: str | None = None,
) -> None:
    """Run ``plans`` over ``transport`` under the scenario's load (closed or open loop).

    ``duration_s`` bounds a closed loop; ``hints=False`` sends no loopbench.*
    metadata; ``turn_hook`` sees every turn record after ``on_turn``.  ``run_id`` names
    each rollout's session (:func:`~harness.client.shaping.rollout_key`).
    """
    load = scenario.load
    warmup = load.warmup_rollouts
    late_ns = round(load.max_schedule_lag_ms * 1e6)
    sched.intended += sum(1 for p in plans if p.rollout_id >= warmup)

    def turn_sink(rec: TurnRecord) -> None:
        live.turns += 1
        if not rec.ok:
            live.errors += 1
        elif (ttft := D.sample(_TTFT, rec)) is not None:
            live.ttft_ms.append(ttft)
        on_turn(rec)
        if turn_hook is not None:
            turn_hook(rec)

    async def one(plan: RolloutPlan, intended: int) -> None:
        rec = await run_rollout(
            transport,
            plan,
            intended_start_ns=intended,
            round_index=round_index,
            model=scenario.model,
            on_turn=turn_sink,
            hints=hints,
            compact_at_tokens=scenario.rollout.compact_at_tokens,
            rollout_key=None
            if run_id is None
            else rollout_key(run_id, transport.name, plan.rollout_id),
        )
        live.done += 1
        if plan.rollout_id >= warmup and sched.observe(rec, late_ns):
            live.late += 1
        on_rollout(rec)

    def measured(rest: Sequence[RolloutPlan]) -> int:
        return sum(1 for p in rest if p.rollout_id >= warmup)

    if load.mode == "closed":
        await _closed_loop(plans, load.concurrency, duration_s, one, sched, measured)
    else:
        await _dispatch(plans, load.max_in_flight, one, live, sched, measured)


async def _closed_loop(
    plans: Sequence[RolloutPlan],
    concurrency: int,
    duration_s: float | None,
    one: RolloutStarter,
    sched: ScheduleStats,
    measured: Callable[[Sequence[RolloutPlan]], int],
) -> None:
    """``concurrency`` agents run rollouts back to back until none is left or time is up."""
    pending = deque(plans)
    deadline = time.perf_counter_ns() + round(duration_s * 1e9) if duration_s is not None else None

    async def agent() -> None:
        while pending:
            if deadline is not None and time.perf_counter_ns() >= deadline:
                return
            plan = pending.popleft()
            # Closed loop: the agent is ready now, so now is the intended start.
            await one(plan, time.perf_counter_ns())

    try:
        await asyncio.gather(*(agent() for _ in range(max(1, min(concurrency, len(plans))))))
    finally:
        sched.not_started += measured(pending)


async def _dispatch(
    plans: Sequence[RolloutPlan],
    max_in_flight: int | None,
    one: RolloutStarter,
    live: PassCounts,
    sched: ScheduleStats,
    measured: Callable[[Sequence[RolloutPlan]], int],
) -> None:
    """Open loop: start each rollout at its intended time, whatever is still in flight.

    One dispatcher walks the sorted schedule, so a late wake-up shows up as
    schedule lag on every start it delayed, never as a shorter latency.
    """
    if not plans:
        return
    ordered = sorted(plans, key=lambda p: p.start_offset_ns)
    base = ordered[0].start_offset_ns
    t0 = time.perf_counter_ns()
    live.schedule_end_ns = t0 + ordered[-1].start_offset_ns - base
    inflight: set[asyncio.Task[None]] = set()
    issued = 0
    try:
        for plan in ordered:
            intended = t0 + plan.start_offset_ns - base
            # uvloop's timers have millisecond resolution and may fire early: sleep again
            # so that no rollout starts before its intended time.
            while (delay := intended - time.perf_counter_ns()) > 0:
                await asyncio.sleep(delay / 1e9)
            issued += 1
            if max_in_flight is not None and len(inflight) >= max_in_flight:
                live.dropped += 1
                sched.dropped += measured([plan])
                continue
            task = asyncio.ensure_future(one(plan, intended))
            inflight.add(task)
            task.add_done_callback(inflight.discard)
        while inflight:
            await asyncio.gather(*list(inflight))
    except BaseException:
        sched.not_started += measured(ordered[issued:])
        for task in inflight:
            task.cancel()
        await asyncio.gather(*inflight, return_exceptions=True)
        raise


async def watch_loop(hist: Histogram) -> None:
    """Record how late the event loop wakes from short sleeps: the client's own lag.

    Every :data:`~harness.wire.quiet_gc.FREEZE_EVERY_S` it also hides what is alive from
    the cyclic collector (harness/wire/quiet_gc.py).
    """
    interval_ns = round(LOOP_WATCH_INTERVAL_S * 1e9)
    freeze_every = max(1, round(quiet_gc.FREEZE_EVERY_S / LOOP_WATCH_INTERVAL_S))
    ticks = 0
    while True:
        t = time.perf_counter_ns()
        collections = quiet_gc.between_passes
        await asyncio.sleep(LOOP_WATCH_INTERVAL_S)
        if quiet_gc.between_passes == collections:  # a collection between passes is no lag
            hist.record_ns(max(0, time.perf_counter_ns() - t - interval_ns))
        ticks += 1
        if ticks % freeze_every == 0:
            quiet_gc.refreeze()


class ClientWatch:
    """This process's health over a run, started once the transports are built.

    The cyclic collector, which would pause the loop for tens of ms mid-measurement,
    sees nothing that is alive while the pass runs (harness/wire/quiet_gc.py); a watchdog
    records the loop's wake-up lag; CPU is counted from here to :meth:`stop`.
    """

    def __init__(self) -> None:
        self._gc = quiet_gc.begin(quiet_gc.VALVE_THRESHOLD)
        self._lag = Histogram()
        self._task = asyncio.ensure_future(watch_loop(self._lag))
        self._cpu = CpuMeter()

    async def stop(self) -> ClientHealth:
        quiet_gc.end(self._gc)
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        return self._cpu.read(self._lag)


def pass_duration(load: Load, rounds: int) -> float | None:
    """A closed loop's ``duration_s`` is each transport's budget, shared by its rounds."""
    if load.mode != "closed" or load.duration_s is None:
        return None
    return load.duration_s / rounds
