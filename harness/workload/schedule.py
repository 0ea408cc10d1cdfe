"""Open-loop arrival plans: when each rollout is *intended* to start.

Open-loop latency is measured from the intended start, so the plan is computed
up front from the scenario and a seeded generator, never from what the system
under test did (that is what keeps the measurement free of coordinated
omission).

Time-varying rates (stages and ramps) use the time-rescaling construction: a
unit-rate renewal process is generated in "operational time" ``Λ`` and mapped
back through the inverse of ``Λ(t) = ∫₀ᵗ rate(u) du``.  For a constant rate this
is exactly a renewal process with mean gap ``1/rate``; the gap law (constant,
exponential, gamma of a given CV) is kept by the mapping.  The first base start
is at ``Λ = 0``, i.e. as soon as the rate is positive, so a run never begins
with an idle gap.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from harness.workload.scenario import MAX_OPEN_LOOP_ROLLOUTS, Arrival, Load, Stage

NS_PER_S = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Start:
    """One intended start: offset from the run start, and what put it there."""

    offset_ns: int
    source: str  # "closed", "base" or "burst"
    burst: int | None = None  # index into load.bursts for burst starts


@dataclass(frozen=True, slots=True)
class _Segment:
    t0: float
    duration: float  # math.inf for an open-ended tail
    r0: float
    r1: float

    @property
    def area(self) -> float:
        if math.isinf(self.duration):
            return math.inf if self.r0 > 0 else 0.0
        return (self.r0 + self.r1) / 2 * self.duration

    def time_at(self, area: float) -> float:
        """Time offset within the segment at which ``area`` arrivals' worth has accumulated."""
        if area <= 0:
            return 0.0
        if math.isinf(self.duration) or self.r0 == self.r1:
            return area / self.r0
        k = (self.r1 - self.r0) / (2 * self.duration)
        # Root of k·τ² + r0·τ − area = 0 in the form that stays accurate when k → 0.
        return 2 * area / (self.r0 + math.sqrt(max(self.r0 * self.r0 + 4 * k * area, 0.0)))


def _segments(load: Load) -> list[_Segment]:
    out: list[_Segment] = []
    t = 0.0
    for stage in load.stages:
        out.append(_Segment(t, stage.duration_s, stage.rate, stage.final_rate))
        t += stage.duration_s
    tail = load.tail_rate
    if tail is not None:
        out.append(_Segment(t, math.inf, tail, tail))
    return out


def _unit_gaps(load: Load, rng: random.Random) -> Iterator[float]:
    """Inter-arrival gaps of a unit-rate process with the scenario's gap law."""
    process = load.arrival.process if load.arrival is not None else "poisson"
    if process == "constant":
        while True:
            yield 1.0
    elif process == "poisson":
        while True:
            yield rng.expovariate(1.0)
    else:
        assert load.arrival is not None
        k = load.arrival.gamma_shape
        while True:
            yield rng.gammavariate(k, 1.0 / k)


def _base_times(load: Load, count: int, rng: random.Random) -> list[float]:
    segments = _segments(load)
    horizon = load.duration_s if load.duration_s is not None else math.inf
    limit = MAX_OPEN_LOOP_ROLLOUTS if load.duration_s is not None else count
    times: list[float] = []
    if limit <= 0 or not segments:
        return times
    gaps = _unit_gaps(load, rng)
    seg_i = 0
    used = 0.0  # operational time consumed by segments before seg_i
    target = 0.0
    while True:
        while seg_i < len(segments):
            seg = segments[seg_i]
            # A zero-area segment (a pause) cannot hold an arrival, even at Λ offset 0.
            if seg.area > 0 and target - used <= seg.area:
                break
            used += seg.area
            seg_i += 1
        if seg_i == len(segments):
            return times
        seg = segments[seg_i]
        t = seg.t0 + seg.time_at(target - used)
        if t >= horizon:
            return times
        if len(times) >= limit:
            if load.duration_s is not None:
                raise ValueError(
                    f"open-loop schedule exceeds {MAX_OPEN_LOOP_ROLLOUTS} rollouts; lower the rate"
                )
            return times
        times.append(t)
        target += next(gaps)


def _burst_times(load: Load) -> list[tuple[float, int]]:
    # Mid-points of M equal slices: evenly spread and strictly inside the window (all at
    # `at_s` when the window has no width).
    return [
        (burst.at_s + burst.over_s * (i + 0.5) / burst.extra, b_i)
        for b_i, burst in enumerate(load.bursts)
        for i in range(burst.extra)
    ]


def throughput_load(load: Load, mean_output_tokens: float) -> Load:
    """The open-loop load equivalent to a throughput target.

    Each rollout produces ``mean_output_tokens`` on average, so an aggregate of
    ``tps`` tokens/s needs ``tps / mean_output_tokens`` rollouts/s (Little's
    law, steady state).  TPS bursts become constant-rate stages; the base rate
    is the tail after them.
    """
    if load.throughput is None:
        raise ValueError("throughput_load: load.throughput is not set")
    if mean_output_tokens <= 0:
        raise ValueError(
            f"mean_output_tokens: expected a positive number, got {mean_output_tokens}"
        )
    target = load.throughput
    base = target.tps / mean_output_tokens
    stages: list[Stage] = []
    t = 0.0
    for burst in sorted(target.bursts, key=lambda b: b.at_s):
        if burst.at_s > t:
            stages.append(Stage(duration_s=burst.at_s - t, rate=base))
        stages.append(Stage(duration_s=burst.over_s, rate=burst.tps / mean_output_tokens))
        t = burst.at_s + burst.over_s
    process = load.arrival.process if load.arrival is not None else "poisson"
    shape = (
        load.arrival.model_dump(include={"cv", "burstiness"}, exclude_none=True)
        if load.arrival
        else {}
    )
    return load.model_copy(
        update={
            "mode": "open",
            "stages": stages,
            "arrival": Arrival(process=process, rate=base, **shape),
        }
    )


def schedule_starts(
    load: Load, count: int, rng: random.Random, mean_output_tokens: float | None = None
) -> list[Start]:
    """Intended starts, sorted, tagged with where they came from.

    Closed loop: ``count`` starts at 0 (agents start rollouts when a slot frees).
    Open loop: base arrivals until ``duration_s`` (if set) or ``count`` starts,
    or the end of the stages when no ``arrival.rate`` follows them; plus every
    burst's ``extra`` starts (bursts add to ``count``).  Throughput mode: the
    open loop of :func:`throughput_load` (needs ``mean_output_tokens``).
    """
    if load.mode == "closed":
        return [Start(0, "closed") for _ in range(count)]
    if load.mode == "throughput":
        if mean_output_tokens is None:
            raise ValueError("schedule_starts: throughput mode needs mean_output_tokens")
        load = throughput_load(load, mean_output_tokens)
    starts = [Start(round(t * NS_PER_S), "base") for t in _base_times(load, count, rng)]
    starts += [Start(round(t * NS_PER_S), "burst", b) for t, b in _burst_times(load)]
    # Stable sort: at equal offsets a base start stays ahead of a burst start.
    starts.sort(key=lambda s: s.offset_ns)
    return starts
