"""Why a run cannot be trusted: the target failed, or the client did not apply the load.

One set of rules for every kind of run (``run``, ``run --procs``, ``gate --ab``,
the Locust master), in the order a user should read them: a transport's turns
failed more often than ``load.max_error_rate`` (or none succeeded) — the real
cause when the target is dead or speaks another protocol; the starts came late
(schedule lag p99 above ``load.max_schedule_lag_ms``) or were dropped
(``load.max_in_flight``); a measuring process's event loop stalled, or its CPU
was saturated.  A reason makes the run ``valid: false`` rather than reporting a
slower (or an empty) system under test.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from harness.report.error_summary import kinds_text
from harness.run.health import ClientHealth
from harness.run.schedule_stats import ScheduleStats
from harness.wire.plural import counted
from harness.workload.scenario import Load

#: client CPU above this share of one core: the generator itself may be the bottleneck
CPU_SATURATION_SHARE = 0.95
#: The client's health (CPU share, loop lag) is judged only over a measured window at least
#: this long and with at least MIN_JUDGED_TURNS completed turns: over a few milliseconds the
#: first connections and imports dominate the CPU share (a run against a dead target
#: measured "193 % of one core"), and p99 of a handful of wake-ups is one hiccup of a
#: shared machine, not a stall.  Such a run is judged by its error rate instead.  A second
#: holds a hundred watchdog wake-ups, enough for a p99; the shortest real scenarios
#: (tests/harness/test_lifecycle.py: 8 rollouts at 10/s) measure about that long.
MIN_JUDGED_WALL_S = 1.0
MIN_JUDGED_TURNS = 10


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


def error_reasons(
    summary: Mapping[str, Any], errors: Mapping[str, Mapping[str, Mapping[str, Any]]], load: Load
) -> list[str]:
    """Per transport: more failed turns than ``load.max_error_rate``, or no successful turn.

    ``errors`` is the summary's ``errors`` block (kinds by count, one example each).
    """
    reasons: list[str] = []
    for name, t in summary.get("transports", {}).items():
        turns = int(t.get("turns", {}).get("count", 0))
        failed = int(t.get("turns", {}).get("errors", 0))
        if not turns or not failed:
            continue
        rate = failed / turns
        if failed < turns and rate <= load.max_error_rate:
            continue
        why = (
            "no turn succeeded"
            if failed == turns
            else f"above load.max_error_rate {load.max_error_rate:.0%}"
        )
        kinds = kinds_text(errors.get(name, {}))
        detail = f" ({kinds})" if kinds else ""
        reasons.append(f"{name}: {rate:.0%} of {counted(turns, 'turn')} failed, {why}{detail}")
    return reasons


def completed_turns(summary: Mapping[str, Any]) -> int:
    """Successful turns over every transport: how much the client's health was judged over."""
    return sum(
        int(t.get("turns", {}).get("count", 0)) - int(t.get("turns", {}).get("errors", 0))
        for t in summary.get("transports", {}).values()
    )


def client_reasons(client: ClientHealth, load: Load, turns: int | None = None) -> list[str]:
    """One measuring process: its event loop stalled, or its CPU was saturated.

    Judged only over a window that means something (:data:`MIN_JUDGED_WALL_S`, and
    ``turns`` completed turns if given, at least :data:`MIN_JUDGED_TURNS`).
    """
    if client.wall_s < MIN_JUDGED_WALL_S or (turns is not None and turns < MIN_JUDGED_TURNS):
        return []
    limit = float(load.max_schedule_lag_ms)
    prefix = f"{client.name}: " if client.name else ""
    reasons: list[str] = []
    loop_p99 = client.loop_lag.percentile_ms(99)
    if math.isfinite(loop_p99) and loop_p99 > limit:
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
    errors: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
    stopped: Iterable[str] = (),
) -> list[str]:
    """Every reason, the target's errors first (the cause a user acts on; the rest often
    follow from them), then why the run ``stopped`` early, the schedule, the client."""
    reasons = error_reasons(summary, errors or {}, load) + list(stopped)
    reasons += schedule_reasons(summary, schedules, load)
    turns = completed_turns(summary)
    for client in clients:
        reasons += client_reasons(client, load, turns)
    return reasons
