"""Why a run's client cannot be trusted to have applied the intended load.

One set of rules for every kind of run (``run``, ``run --procs``, ``gate --ab``,
the Locust master): the starts came late (schedule lag p99 above
``load.max_schedule_lag_ms``) or were dropped (``load.max_in_flight``), a
measuring process's event loop stalled, or its CPU was saturated.  A reason
makes the run ``valid: false`` rather than reporting a slower system under test.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from harness.run.health import ClientHealth
from harness.run.schedule_stats import ScheduleStats
from harness.workload.scenario import Load

#: client CPU above this share of one core: the generator itself may be the bottleneck
CPU_SATURATION_SHARE = 0.95
#: over a shorter run p99 of the loop lag is one hiccup of a shared machine, not a stall
LOOP_STALL_MIN_WALL_S = 1.0


def schedule_reasons(
    summary: Mapping[str, Any], schedules: Mapping[str, ScheduleStats], load: Load
) -> list[str]:
    """Per transport: starts late at p99, or dropped for ``load.max_in_flight``."""
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
    return reasons


def client_reasons(client: ClientHealth, load: Load) -> list[str]:
    """One measuring process: its event loop stalled, or its CPU was saturated."""
    limit = float(load.max_schedule_lag_ms)
    prefix = f"{client.name}: " if client.name else ""
    reasons: list[str] = []
    loop_p99 = (
        client.loop_lag.percentile_ms(99) if client.wall_s >= LOOP_STALL_MIN_WALL_S else math.nan
    )
    if loop_p99 > limit:
        reasons.append(
            f"{prefix}client event loop stalled: wake-up lag p99 {loop_p99:.1f} ms exceeds "
            f"load.max_schedule_lag_ms {limit:g}"
        )
    if client.cpu_share > CPU_SATURATION_SHARE:
        reasons.append(
            f"{prefix}client CPU saturated: {client.cpu_share:.0%} of one core over the run"
        )
    return reasons


def validity_reasons(
    summary: Mapping[str, Any],
    schedules: Mapping[str, ScheduleStats],
    load: Load,
    clients: Iterable[ClientHealth],
) -> list[str]:
    reasons = schedule_reasons(summary, schedules, load)
    for client in clients:
        reasons += client_reasons(client, load)
    return reasons
