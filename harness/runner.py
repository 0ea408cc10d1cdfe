"""Run a scenario: the same seeded rollouts over each transport, records streamed to disk.

This is the asyncio orchestration layer.  It owns the clock of the run
(intended starts, schedule lag), hands records to the results writer as they
arrive (so an interrupted run keeps what it measured) and to the accumulator
that builds the summary.  Statistics and file formats live elsewhere.
"""

from __future__ import annotations

import asyncio
import os
import platform
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.plan import RolloutPlan
from harness.core.records import RolloutRecord, TurnRecord
from harness.core.rollout import generate_rollouts
from harness.core.scenario import Scenario
from harness.metrics.summary import Accumulator
from harness.report.results import ResultsWriter, new_run_id
from harness.rollout_loop import run_rollout
from harness.transports import TransportOptions, make_transport

# Client CPU above this share of one core means the generator itself may be the bottleneck.
CPU_SATURATION_SHARE = 0.95


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


@dataclass(slots=True)
class RunResult:
    run_dir: Path
    summary: dict[str, Any]


@dataclass(slots=True)
class _Live:
    """Counters for the progress display (cheap; no statistics here)."""

    total: int
    done: int = 0
    turns: int = 0
    errors: int = 0
    ttft_ms: deque[float] = field(default_factory=lambda: deque(maxlen=200))

    def line(self, name: str, started: float) -> str:
        elapsed = time.monotonic() - started
        rate = self.turns / elapsed if elapsed > 0 else 0.0
        ttft = sorted(self.ttft_ms)[len(self.ttft_ms) // 2] if self.ttft_ms else float("nan")
        eta = elapsed / self.done * (self.total - self.done) if self.done else float("nan")
        return (
            f"{name:<13} {self.done}/{self.total} rollouts  {rate:6.1f} turns/s  TTFT p50 {ttft:7.1f} ms  "
            f"errors {self.errors}  {elapsed:5.1f}s elapsed  ETA {eta:5.1f}s"
        )


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
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "scenario": scenario.model_dump(mode="json"),
        "scenario_path": scenario_path,
        "scenario_name": scenario.name,
        "seed": scenario.seed,
        "transports": list(transports),
        "target": target,
        "embedded_server": embedded,
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


async def _run_transport(
    name: str,
    plans: Sequence[RolloutPlan],
    scenario: Scenario,
    options: TransportOptions,
    round_index: int,
    on_turn: Callable[[TurnRecord], None],
    on_rollout: Callable[[RolloutRecord], None],
    live: _Live,
) -> None:
    transport = make_transport(name, options)
    load = scenario.load

    def turn_sink(rec: TurnRecord) -> None:
        live.turns += 1
        if not rec.ok:
            live.errors += 1
        elif rec.first_token_ns:
            live.ttft_ms.append((rec.first_token_ns - rec.sent_ns) / 1e6)
        on_turn(rec)

    async def one(plan: RolloutPlan, intended: int) -> None:
        rec = await run_rollout(
            transport,
            plan,
            intended_start_ns=intended,
            round_index=round_index,
            model=scenario.model,
            on_turn=turn_sink,
        )
        live.done += 1
        on_rollout(rec)

    try:
        if load.mode == "closed":
            queue: asyncio.Queue[RolloutPlan] = asyncio.Queue()
            for p in plans:
                queue.put_nowait(p)

            async def agent() -> None:
                while not queue.empty():
                    plan = queue.get_nowait()
                    await one(plan, time.perf_counter_ns())

            await asyncio.gather(
                *(agent() for _ in range(max(1, min(load.concurrency, len(plans)))))
            )
        else:
            t0 = time.perf_counter_ns()
            base = min((p.start_offset_ns for p in plans), default=0)

            async def scheduled(plan: RolloutPlan) -> None:
                intended = t0 + plan.start_offset_ns - base
                delay = (intended - time.perf_counter_ns()) / 1e9
                if delay > 0:
                    await asyncio.sleep(delay)
                await one(plan, intended)

            await asyncio.gather(*(scheduled(p) for p in plans))
    finally:
        await transport.aclose()


def _rounds(plans: list[RolloutPlan], scenario: Scenario) -> list[list[RolloutPlan]]:
    rounds = max(1, getattr(scenario.load, "rounds", 1) or 1)
    if getattr(scenario.load, "order", "sequential") != "interleaved" or rounds == 1:
        return [plans]
    size = -(-len(plans) // rounds)
    return [plans[i : i + size] for i in range(0, len(plans), size)]


async def run_plans(
    scenario: Scenario,
    scenario_path: str,
    plans: list[RolloutPlan],
    base_url: str,
    opts: RunOptions,
    *,
    embedded: bool,
    printer: Callable[[str], None] | None = None,
) -> RunResult:
    transports = list(opts.transports or scenario.transports)
    run_id = opts.run_id or new_run_id(scenario.name, time.time())
    run_dir = Path(opts.results_root) / run_id
    manifest = build_manifest(scenario, scenario_path, transports, base_url, embedded, run_id)
    writer = ResultsWriter(run_dir, manifest)
    acc = Accumulator(warmup_rollouts=scenario.load.warmup_rollouts)

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
        max_connections=max(16, scenario.load.concurrency * 2),
    )
    cpu0 = os.times()
    wall0 = time.monotonic()
    partial = False
    invalid: list[str] = []
    try:
        for round_index, chunk in enumerate(_rounds(plans, scenario)):
            for name in transports:
                live = _Live(total=len(chunk))
                started = time.monotonic()
                task = asyncio.ensure_future(
                    _run_transport(
                        name, chunk, scenario, options, round_index, on_turn, on_rollout, live
                    )
                )
                while not task.done():
                    await asyncio.wait([task], timeout=1.0)
                    if printer is not None and not task.done():
                        printer(live.line(name, started))
                task.result()
                if printer is not None:
                    printer(live.line(name, started) + "\n")
    except (asyncio.CancelledError, KeyboardInterrupt):
        partial = True
        invalid.append("run interrupted before every rollout finished")
    finally:
        cpu1 = os.times()
        wall = max(1e-9, time.monotonic() - wall0)
        cpu_share = ((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) / wall
        if cpu_share > CPU_SATURATION_SHARE:
            invalid.append(f"client CPU saturated: {cpu_share:.0%} of one core over the run")
        summary = acc.summary(
            run_id=run_id,
            valid=True,
            invalid_reasons=[],
            comparisons=_pairs(transports, opts.baseline),
        )
        lag_limit = float(scenario.load.max_schedule_lag_ms)
        for name, t in summary.get("transports", {}).items():
            lag = t.get("schedule_lag_ms", {}).get("p99")
            if lag is not None and lag == lag and lag > lag_limit:
                invalid.append(
                    f"{name}: schedule lag p99 {lag:.1f} ms exceeds load.max_schedule_lag_ms {lag_limit:g}"
                )
        summary["invalid_reasons"] = list(summary.get("invalid_reasons", [])) + invalid
        summary["valid"] = not summary["invalid_reasons"]
        summary["partial"] = partial
        summary["client_cpu_share"] = round(cpu_share, 3)
        summary["scenario"] = scenario.name
        summary["seed"] = scenario.seed
        writer.finish(summary, acc.histograms())
    return RunResult(run_dir, summary)


def _pairs(transports: Sequence[str], baseline: str | None) -> list[tuple[str, str]]:
    base = baseline or ("http" if "http" in transports else transports[0])
    return [(base, t) for t in transports if t != base]


def run_scenario(
    scenario: Scenario,
    scenario_path: str,
    opts: RunOptions,
    printer: Callable[[str], None] | None = None,
) -> RunResult:
    """Run synchronously: start the embedded server unless ``opts.target`` is set."""
    from harness.embedded import embedded_server

    plans = generate_rollouts(scenario)

    def go(url: str, embedded: bool) -> RunResult:
        coro = run_plans(
            scenario, scenario_path, plans, url, opts, embedded=embedded, printer=printer
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
