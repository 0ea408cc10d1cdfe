"""One pass of the load: a transport running a set of rollouts, and the client's own health.

The pieces :mod:`harness.run.runner` and the A/B gate (:mod:`harness.gate.ab`) both
build a run from: the closed-loop agents and the open-loop dispatcher
(coordinated-omission safe: each rollout is measured from its intended
start), the counters of a pass for the progress display, what happened to the
intended starts, the event-loop watchdog, and the reasons a run's client cannot
be trusted to have applied the intended load.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.metrics.hdr import Histogram
from harness.run.progress import PassProgress
from harness.transports import Transport
from harness.transports.rollout_loop import run_rollout
from harness.workload.plan import RolloutPlan
from harness.workload.records import RolloutRecord, TurnRecord
from harness.workload.scenario import Scenario

# Client CPU above this share of one core means the generator itself may be the bottleneck.
CPU_SATURATION_SHARE = 0.95
# Period of the event-loop watchdog: how late a 10 ms sleep wakes is the loop's own lag.
LOOP_WATCH_INTERVAL_S = 0.01
LOOP_STALL_MIN_WALL_S = 1.0


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


@dataclass(slots=True)
class ScheduleStats:
    """What happened to one transport's intended starts (measured rollouts only).

    ``intended``: starts the plan asked for; ``started``: rollouts begun;
    ``late``: begun more than ``load.max_schedule_lag_ms`` after their intended
    time; ``dropped``: never begun because ``load.max_in_flight`` rollouts were
    in flight; ``not_started``: left over when a closed loop reached
    ``duration_s`` or the run was interrupted.
    """

    intended: int = 0
    started: int = 0
    late: int = 0
    dropped: int = 0
    not_started: int = 0
    lag_max_ns: int = 0
    lag_sum_ns: int = 0
    uncorrected: Histogram = field(default_factory=Histogram)

    def observe(self, rec: RolloutRecord, late_ns: int) -> bool:
        """Count a finished rollout; True if it started late."""
        self.started += 1
        lag = rec.schedule_lag_ns
        self.lag_sum_ns += lag
        self.lag_max_ns = max(self.lag_max_ns, lag)
        if rec.ok and rec.uncorrected_latency_ns is not None:
            self.uncorrected.record_ns(rec.uncorrected_latency_ns)
        if lag > late_ns:
            self.late += 1
            return True
        return False

    def as_dict(self) -> dict[str, Any]:
        started = self.started
        return {
            "intended": self.intended,
            "started": started,
            "late": self.late,
            "dropped": self.dropped,
            "not_started": self.not_started,
            "lag_mean_ms": round(self.lag_sum_ns / started / 1e6, 3) if started else None,
            "lag_max_ms": round(self.lag_max_ns / 1e6, 3) if started else None,
        }


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
) -> None:
    """Run ``plans`` over ``transport`` under the scenario's load (closed or open loop).

    ``duration_s`` bounds a closed loop; ``hints=False`` sends no loopbench.*
    metadata; ``turn_hook`` sees every turn record after ``on_turn``.
    """
    load = scenario.load
    warmup = load.warmup_rollouts
    late_ns = round(load.max_schedule_lag_ms * 1e6)
    hook = turn_hook
    sched.intended += sum(1 for p in plans if p.rollout_id >= warmup)

    def turn_sink(rec: TurnRecord) -> None:
        live.turns += 1
        if not rec.ok:
            live.errors += 1
        elif rec.first_token_ns:
            live.ttft_ms.append((rec.first_token_ns - rec.sent_ns) / 1e6)
        on_turn(rec)
        if hook is not None:
            hook(rec)

    async def one(plan: RolloutPlan, intended: int) -> None:
        rec = await run_rollout(
            transport,
            plan,
            intended_start_ns=intended,
            round_index=round_index,
            model=scenario.model,
            on_turn=turn_sink,
            hints=hints,
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
    """Record how late the event loop wakes from short sleeps: the client's own lag."""
    interval_ns = round(LOOP_WATCH_INTERVAL_S * 1e9)
    while True:
        t = time.perf_counter_ns()
        await asyncio.sleep(LOOP_WATCH_INTERVAL_S)
        hist.record_ns(max(0, time.perf_counter_ns() - t - interval_ns))


def round_ms(x: float) -> float | None:
    """Milliseconds to 3 decimals for a summary; None for NaN or infinity (empty histograms)."""
    return round(x, 3) if math.isfinite(x) else None


def finish_client_summary(
    summary: dict[str, Any],
    reasons: list[str],
    *,
    partial: bool,
    cpu_share: float,
    loop_lag: Histogram,
) -> None:
    """Validity, partial flag and the client's own health, the same for every kind of run."""
    summary["invalid_reasons"] = reasons
    summary["valid"] = not reasons
    summary["partial"] = partial
    summary["client_cpu_share"] = round(cpu_share, 3)
    loop50, loop99 = loop_lag.percentiles_ms((50, 99))
    summary["client"] = {
        "cpu_share": round(cpu_share, 3),
        "loop_lag_ms": {
            "p50": round_ms(loop50),
            "p99": round_ms(loop99),
            "max": round_ms(loop_lag.max / 1000.0),
        },
    }


def lag_reasons(
    summary: dict[str, Any],
    schedules: dict[str, ScheduleStats],
    scenario: Scenario,
    loop_lag: Histogram,
    cpu_share: float,
    wall_s: float,
) -> list[str]:
    """Why this run's client cannot be trusted to have applied the intended load."""
    load = scenario.load
    limit = float(load.max_schedule_lag_ms)
    reasons: list[str] = []
    for name, t in summary.get("transports", {}).items():
        sched = schedules.get(name)
        lag = t.get("schedule_lag_ms", {}).get("p99")
        if lag is not None and lag > limit:
            late = f" ({sched.late} of {sched.started} starts late)" if sched else ""
            reasons.append(
                f"{name}: schedule lag p99 {lag:.1f} ms exceeds load.max_schedule_lag_ms "
                f"{limit:g}{late}: the load generator fell behind"
            )
        if sched is not None and sched.dropped:
            reasons.append(
                f"{name}: {sched.dropped} of {sched.intended} intended starts dropped "
                f"(load.max_in_flight {load.max_in_flight} rollouts in flight)"
            )
    # Over a run shorter than a second p99 is one hiccup of a shared machine, not a stall.
    loop_p99 = loop_lag.percentile_ms(99) if wall_s >= LOOP_STALL_MIN_WALL_S else math.nan
    if loop_p99 > limit:
        reasons.append(
            f"client event loop stalled: wake-up lag p99 {loop_p99:.1f} ms exceeds "
            f"load.max_schedule_lag_ms {limit:g}"
        )
    if cpu_share > CPU_SATURATION_SHARE:
        reasons.append(f"client CPU saturated: {cpu_share:.0%} of one core over the run")
    return reasons
