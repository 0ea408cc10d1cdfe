"""Run a scenario: the same seeded rollouts over each transport, records streamed to disk.

This is the asyncio orchestration layer.  It owns the clock of the run
(intended starts, schedule lag), hands records to the results writer as they
arrive (so an interrupted run keeps what it measured) and to the accumulator
that builds the summary.  Statistics and file formats live elsewhere.

Load generation is coordinated-omission safe: an open-loop dispatcher walks
the precomputed schedule and starts each rollout at its intended time whatever
is in flight; latencies are measured from the intended start (the uncorrected
figure is reported next to it); and when the client itself falls behind
(schedule lag, a stalled event loop, a saturated CPU, dropped starts) the run
is marked ``valid: false`` with the reason instead of reporting a slower
system under test.
"""

from __future__ import annotations

import asyncio
import math
import os
import platform
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import quiet_gc
from harness.core.plan import RolloutPlan
from harness.core.records import RolloutRecord, TurnRecord
from harness.core.rollout import generate_rollouts, load_scenario_trace, throughput_derivation
from harness.core.scenario import Scenario
from harness.metrics.hdr import Histogram
from harness.metrics.summary import Accumulator
from harness.progress import LineProgress, PassProgress, ProgressSink
from harness.report.results import ResultsWriter, new_run_id
from harness.rollout_loop import run_rollout
from harness.transports import Transport, TransportOptions, make_transport

# Client CPU above this share of one core means the generator itself may be the bottleneck.
CPU_SATURATION_SHARE = 0.95
# Period of the event-loop watchdog: how late a 10 ms sleep wakes is the loop's own lag.
LOOP_WATCH_INTERVAL_S = 0.01
LOOP_STALL_MIN_WALL_S = 1.0
# Connection pool of an open loop without max_in_flight (rollouts in flight are unbounded).
OPEN_LOOP_CONNECTIONS = 1024
# How often live counters are handed to the progress display.
PROGRESS_TICK_S = 0.25


@dataclass(slots=True)
class RunOptions:
    transports: Sequence[str] | None = None
    target: str | None = None
    api_key: str = "sk-loopbench"
    results_root: Path = Path("results")
    run_id: str | None = None
    keepalive: bool = True
    verify_tls: bool = True
    progress: bool = True
    baseline: str | None = None
    request_timeout_s: float = 120.0
    server_args: Sequence[str] = ()
    # False: send no loopbench.* metadata hints (what a real endpoint sees; nothing else changes).
    hints: bool = True
    # Called synchronously with every turn record.  Tests use a blocking hook to stand in
    # for a slow, CPU-bound client and check that the run reports it fell behind.
    turn_hook: Callable[[TurnRecord], None] | None = None
    # False: write results but no report.md/plots (load tests that only read summary.json).
    render: bool = True


@dataclass(slots=True)
class RunResult:
    run_dir: Path
    summary: dict[str, Any]
    # The run's accumulator, so a multi-process run (harness.multiproc) can merge them.
    accumulator: Accumulator | None = None


@dataclass(slots=True)
class _Live:
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
class _Schedule:
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


def _git_sha() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).parent,
        )
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for name in (
        "loopbench",
        "httpx",
        "websockets",
        "uvicorn",
        "starlette",
        "orjson",
        "hdrhistogram",
    ):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = ""
    return out


def build_manifest(
    scenario: Scenario,
    scenario_path: str,
    transports: Sequence[str],
    target: str,
    embedded: bool,
    run_id: str,
    options: RunOptions | None = None,
) -> dict[str, Any]:
    opts = options or RunOptions()
    return {
        "run_id": run_id,
        "scenario": scenario.model_dump(mode="json"),
        "scenario_path": scenario_path,
        "scenario_name": scenario.name,
        "seed": scenario.seed,
        "transports": list(transports),
        "target": target,
        "embedded_server": embedded,
        "client_options": {
            "hints": opts.hints,
            "keepalive": opts.keepalive,
            "verify_tls": opts.verify_tls,
            "request_timeout_s": opts.request_timeout_s,
        },
        "versions": _versions(),
        "git_sha": _git_sha(),
        "machine": {
            "hostname": socket.gethostname(),
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "processor": platform.processor(),
            "python": sys.version.split()[0],
        },
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


RolloutStarter = Callable[[RolloutPlan, int], Coroutine[Any, Any, None]]


async def _run_transport(
    transport: Transport,
    plans: Sequence[RolloutPlan],
    scenario: Scenario,
    round_index: int,
    on_turn: Callable[[TurnRecord], None],
    on_rollout: Callable[[RolloutRecord], None],
    live: _Live,
    sched: _Schedule,
    opts: RunOptions,
    duration_s: float | None,
) -> None:
    load = scenario.load
    warmup = load.warmup_rollouts
    late_ns = round(load.max_schedule_lag_ms * 1e6)
    hook = opts.turn_hook
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
            hints=opts.hints,
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
    sched: _Schedule,
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
    live: _Live,
    sched: _Schedule,
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


async def _watch_loop(hist: Histogram) -> None:
    """Record how late the event loop wakes from short sleeps: the client's own lag."""
    interval_ns = round(LOOP_WATCH_INTERVAL_S * 1e9)
    while True:
        t = time.perf_counter_ns()
        await asyncio.sleep(LOOP_WATCH_INTERVAL_S)
        hist.record_ns(max(0, time.perf_counter_ns() - t - interval_ns))


def _rounds(plans: list[RolloutPlan], scenario: Scenario) -> list[list[RolloutPlan]]:
    """Rollouts grouped by interleaving round; every transport runs a round before the next.

    Groups follow the generator's ``round`` tag, so each record's ``round``
    matches its plan and the summary pairs transports per (round, rollout).
    """
    load = scenario.load
    if load.order != "interleaved" or load.rounds == 1:
        return [plans]
    if any("round" not in p.tags for p in plans):
        size = -(-len(plans) // load.rounds)
        return [plans[i : i + size] for i in range(0, len(plans), size)]
    groups: dict[int, list[RolloutPlan]] = {}
    for plan in plans:
        groups.setdefault(int(plan.tags["round"]), []).append(plan)
    return [groups[k] for k in sorted(groups)]


def _ms(x: float) -> float | None:
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
        "loop_lag_ms": {"p50": _ms(loop50), "p99": _ms(loop99), "max": _ms(loop_lag.max / 1000.0)},
    }


def _lag_reasons(
    summary: dict[str, Any],
    schedules: dict[str, _Schedule],
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


async def run_plans(
    scenario: Scenario,
    scenario_path: str,
    plans: list[RolloutPlan],
    base_url: str,
    opts: RunOptions,
    *,
    embedded: bool,
    printer: Callable[[str], None] | None = None,
    progress: ProgressSink | None = None,
) -> RunResult:
    """Run ``plans`` over every transport and write the results folder.

    ``progress`` receives live counters a few times a second; ``printer`` (kept
    for callers that want plain lines) gets one line per pass per second.
    """
    transports = list(opts.transports or scenario.transports)
    run_id = opts.run_id or new_run_id(scenario.name, time.time())
    run_dir = Path(opts.results_root) / run_id
    manifest = build_manifest(scenario, scenario_path, transports, base_url, embedded, run_id, opts)
    writer = ResultsWriter(run_dir, manifest)
    load = scenario.load
    acc = Accumulator(warmup_rollouts=load.warmup_rollouts)
    if progress is None and printer is not None:
        progress = LineProgress(printer, interval_s=1.0)

    def on_turn(rec: TurnRecord) -> None:
        writer.add_turn(rec)
        acc.add_turn(rec)

    def on_rollout(rec: RolloutRecord) -> None:
        writer.add_rollout(rec)
        acc.add_rollout(rec)

    options = TransportOptions(
        base_url=base_url,
        api_key=opts.api_key,
        keepalive=opts.keepalive,
        verify_tls=opts.verify_tls,
        request_timeout_s=opts.request_timeout_s,
        # Sized to the load so that requests never queue for a client connection: a closed
        # loop has `concurrency` rollouts in flight, an open loop as many as arrive.
        max_connections=(
            max(16, load.concurrency * 2)
            if load.mode == "closed"
            else max(16, load.max_in_flight or OPEN_LOOP_CONNECTIONS)
        ),
    )
    rounds = _rounds(plans, scenario)
    # A closed loop's duration is each transport's time budget, shared by its rounds.
    pass_duration = load.duration_s / len(rounds) if load.duration_s is not None else None
    if load.mode != "closed":
        pass_duration = None
    schedules = {name: _Schedule() for name in transports}
    # Built once, before the watchdog starts, and shared by the rounds: importing a
    # transport and building its TLS context block the loop for tens to hundreds of ms,
    # which is set-up, not the client falling behind.
    clients = {name: make_transport(name, options) for name in transports}
    # Everything alive now (modules, plans, pools) is kept out of the cyclic GC's full
    # collections, which otherwise pause the loop for tens of ms mid-measurement, and
    # young collections become rare (harness/quiet_gc.py).
    gc_state = quiet_gc.begin()
    loop_lag = Histogram()
    watcher = asyncio.ensure_future(_watch_loop(loop_lag))
    cpu0 = os.times()
    wall0 = time.monotonic()
    partial = False
    invalid: list[str] = []
    try:
        for round_index, chunk in enumerate(rounds):
            for name in transports:
                live = _Live(total=len(chunk))
                started = time.perf_counter_ns()
                task = asyncio.ensure_future(
                    _run_transport(
                        clients[name],
                        chunk,
                        scenario,
                        round_index,
                        on_turn,
                        on_rollout,
                        live,
                        schedules[name],
                        opts,
                        pass_duration,
                    )
                )
                try:
                    while not task.done():
                        await asyncio.wait([task], timeout=PROGRESS_TICK_S)
                        if progress is not None and not task.done():
                            progress.update(live.snapshot(name, round_index, len(rounds), started))
                except BaseException:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                    raise
                task.result()
                if progress is not None:
                    progress.update(
                        live.snapshot(name, round_index, len(rounds), started, finished=True)
                    )
    except (asyncio.CancelledError, KeyboardInterrupt):
        partial = True
        invalid.append("run interrupted before every rollout finished")
    finally:
        quiet_gc.end(gc_state)
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        for client in clients.values():
            await client.aclose()
        if progress is not None:
            progress.close()
        cpu1 = os.times()
        wall = max(1e-9, time.monotonic() - wall0)
        cpu_share = ((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) / wall
        summary = acc.summary(
            run_id=run_id,
            valid=True,
            invalid_reasons=[],
            comparisons=_pairs(transports, opts.baseline),
        )
        for name, t in summary.get("transports", {}).items():
            sched = schedules.get(name)
            if sched is not None:
                t["schedule"] = sched.as_dict()
                p50, p90, p99 = sched.uncorrected.percentiles_ms((50, 90, 99))
                t["rollout_uncorrected_ms"] = {
                    "p50": _ms(p50),
                    "p90": _ms(p90),
                    "p99": _ms(p99),
                    "mean": _ms(sched.uncorrected.mean_ms),
                }
        invalid += _lag_reasons(summary, schedules, scenario, loop_lag, cpu_share, wall)
        reasons = list(summary.get("invalid_reasons", [])) + invalid
        finish_client_summary(
            summary, reasons, partial=partial, cpu_share=cpu_share, loop_lag=loop_lag
        )
        summary["load"] = _load_summary(scenario, len(plans))
        summary["scenario"] = scenario.name
        summary["seed"] = scenario.seed
        writer.finish(summary, acc.histograms())
        if opts.render:
            from harness.report.render import render_run_safely  # matplotlib: only when reporting

            render_run_safely(run_dir)
    return RunResult(run_dir, summary, acc)


def _load_summary(scenario: Scenario, rollouts: int) -> dict[str, Any]:
    load = scenario.load
    out: dict[str, Any] = {
        "mode": load.mode,
        "rollouts_planned": rollouts,
        "max_schedule_lag_ms": load.max_schedule_lag_ms,
    }
    derived = throughput_derivation(scenario, load_scenario_trace(scenario))
    if derived is not None:
        out["throughput"] = {
            "target_tps": derived.target_tps,
            "mean_output_tokens_per_rollout": round(derived.mean_output_tokens, 1),
            "arrival_rate_per_s": round(derived.arrival_rate, 4),
            "burst_rates_per_s": [round(r, 4) for r in derived.burst_rates],
        }
    return out


def _pairs(transports: Sequence[str], baseline: str | None) -> list[tuple[str, str]]:
    base = baseline or ("http" if "http" in transports else transports[0])
    return [(base, t) for t in transports if t != base]


def run_scenario(
    scenario: Scenario,
    scenario_path: str,
    opts: RunOptions,
    printer: Callable[[str], None] | None = None,
    progress: ProgressSink | None = None,
) -> RunResult:
    """Run synchronously: start the embedded server unless ``opts.target`` is set."""
    from harness.embedded import embedded_server

    plans = generate_rollouts(scenario)

    def go(url: str, embedded: bool) -> RunResult:
        coro = run_plans(
            scenario,
            scenario_path,
            plans,
            url,
            opts,
            embedded=embedded,
            printer=printer,
            progress=progress,
        )
        return _run_loop(coro)

    if opts.target:
        return go(opts.target, False)
    server = scenario.server
    with embedded_server(
        api_profile=server.api_profile,
        engine_profile=server.engine_profile,
        overrides=dict(server.set),
        seed=scenario.seed,
        extra_args=opts.server_args,
    ) as url:
        return go(url, True)


def _run_loop(coro: Any) -> RunResult:
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    result: RunResult = uvloop.run(coro)
    return result
