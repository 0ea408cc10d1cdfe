"""Seeded rollouts over one blocking session of the Locust driver, as one Locust user runs them.

Shared by ``gevent_edge.py`` (a gevent-patched child process, which imports this file from
its own folder) and ``tests/locust/test_sessions.py`` (plain blocking sockets).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from harness.client.options import TransportOptions
from harness.client.rollout import TurnSink
from harness.locust_driver.agent_loop import run_rollout
from harness.locust_driver.net import now_ns
from harness.locust_driver.sessions import make_session
from harness.workload.plan import RolloutPlan
from harness.workload.records import RolloutRecord


def replay(
    name: str,
    options: TransportOptions,
    plans: Iterable[RolloutPlan],
    on_turn: TurnSink,
    sleep: Callable[[float], object],
) -> Iterator[tuple[RolloutPlan, RolloutRecord]]:
    """Each plan in order over one ``name`` session, one rollout at a time; closed at the end."""
    session = make_session(name, options)
    try:
        for plan in plans:
            yield (
                plan,
                run_rollout(
                    session,
                    plan,
                    intended_start_ns=now_ns(),
                    round_index=0,
                    model="sim-model",
                    on_turn=on_turn,
                    sleep=sleep,
                ),
            )
    finally:
        session.close()
