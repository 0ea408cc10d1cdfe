"""Agents per client core: the most closed-loop agents one client process keeps measuring well.

Each agent runs short rollouts back to back: small inputs, ~20-token outputs and a
tool time of about a second after every tool-calling turn, so one agent makes about
one turn per second.  One run per step, one transport at a time, through the real
runner (:func:`harness.run.runner.run_plans`) in this process, pinned to one core; the
reference server runs in its own process(es), pinned to another core, with a capacity
(API workers, engine slots, aggregate TPS, connection limits) far above what a few
thousand short streams need, so the client is what gives out first.

A step passes when the run is valid by loopbench's own rules
(:mod:`harness.run.validity`: errors, schedule lag, event-loop stalls, CPU
saturation) and the client-side TTFT error p99 is at most ``error_p99_max_ms``.  The
largest passing count is found with the goodput sweep's search
(:class:`~harness.run.goodput.GoodputSearch`: doubling, then bisection), bounded in
steps and in time.

What a step costs the client is measured around the run: the process's CPU time
(``os.times``, so set-up and the summary are in it too), the turns and the events it
received.  Events are counted from the turn records: every delta, plus the fixed
non-delta events of the reference server's responses (:data:`LIFECYCLE_TOOL_TURN` for
a tool-calling turn: created, in_progress, output_item.added,
function_call_arguments.done, output_item.done, completed; :data:`LIFECYCLE_TEXT_TURN`
for the final text answer, which adds content_part.added/done and output_text.done
but no function_call_arguments.done).  The server's CPU (its process tree, from
``/proc``) is measured over the same run: when it nears one core, the server is what
caps the count and the client figure is a lower bound.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import resource
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.selfbench.cpu_steal import read_cpu_times, steal_percent
from bench.selfbench.figures import Figure, at_least, figure
from bench.selfbench.timing import _scenario
from harness.run.embedded import server_child
from harness.run.event_loop import run_async
from harness.run.goodput import GoodputSearch
from harness.run.proc_cpu import tree_cpu_seconds
from harness.run.runner import RunOptions, run_plans
from harness.workload.plan import RolloutPlan
from harness.workload.records import TurnRecord
from harness.workload.rollout import generate_rollouts

#: non-delta events of a tool-calling turn and of a text answer on the reference server
LIFECYCLE_TOOL_TURN = 6
LIFECYCLE_TEXT_TURN = 8
#: the metric the verdict reads (branch srvlate: measured − modelled − server lateness), and
#: the one read while a summary does not carry it yet (measured − modelled)
CLIENT_ERROR_METRIC = "client_error_ms"
FALLBACK_ERROR_METRIC = "measurement_error_ms"
#: issue #20's target: closed-loop agents (~1 turn/s each) one client core sustains
AGENTS_PER_CORE_MIN = 1000
#: a server that is not the bottleneck for thousands of short concurrent streams
CAPACITY_OVERRIDES = {
    "api.workers": "100000",
    "engine.max_streams": "100000",
    "engine.aggregate_tps": "1000000000000",
}
CAPACITY_ARGS = (
    "--max-connections",
    "1000000",
    "--max-connections-per-client",
    "0",
)


@dataclass(frozen=True, slots=True)
class AgentsOptions:
    """Sizes of the agents step; :meth:`quick` is the reduced one the tests use."""

    transports: tuple[str, ...] = ("ws", "http")
    start: int = 250
    max_agents: int = 4096
    max_steps: int = 9
    #: per transport: no new step starts after this many seconds
    budget_s: float = 240.0
    #: the search stops when the bracket is this fraction of the passing count
    resolution: float = 0.1
    #: runs of a failing step before it counts as failed: on a shared machine another
    #: process only ever makes a run worse, so one passing run shows the client can
    #: (the failed runs are kept in the step's ``failed_trials``)
    trials: int = 2
    #: how long each step starts rollouts (after the first wave, which is warm-up)
    step_seconds: float = 10.0
    tool_calls: int = 4
    tool_ms: tuple[float, float] = (800.0, 1200.0)
    output_tokens: int = 20
    error_metric: str = CLIENT_ERROR_METRIC
    error_p99_max_ms: float = 2.0
    #: a step passes only if the agents kept about their pace: turns/s in the steady window at
    #: least this share of agents / turn period (a saturated server slows every agent down,
    #: and a count that no longer makes ~1 turn/s each is not "sustained")
    min_rate_share: float = 0.8
    #: server processes (``--workers``); they all share the server's core
    server_workers: int = 1
    server_overrides: Mapping[str, str] = field(default_factory=lambda: dict(CAPACITY_OVERRIDES))
    server_args: tuple[str, ...] = CAPACITY_ARGS
    pin: bool = True

    @classmethod
    def quick(cls) -> AgentsOptions:
        return cls(
            # two steps a transport (4, then 8): the quick run's claim is every figure, and
            # the search itself is tests/bench/selfbench/test_agents.py's
            start=4,
            max_agents=8,
            max_steps=4,
            budget_s=60.0,
            resolution=0.0,
            trials=1,
            step_seconds=1.0,
            tool_ms=(40.0, 80.0),
            # turns take as long as the tool time here: the pace rule would measure the turns
            min_rate_share=0.0,
        )

    @property
    def turn_period_s(self) -> float:
        return (self.tool_ms[0] + self.tool_ms[1]) / 2000


@dataclass(slots=True)
class TurnCounts:
    """What the client received over one step (every turn, warm-up included)."""

    final_index: int
    turns: int = 0
    events: int = 0
    #: when each successful turn ended and its events: the steady figures count a window
    done_ns: list[int] = field(default_factory=list)
    done_events: list[int] = field(default_factory=list)

    def add(self, rec: TurnRecord) -> None:
        self.turns += 1
        lifecycle = (
            LIFECYCLE_TEXT_TURN if rec.turn_index == self.final_index else LIFECYCLE_TOOL_TURN
        )
        events = rec.delta_events + (lifecycle if rec.ok else 0)
        self.events += events
        if rec.ok:
            self.done_ns.append(rec.done_ns)
            self.done_events.append(events)

    def window(self, start_ns: int, end_ns: int) -> tuple[int, int]:
        """(turns, events) of the successful turns that ended in [start_ns, end_ns)."""
        turns = events = 0
        for t, e in zip(self.done_ns, self.done_events, strict=True):
            if start_ns <= t < end_ns:
                turns += 1
                events += e
        return turns, events

    def rate(self, start_ns: int, end_ns: int) -> float | None:
        """Turns per second that ended in [start_ns, end_ns)."""
        if end_ns <= start_ns:
            return None
        return self.window(start_ns, end_ns)[0] / ((end_ns - start_ns) / 1e9)


class CpuWindow:
    """This process's CPU seconds (and the server's) at two instants, read by a thread.

    The run's own CPU time includes its set-up and its summary, which at a few agents are
    most of it; the steady cost is what the client spends between ``start_ns`` and
    ``end_ns`` (``perf_counter_ns``), while every agent is past its warm-up rollout.
    """

    def __init__(self, start_ns: int, end_ns: int, server_pid: int | None) -> None:
        self.start_ns, self.end_ns, self.server_pid = start_ns, end_ns, server_pid
        self.reads: list[tuple[int, float, float | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="selfbench-cpu", daemon=True)

    def _read(self) -> None:
        t = os.times()
        server = tree_cpu_seconds(self.server_pid) if self.server_pid else None
        self.reads.append((time.perf_counter_ns(), t.user + t.system, server))

    def _run(self) -> None:
        for at in (self.start_ns, self.end_ns):
            if self._stop.wait(max(0.0, (at - time.perf_counter_ns()) / 1e9)):
                return
            self._read()

    def __enter__(self) -> CpuWindow:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def measured(self) -> tuple[float, float, float | None] | None:
        """(wall s, client CPU s, server CPU s) over the window; None if the run ended first."""
        if len(self.reads) < 2:
            return None
        (t0, c0, s0), (t1, c1, s1) = self.reads
        server = s1 - s0 if s0 is not None and s1 is not None else None
        return (t1 - t0) / 1e9, c1 - c0, server


@dataclass(frozen=True, slots=True)
class AgentsStep:
    """One step of the search: a run of ``agents`` agents over one transport."""

    transport: str
    agents: int
    passed: bool
    valid: bool
    invalid_reasons: list[str]
    metric: str
    error_p99_ms: float | None
    error_p50_ms: float | None
    turns_per_s: float | None
    client_cpu_share: float
    cpu_us_per_turn: float | None
    cpu_us_per_event: float | None
    server_cpu_share: float | None
    #: what the CPU figures cover: "steady" (the window after warm-up, before the agents
    #: stop) or "run" (the whole run, set-up and summary included: the window was not reached)
    cpu_window: str
    seconds: float
    loop_lag_p99_ms: float | None
    #: p99 of how late the server wrote first tokens (branch srvlate's ``server_late_ms``;
    #: None while the summary does not carry it)
    server_late_p99_ms: float | None = None
    #: share of CPU time the hypervisor took during the step (/proc/stat), for the noise
    cpu_steal_pct: float | None = None
    #: the earlier runs of this step that failed (their figures), when it was run again
    failed_trials: tuple[dict[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def sustained(
    opts: AgentsOptions,
    agents: int,
    *,
    valid: bool,
    error_p99_ms: float | None,
    turns_per_s: float | None,
) -> bool:
    """Whether one client sustained ``agents``: a valid run, the error bound, and the pace kept.

    ``turns_per_s`` None (the steady window was never reached) leaves the pace unjudged.
    """
    if not valid or error_p99_ms is None or error_p99_ms > opts.error_p99_max_ms:
        return False
    return turns_per_s is None or turns_per_s >= opts.min_rate_share * agents / opts.turn_period_s


def scenario_fields(
    opts: AgentsOptions, agents: int, transport: str
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The step's scenario: (name, rollout, load) sections."""
    # Enough rollouts that the step ends on time, not on a count: an agent makes one
    # rollout per (tool_calls + 1) turn periods.
    per_agent = 2 + int(opts.step_seconds / (opts.turn_period_s * opts.tool_calls)) + 1
    lo, hi = opts.tool_ms
    rollout = {
        "count": agents * per_agent,
        "system_tokens": 40,
        "tool_schema_tokens": 40,
        "user_prompt_tokens": 20,
        "tool_calls": opts.tool_calls,
        "tool_output_tokens": 20,
        "tool_latency_ms": {"dist": "uniform", "min": lo, "max": hi} if hi > lo else lo,
        "step_output_tokens": opts.output_tokens,
        "final_answer_tokens": opts.output_tokens,
    }
    load = {
        "mode": "closed",
        "concurrency": agents,
        # The first wave (one rollout per agent, started over the ramp) is warm-up: it
        # opens every connection and is left out of the statistics.
        "warmup_rollouts": agents,
        "duration_s": opts.step_seconds + opts.turn_period_s * (opts.tool_calls + 2),
    }
    return f"selfbench-agents-{transport}-{agents}", rollout, load


def _plans(opts: AgentsOptions, agents: int, transport: str) -> tuple[Any, list[RolloutPlan]]:
    name, rollout, load = scenario_fields(opts, agents, transport)
    scenario = _scenario(name, [transport], rollout, load)
    plans = generate_rollouts(scenario)
    # Ramp-up: agent i's first request waits i/N of a tool time, so the agents start spread
    # over one turn period instead of all at once (the closed loop hands rollout i to agent i).
    ramp_ms = opts.turn_period_s * 1000
    for i in range(min(agents, len(plans))):
        plan = plans[i]
        first = dataclasses.replace(plan.turns[0], think_ms=ramp_ms * i / agents)
        plans[i] = dataclasses.replace(plan, turns=(first, *plan.turns[1:]))
    return scenario, plans


def run_step(
    url: str, opts: AgentsOptions, transport: str, agents: int, server_pid: int | None
) -> AgentsStep:
    """One run of ``agents`` agents over ``transport``; its verdict and its client cost."""
    scenario, plans = _plans(opts, agents, transport)
    counts = TurnCounts(final_index=opts.tool_calls)
    with tempfile.TemporaryDirectory(prefix="loopbench-selfbench-") as tmp:
        run_opts = RunOptions(
            transports=[transport],
            target=url,
            results_root=Path(tmp),
            run_id=scenario.name,
            progress=False,
            render=False,
            turn_hook=counts.add,
        )
        srv0 = tree_cpu_seconds(server_pid) if server_pid else None
        steal0 = read_cpu_times()
        cpu0, t0 = os.times(), time.perf_counter()
        t0_ns = time.perf_counter_ns()
        # The steady window: from the end of the warm-up wave (the ramp, then one rollout)
        # to the time the closed loop stops starting rollouts (after it, agents drop out).
        rollout_s = opts.turn_period_s * (opts.tool_calls + 1)
        win0 = t0_ns + round((opts.turn_period_s + rollout_s) * 1e9)
        win1 = t0_ns + round((scenario.load.duration_s or 0.0) * 1e9)
        with CpuWindow(win0, win1, server_pid) as steady:
            result = run_async(
                run_plans(
                    scenario, f"<selfbench {scenario.name}>", plans, url, run_opts, embedded=True
                )
            )
            result.stop_if_interrupted()
        cpu1, wall = os.times(), time.perf_counter() - t0
        srv1 = tree_cpu_seconds(server_pid) if server_pid else None
        steal = steal_percent(steal0, read_cpu_times())
    summary = result.summary
    cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    turns, events = counts.turns, counts.events
    server_s = srv1 - srv0 if srv0 is not None and srv1 is not None else None
    cpu_window = "run"
    if (m := steady.measured) is not None and counts.window(win0, win1)[0]:
        wall, cpu_s, server_s = m
        turns, events = counts.window(win0, win1)
        cpu_window = "steady"
    return step_from_summary(
        opts,
        transport,
        agents,
        summary,
        rate=counts.rate(win0, win1),
        cpu=(wall, cpu_s, server_s),
        turns=turns,
        events=events,
        cpu_window=cpu_window,
        seconds=time.perf_counter() - t0,
        steal=steal,
    )


def step_from_summary(
    opts: AgentsOptions,
    transport: str,
    agents: int,
    summary: Mapping[str, Any],
    *,
    rate: float | None,
    cpu: tuple[float, float, float | None] | None,
    turns: int,
    events: int,
    cpu_window: str,
    seconds: float,
    steal: float | None,
) -> AgentsStep:
    """A step's verdict from its run's summary, and its cost: ``cpu`` is (wall s, client CPU
    s, server CPU s) over the window in which ``turns`` turns and ``events`` events ended."""
    t = summary.get("transports", {}).get(transport, {})
    metric = opts.error_metric if opts.error_metric in t else FALLBACK_ERROR_METRIC
    err = t.get(metric) or {}
    p99 = err.get("p99")
    valid = bool(summary.get("valid"))
    client = summary.get("client") or {}
    wall, cpu_s, server_s = cpu if cpu is not None else (0.0, 0.0, None)
    return AgentsStep(
        transport=transport,
        agents=agents,
        passed=sustained(opts, agents, valid=valid, error_p99_ms=p99, turns_per_s=rate),
        valid=valid,
        invalid_reasons=list(summary.get("invalid_reasons") or []),
        metric=metric,
        error_p99_ms=p99,
        error_p50_ms=err.get("p50"),
        turns_per_s=round(rate, 1) if rate is not None else None,
        client_cpu_share=round(cpu_s / wall, 3) if wall else 0.0,
        cpu_us_per_turn=round(cpu_s / turns * 1e6, 1) if turns and cpu_s else None,
        cpu_us_per_event=round(cpu_s / events * 1e6, 2) if events and cpu_s else None,
        server_cpu_share=round(server_s / wall, 3) if server_s is not None and wall else None,
        cpu_window=cpu_window,
        seconds=round(seconds, 2),
        loop_lag_p99_ms=(client.get("loop_lag_ms") or {}).get("p99"),
        server_late_p99_ms=(t.get("server_late_ms") or {}).get("p99"),
        cpu_steal_pct=steal,
    )


def _pin(cpus: set[int]) -> None:
    """Pin every thread of this process (``sched_setaffinity(0)`` moves only the caller)."""
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(tid), cpus)


def _cores() -> tuple[set[int], set[int]] | None:
    """(client core, server core), or None where there is no second core to pin to."""
    if not hasattr(os, "sched_getaffinity") or not Path("/proc/self/task").is_dir():
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    return {cpus[0]}, {cpus[-1]}


def raise_fd_limit() -> tuple[int, int]:
    """Raise this process's open-file soft limit to its hard limit; (soft, hard) after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


@contextlib.contextmanager
def agents_server(opts: AgentsOptions) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """The reference server on its own core and this process on another, for the step.

    Yields (url, server pid, placement facts).  The server inherits the affinity this
    process has when it starts (and so do the workers it forks); this process then moves
    to the client core, and back to every core it had when the step ends.
    """
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    cores = _cores() if opts.pin else None
    args = ["--host", "127.0.0.1", "--port", "0", "--seed", "0"]
    for key, value in opts.server_overrides.items():
        args += ["--set", f"{key}={value}"]
    args += list(opts.server_args)
    with tempfile.TemporaryDirectory(prefix="loopbench-selfbench-") as tmp:
        # More than one worker process needs a store they share.
        store = ":memory:" if opts.server_workers <= 1 else str(Path(tmp) / "store.sqlite")
        args += ["--store", store, "--workers", str(opts.server_workers)]
        # Before the server starts, so that it inherits the raised limit too.
        open_files = raise_fd_limit()[0]
        try:
            if cores is not None:
                _pin(cores[1])
            with server_child(args) as child:
                if cores is not None:
                    _pin(cores[0])
                facts = {
                    "client_core": sorted(cores[0]) if cores else None,
                    "server_core": sorted(cores[1]) if cores else None,
                    "server_workers": opts.server_workers,
                    "open_files_limit": open_files,
                }
                yield child.ready, child.proc.pid, facts
        finally:
            if before is not None:
                _pin(before)


def search_agents(
    url: str,
    opts: AgentsOptions,
    transport: str,
    server_pid: int | None,
    say: Callable[[str], None] = lambda _: None,
    step_fn: Callable[[str, AgentsOptions, str, int, int | None], AgentsStep] = run_step,
    what: str = "agents per core",
) -> tuple[GoodputSearch, list[AgentsStep]]:
    """The goodput sweep's search over the agent count, bounded by steps and by ``budget_s``."""
    search = GoodputSearch(
        float(opts.start),
        float(opts.max_agents),
        integer=True,
        max_steps=opts.max_steps,
        rel_resolution=opts.resolution,
    )
    steps: list[AgentsStep] = []
    deadline = time.perf_counter() + opts.budget_s
    while (load := search.next_load()) is not None and time.perf_counter() < deadline:
        agents = int(load)
        say(f"{what}, {transport}: step {len(steps) + 1}, {agents} agents")
        failed: list[dict[str, Any]] = []
        while True:
            step = step_fn(url, opts, transport, agents, server_pid)
            if step.passed or len(failed) + 1 >= max(1, opts.trials):
                break
            failed.append(step.as_dict())
            say(f"  {agents} agents failed ({step.metric} p99 {step.error_p99_ms} ms); again")
        step = dataclasses.replace(step, failed_trials=tuple(failed))
        steps.append(step)
        search.record(load, step.passed)
        say(
            f"  {agents} agents: {step.metric} p99 {step.error_p99_ms} ms, "
            f"{'valid' if step.valid else 'invalid'}, {step.turns_per_s} turns/s, client CPU "
            f"{step.client_cpu_share:.0%}, server CPU {step.server_cpu_share} -> "
            f"{'pass' if step.passed else 'fail'}"
        )
    return search, steps


@dataclass(frozen=True, slots=True)
class AgentsAnswer:
    transport: str
    agents: int | None
    at: AgentsStep | None
    search: GoodputSearch
    steps: list[AgentsStep]

    def as_dict(self) -> dict[str, Any]:
        return {
            "agents": self.agents,
            "lowest_fail": self.search.lowest_fail,
            "converged": self.search.converged,
            "resolution": self.search.resolution,
            "at_answer": self.at.as_dict() if self.at else None,
            "steps": [s.as_dict() for s in self.steps],
        }


#: what the client spent at the answer: (AgentsStep attribute, what it is, unit, digits)
_COSTS = (
    ("turns_per_s", "turns/s", "turns/s", 1),
    ("client_cpu_share", "client CPU share of its core", "", 3),
    ("cpu_us_per_turn", "client CPU per turn", "µs", 1),
    ("cpu_us_per_event", "client CPU per event", "µs", 2),
)


def agents_figures(
    ans: AgentsAnswer, bound_ms: float, key: str = "agents", what: str = "agents per client core"
) -> list[Figure]:
    """The answer of one transport's search, and what the client spent at it."""
    t = ans.transport
    # With no passing count, the costs are those of the smallest count tried.
    at = ans.at or min(ans.steps, key=lambda s: s.agents, default=None)
    metric = at.metric if at else "client_error_ms"
    note = "" if ans.at or at is None else f"{t}: no count passed; costs at {at.agents} agents"
    label = f"{t}, at the answer"
    return [
        figure(
            f"{key}.{t}",
            f"{what}, {t} (~1 turn/s each, valid, {metric} p99 <= {bound_ms:g} ms)",
            float(ans.agents or 0),
            "agents",
            at_least(AGENTS_PER_CORE_MIN, f">= {AGENTS_PER_CORE_MIN:,}"),
            digits=0,
        ),
        *(
            figure(
                f"{key}.{t}.{attr}",
                f"{what}, {label}",
                getattr(at, attr) if at else None,
                unit,
                note=note,
                digits=digits,
            )
            for attr, what, unit, digits in _COSTS
        ),
    ]


def measure_agents(
    opts: AgentsOptions, say: Callable[[str], None] = lambda _: None
) -> tuple[list[AgentsAnswer], dict[str, Any]]:
    """Per transport, the largest passing agent count and the step that measured it."""
    answers: list[AgentsAnswer] = []
    with agents_server(opts) as (url, pid, facts):
        for transport in opts.transports:
            search, steps = search_agents(url, opts, transport, pid, say)
            best = search.best
            at = next((s for s in steps if s.passed and s.agents == best), None)
            answers.append(AgentsAnswer(transport, int(best) if best else None, at, search, steps))
    return answers, facts


__all__: Sequence[str] = (
    "AgentsAnswer",
    "AgentsOptions",
    "AgentsStep",
    "TurnCounts",
    "agents_figures",
    "agents_server",
    "measure_agents",
    "raise_fd_limit",
    "run_step",
    "search_agents",
)
