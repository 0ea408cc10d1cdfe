"""The loopbench locustfile's master, timed: what :mod:`.sim` runs as the real master.

Importing :mod:`harness.locust_driver.locustfile` registers its listeners, its user class
and its load shape unchanged; this file only adds clocks around what the master does:

* every message the master's one receiving greenlet handles (Locust's own and loopbench's),
  from the moment it starts handling it to the end; the ``loopbench_rows`` and
  ``loopbench_final`` stamps per worker, so :mod:`.sim` matches them with the fake workers'
  send stamps (``time.monotonic_ns`` is one clock for every process of the machine);
* the plan's generation (``generate_rollouts``), the results writer's ``add_turn`` /
  ``add_rollout`` (rows and flushes), the final merge (``MasterSide.finalize``, of which
  ``Accumulator.from_state`` and ``Accumulator.merge``, the HDR merges);
* the garbage collector's pauses (``gc.callbacks``): a full collection walks every object
  the process holds, the whole plan included, with the loop stopped;
* the process's CPU time at each report handled, and how late its gevent loop wakes from
  10 ms sleeps (the worker's watchdog, here on the master: anything that holds the loop
  delays every report behind it).

The figures go to the JSON file named by ``LOOPBENCH_MASTER_SIM_OUT`` when Locust quits.
"""

from __future__ import annotations

import gc
import json
import os
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
from locust import events
from locust.env import Environment
from locust.runners import MasterRunner

import harness.locust_driver.master as master_module
from harness.locust_driver.locustfile import LoopbenchAgent, ScenarioShape
from harness.locust_driver.protocol import MSG_FINAL, MSG_ROWS
from harness.metrics.summary import Accumulator
from harness.report.results import ResultsWriter
from harness.run.health import LOOP_WATCH_INTERVAL_S

__all__ = ["LoopbenchAgent", "ScenarioShape"]

OUT_ENV = "LOOPBENCH_MASTER_SIM_OUT"

#: message type -> handling times (ns)
_handled: dict[str, list[int]] = defaultdict(list)
#: message type -> worker -> [(start ns, end ns, rows, process CPU s)] for rows and finals
_stamps: dict[str, dict[str, list[tuple[int, int, int, float]]]] = {
    MSG_ROWS: defaultdict(list),
    MSG_FINAL: defaultdict(list),
}
#: what -> [calls, total ns]
_timed: dict[str, list[int]] = defaultdict(lambda: [0, 0])
_plans: dict[str, float] = {}
#: (monotonic ns at the end, generation, pause ns) of every garbage collection
_gc: list[tuple[int, int, int]] = []
_gc_start = [0]
#: (monotonic ns, how late the loop woke from a LOOP_WATCH_INTERVAL_S sleep, ns)
_loop_lag: list[tuple[int, int]] = []


def _cpu_now() -> float:
    t = os.times()
    return t.user + t.system


def _timing(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            slot = _timed[name]
            slot[0] += 1
            slot[1] += time.perf_counter_ns() - t0

    return timed


def _timed_plans(*args: Any, **kwargs: Any) -> Any:
    t0 = time.perf_counter()
    plans = _generate(*args, **kwargs)
    _plans.update(seconds=time.perf_counter() - t0, rollouts=len(plans))
    return plans


_generate = master_module.generate_rollouts
master_module.generate_rollouts = _timed_plans
# The writer and the merge, wherever the master calls them from.
for _cls, _names in (
    (ResultsWriter, ("add_turn", "add_rollout")),
    (Accumulator, ("merge",)),
    (master_module.MasterSide, ("finalize",)),
):
    for _name in _names:
        setattr(_cls, _name, _timing(f"{_cls.__name__}.{_name}", getattr(_cls, _name)))
_from_state = Accumulator.from_state.__func__  # type: ignore[attr-defined]
Accumulator.from_state = classmethod(_timing("Accumulator.from_state", _from_state))  # type: ignore[method-assign,assignment]


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    now = time.monotonic_ns()
    if phase == "start":
        _gc_start[0] = now
    else:
        _gc.append((now, int(info["generation"]), now - _gc_start[0]))


gc.callbacks.append(_on_gc)


def _watch_loop() -> None:
    interval_ns = round(LOOP_WATCH_INTERVAL_S * 1e9)
    while True:
        t = time.monotonic_ns()
        gevent.sleep(LOOP_WATCH_INTERVAL_S)
        now = time.monotonic_ns()
        _loop_lag.append((now, max(0, now - t - interval_ns)))


@events.init.add_listener
def _instrument(environment: Environment, **_kw: Any) -> None:
    runner = environment.runner
    if not isinstance(runner, MasterRunner):
        return
    handle = runner.handle_message

    def handle_timed(client_id: str, msg: Any) -> None:
        t0 = time.monotonic_ns()
        try:
            handle(client_id, msg)
        finally:
            t1 = time.monotonic_ns()
            _handled[msg.type].append(t1 - t0)
            per_node = _stamps.get(msg.type)
            if per_node is not None and isinstance(msg.data, dict):
                rows = len(msg.data.get("turns", ())) + len(msg.data.get("rollouts", ()))
                # The process's CPU time here too: a master that never runs out of messages
                # never lets the 1 s sampler run, so the CPU over the load comes from these.
                per_node[client_id].append((t0, t1, rows, _cpu_now()))

    runner.handle_message = handle_timed  # type: ignore[method-assign]
    gevent.spawn(_watch_loop)


@events.quit.add_listener
def _write(**_kw: Any) -> None:
    out = os.environ.get(OUT_ENV)
    if not out:
        return
    doc = {
        "handled_ns": dict(_handled),
        "stamps": {kind: dict(nodes) for kind, nodes in _stamps.items()},
        "timed_ns": dict(_timed),
        "plans": _plans,
        "loop_lag": _loop_lag,
        "gc": _gc,
    }
    Path(out).write_text(json.dumps(doc), encoding="utf-8")
