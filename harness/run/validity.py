"""Why a run cannot be trusted, judged while it ends: the shared rules plus what only it sees.

The rules are :mod:`harness.metrics.validity`'s, the ones ``gate`` and ``compare`` apply
to the written ``summary.json``; what only the running process has is added here: the
error kinds' examples, how many starts came late or were dropped (``load.max_in_flight``),
each measuring process's event loop and CPU, and why the run stopped early.  Every kind of
run (``run``, ``run --procs``, ``gate --ab``, the Locust master, each ``sweep`` point) ends
here through :class:`harness.run.measurement.Measurement`.  A reason makes the run
``valid: false`` rather than reporting a slower (or an empty) system under test.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from harness.metrics.results_model import Summary, as_summary
from harness.metrics.validity import Limits, completed_turns, schedule_reason, transport_reasons
from harness.metrics.validity import client_reasons as _client_reasons
from harness.report.error_summary import kinds_text
from harness.run.health import ClientHealth
from harness.run.schedule_stats import ScheduleStats
from harness.workload.scenario import Load


def schedule_reasons(
    summary: Summary, schedules: Mapping[str, ScheduleStats], load: Load
) -> list[str]:
    """Per transport: starts late at p99, or dropped for ``load.max_in_flight``."""
    reasons: list[str] = []
    for name, t in summary.transports.items():
        sched = schedules.get(name)
        late = f"{sched.late} of {sched.started} starts late" if sched else ""
        found = schedule_reason(name, t.schedule_lag_p99_ms, float(load.max_schedule_lag_ms), late)
        if found:
            reasons.append(found)
        if sched is not None and sched.dropped:
            reasons.append(
                f"{name}: {sched.dropped} of {sched.intended} intended starts dropped "
                f"(load.max_in_flight {load.max_in_flight} rollouts in flight)"
            )
    return reasons


def client_reasons(client: ClientHealth, load: Load, turns: int | None = None) -> list[str]:
    """One measuring process: its event loop stalled, or its CPU was saturated."""
    return _client_reasons(
        client.name,
        loop_lag_p99_ms=client.loop_lag.percentile_ms(99),
        cpu_share=client.cpu_share,
        wall_s=client.wall_s,
        limit_ms=float(load.max_schedule_lag_ms),
        turns=turns,
    )


def validity_reasons(
    document: Summary | Mapping[str, Any],
    schedules: Mapping[str, ScheduleStats],
    load: Load,
    clients: Iterable[ClientHealth],
    errors: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
    stopped: Iterable[str] = (),
) -> list[str]:
    """Every reason, the target's errors first (the cause a user acts on; the rest often
    follow from them), then why the run ``stopped`` early, the schedule, the client.

    ``errors`` is the summary's ``errors`` block (kinds by count, one example each);
    ``document`` the summary so far (read through :class:`Summary`).
    """
    summary = as_summary(document) or Summary()
    details = {name: kinds_text(kinds) for name, kinds in (errors or {}).items()}
    stopped = list(stopped)
    # A run stopped early lacks rollouts because it stopped: that is its reason, said once.
    reasons = transport_reasons(summary, Limits.of_load(load), details, count_rollouts=not stopped)
    reasons += stopped
    reasons += schedule_reasons(summary, schedules, load)
    turns = completed_turns(summary)
    for client in clients:
        reasons += client_reasons(client, load, turns)
    return reasons
