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
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.metrics.hdr import Histogram
from harness.metrics.summary import Accumulator
from harness.report.results import ResultsWriter, new_run_id
from harness.run import quiet_gc
from harness.run.passes import (
    PassCounts,
    ScheduleStats,
    finish_client_summary,
    lag_reasons,
    round_ms,
    run_pass,
    watch_loop,
)
from harness.run.progress import LineProgress, ProgressSink
from harness.transports import TransportOptions, make_transport
from harness.workload.plan import RolloutPlan
from harness.workload.records import RolloutRecord, TurnRecord
from harness.workload.rollout import generate_rollouts, load_scenario_trace, throughput_derivation
from harness.workload.scenario import Scenario

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
    # The run's accumulator, so a multi-process run (harness.run.procs) can merge them.
    accumulator: Accumulator | None = None


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
    schedules = {name: ScheduleStats() for name in transports}
    # Built once, before the watchdog starts, and shared by the rounds: importing a
    # transport and building its TLS context block the loop for tens to hundreds of ms,
    # which is set-up, not the client falling behind.
    clients = {name: make_transport(name, options) for name in transports}
    # Everything alive now (modules, plans, pools) is kept out of the cyclic GC's full
    # collections, which otherwise pause the loop for tens of ms mid-measurement, and
    # young collections become rare (harness/run/quiet_gc.py).
    gc_state = quiet_gc.begin()
    loop_lag = Histogram()
    watcher = asyncio.ensure_future(watch_loop(loop_lag))
    cpu0 = os.times()
    wall0 = time.monotonic()
    partial = False
    invalid: list[str] = []
    try:
        for round_index, chunk in enumerate(rounds):
            for name in transports:
                live = PassCounts(total=len(chunk))
                started = time.perf_counter_ns()
                task = asyncio.ensure_future(
                    run_pass(
                        clients[name],
                        chunk,
                        scenario,
                        round_index,
                        on_turn,
                        on_rollout,
                        live,
                        schedules[name],
                        pass_duration,
                        hints=opts.hints,
                        turn_hook=opts.turn_hook,
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
                    "p50": round_ms(p50),
                    "p90": round_ms(p90),
                    "p99": round_ms(p99),
                    "mean": round_ms(sched.uncorrected.mean_ms),
                }
        invalid += lag_reasons(summary, schedules, scenario, loop_lag, cpu_share, wall)
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
    from harness.run.embedded import embedded_server

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
