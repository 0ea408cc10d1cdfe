"""``python -m bench.selfbench`` (``make bench``): every figure of the self-benchmark in one run,
side by side.

Order matters on a shared machine: each ceiling is measured right next to the
pipeline it is compared with, in alternating trials, and the best trial of
each is kept (interference from other processes only ever slows a trial down,
so the fastest is the closest to what this machine can do).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import Any

from bench.selfbench.agents import AgentsOptions, agents_figures, measure_agents
from bench.selfbench.busy import BUSY_ATTEMPTS, until_quiet
from bench.selfbench.cpu_steal import read_cpu_times, steal_percent
from bench.selfbench.figures import Figure, at_least, at_most, figure, set_aside
from bench.selfbench.kernel_stamps import SERVER_OVERRIDES, kernel_stamp_figures
from bench.selfbench.lib_server import READY_PREFIX as LIB_READY_PREFIX
from bench.selfbench.locust_agents import (
    LocustAgentsOptions,
    locust_agents_figures,
    measure_locust_agents,
)
from bench.selfbench.locust_cmp import measure_locust
from bench.selfbench.machine import run_header
from bench.selfbench.memory import measure_memory
from bench.selfbench.pipeline import drive
from bench.selfbench.procs import child, process_cpu_s
from bench.selfbench.raw import Rate, ceiling
from bench.selfbench.raw_server import LIFECYCLE_EVENTS, READY_PREFIX
from bench.selfbench.timing import overhead_run, overload_runs, pacing_run
from harness.run.embedded import embedded_server
from harness.run.event_loop import run_async

# Targets (issues #10, #20).  Ratios are measured in one run, so they hold on a busy machine too.
PIPELINE_RATIO_MIN = 0.7
TTFT_P50_MAX_MS = 1.0
TTFT_P99_MAX_MS = 5.0
DECODE_ERROR_MAX_PCT = 2.0
SUSTAINED_TPS = 1000.0
# docs/model.md §9: a burst peak >= 3,600 of the modelled 4,000.  No upper bound: a sliding-window
# maximum is biased upwards by any jitter (a late batch lands in the next window).
BURST_TPS = 4000.0
BURST_PEAK_MIN = 3600.0
MEMORY_MAX_MB_PER_MILLION = 64.0
TARGET_STREAMS = 16
# A timing trial during which the hypervisor took more than this share of the CPU time
# (``/proc/stat`` steal) measured the host: it is repeated, up to this factor of trials.
# On the 2-core VM of BENCHMARKS.md, 16-stream trials run at 3-5 % steal and measure a p50
# of 0.5-0.9 ms; the trials at 8-13 % measured 1.0-1.9 ms.
STEAL_DISTURBED_PCT = 6.0
MAX_TRIAL_FACTOR = 3
#: every step, in the order they run; the default of ``--steps``
STEPS = ("throughput", "timing", "kstamp", "memory", "agents", "locust_agents")


@dataclass(frozen=True, slots=True)
class SelfbenchOptions:
    """Sizes of each step; :meth:`quick` is the reduced run the tests use."""

    transports: tuple[str, ...] = ("ws", "http")
    streams: int = 8  # concurrent streams of the ceiling / pipeline steps
    messages_per_stream: int = 20_000
    trials: int = 3
    overhead_levels: tuple[int, ...] = (1, 16, 64)
    # Rollouts per stream (x4 turns; x4 again at one stream): 512 turns at 16 streams, so
    # the p99 rests on the 5 slowest turns, not on one or two.
    overhead_rollouts: int = 8
    pacing_streams: int = TARGET_STREAMS
    pacing_rollouts: int = 2  # per stream, two long responses each
    pacing_tokens: int = 600
    memory_turns: int = 100_000
    overload_rate: float = 20.0
    overload_rollouts: int = 20
    overload_block_ms: float = 150.0
    locust: bool = True
    locust_seconds: float = 6.0
    steps: tuple[str, ...] = STEPS
    #: --rx-stamp of the timing step's runs (the kstamp step alternates kernel and user)
    rx_stamp: str = "auto"
    kstamp_rollouts: int = 4  # per stream, after the unmeasured first wave
    kstamp_trials: int = 3
    agents: AgentsOptions = field(default_factory=AgentsOptions)
    locust_agents: LocustAgentsOptions = field(default_factory=LocustAgentsOptions)
    #: runs of a step while the machine is busy before its figures are left unjudged
    busy_attempts: int = BUSY_ATTEMPTS

    @classmethod
    def quick(cls) -> SelfbenchOptions:
        return cls(
            messages_per_stream=2_000,
            trials=1,
            overhead_rollouts=1,
            pacing_rollouts=1,
            pacing_tokens=500,
            # not fewer: the quick run judges the figure against its limit too, and at 2,000
            # turns the fixed cost reads ~54 MB per million against ~38 at 10,000
            memory_turns=10_000,
            overload_rollouts=12,
            locust_seconds=2.0,
            kstamp_rollouts=1,
            kstamp_trials=1,
            agents=AgentsOptions.quick(),
            locust_agents=LocustAgentsOptions.quick(),
            busy_attempts=1,  # a smoke run: a busy step is marked, not repeated
        )


@dataclass(slots=True)
class _Collected:
    figures: list[Figure] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


def _best(trials: list[Rate]) -> Rate:
    return max(trials, key=lambda r: r.per_s)


def _rate_detail(trials: list[Rate]) -> list[dict[str, float | None]]:
    return [
        {
            "count": r.count,
            "seconds": round(r.seconds, 4),
            "per_s": round(r.per_s, 1),
            "cpu_s": round(r.cpu_s, 4),
            "cpu_us_per_event": round(r.cpu_us_per_event, 3),
            "server_cpu_s": None if r.server_cpu_s is None else round(r.server_cpu_s, 3),
        }
        for r in trials
    ]


@dataclass(frozen=True, slots=True)
class _Server:
    """One bare server of the throughput step and the names of its figures."""

    module: str
    ready_prefix: str
    prefix: str  # of its figure keys and detail names
    label: str  # what the figure labels say about it
    bound: str  # which side bounds the ratio, where the design decides it ("" where it does not)
    targeted: bool  # its ratios carry the pipeline target


# The server the target is about first: real servers' libraries, each event written as it is
# produced.  Then the flood server, faster than any real server: the client's own cost.
_SERVERS = (
    _Server(
        "bench.selfbench.lib_server",
        LIB_READY_PREFIX,
        "",
        "library server",
        "",
        True,
    ),
    _Server(
        "bench.selfbench.raw_server",
        READY_PREFIX,
        "flood_",
        "flood server",
        "client-bound",
        False,
    ),
)
_KINDS = {"ws": "ws", "http": "sse"}
_LABELS = {"ws": "WebSocket", "sse": "SSE"}


def _ports(ready: str) -> dict[str, int]:
    """The port each transport reads, from the server's ready line (one port or HTTP and WS)."""
    ports = [int(p) for p in ready.split()]
    return {"sse": ports[0], "ws": ports[-1]}


def _measured(server_pid: int, run: Coroutine[Any, Any, Rate]) -> Rate:
    """``run``'s rate with the server's CPU time over the same span."""
    s0 = process_cpu_s(server_pid)
    rate = run_async(run)
    s1 = process_cpu_s(server_pid)
    return replace(rate, server_cpu_s=None if s0 is None or s1 is None else s1 - s0)


def _throughput(opts: SelfbenchOptions, out: _Collected, say: Callable[[str], None]) -> None:
    """Ceiling and pipeline against each bare server, in alternating trials; best of each."""
    n, per = opts.streams, opts.messages_per_stream
    expected = per + LIFECYCLE_EVENTS
    flood_http: Rate | None = None
    locust: Rate | None = None
    for server in _SERVERS:
        ceil: dict[str, list[Rate]] = {k: [] for k in _KINDS.values()}
        pipe: dict[str, list[Rate]] = {t: [] for t in opts.transports}
        args = ["-m", server.module, "--deltas", str(per)]
        with child(args, server.ready_prefix) as (proc, ready):
            ports = _ports(ready)
            for trial in range(opts.trials):
                for t in opts.transports:
                    kind = _KINDS[t]
                    port = ports[kind]
                    say(
                        f"throughput, {server.label}, trial {trial + 1}/{opts.trials}: "
                        f"ceiling {kind}, pipeline {t}"
                    )
                    ceil[kind].append(_measured(proc.pid, ceiling(kind, port, n, expected)))
                    url = f"http://127.0.0.1:{port}/v1"
                    pipe[t].append(_measured(proc.pid, drive(url, t, n, per)))
            if not server.targeted and opts.locust and "http" in opts.transports:
                say(f"locust FastHttpUser on the {server.label}'s SSE")
                locust = measure_locust(
                    f"http://127.0.0.1:{ports['sse']}/v1", n, per, opts.locust_seconds
                )
                out.details["locust_sse"] = _rate_detail([locust])
        for t in opts.transports:
            _pair_figures(server, t, ceil[_KINDS[t]], pipe[t], out)
        if not server.targeted and "http" in pipe:
            flood_http = _best(pipe["http"])
    if locust is not None and flood_http is not None:
        out.figures.append(
            figure(
                "locust.sse",
                "Locust FastHttpUser, flood server's SSE",
                locust.per_s,
                "events/s",
                digits=0,
            )
        )
        out.figures.append(
            figure(
                "ratio.http_vs_locust",
                "loopbench http / Locust, flood server",
                flood_http.per_s / locust.per_s if locust.per_s else None,
                "",
            )
        )
    out.details["throughput_settings"] = {
        "streams": n,
        "deltas_per_response": per,
        "events_per_response": expected,
        "trials": opts.trials,
        "servers": {s.label: f"bench/selfbench/{s.module.rsplit('.', 1)[1]}.py" for s in _SERVERS},
    }


def _pair_figures(
    server: _Server, t: str, ceil: list[Rate], pipe: list[Rate], out: _Collected
) -> None:
    """Rates, ratio and CPU per event (client and server) of one transport against one server."""
    kind, pre, where = _KINDS[t], server.prefix, server.label
    c, p = _best(ceil), _best(pipe)
    out.figures.append(
        figure(
            f"{pre}ceiling.{kind}",
            f"ceiling: bare reader, {_LABELS[kind]}, {where}",
            c.per_s,
            "events/s",
            digits=0,
        )
    )
    out.figures.append(
        figure(f"{pre}pipeline.{t}", f"full pipeline, {t}, {where}", p.per_s, "events/s", digits=0)
    )
    target = at_least(PIPELINE_RATIO_MIN, f">= {PIPELINE_RATIO_MIN:g}") if server.targeted else None
    out.figures.append(
        figure(
            f"{pre}ratio.{t}",
            f"pipeline / ceiling, {t}, {where}" + (f": {server.bound}" if server.bound else ""),
            p.per_s / c.per_s if c.per_s else None,
            "",
            target,
        )
    )
    for side, rate, name in (("ceiling", c, kind), ("pipeline", p, t)):
        out.figures.append(
            figure(
                f"{pre}cpu_us.{side}.{name}",
                f"client CPU per event, {side} {name}, {where}",
                rate.cpu_us_per_event,
                "µs",
                digits=2,
            )
        )
        out.figures.append(
            figure(
                f"{pre}server_cpu_us.{side}.{name}",
                f"server CPU per event, {side} {name}, {where}",
                rate.server_cpu_us_per_event,
                "µs",
                digits=2,
            )
        )
    out.details[f"{pre}ceiling_{kind}"] = _rate_detail(ceil)
    out.details[f"{pre}pipeline_{t}"] = _rate_detail(pipe)


def _timing(opts: SelfbenchOptions, out: _Collected, say: Callable[[str], None]) -> None:
    with embedded_server() as url:
        for streams in opts.overhead_levels:
            _overhead_level(url, streams, opts, out, say)
        say(f"pacing at {SUSTAINED_TPS:,.0f} TPS, {opts.pacing_streams} streams")
        run = pacing_run(
            url,
            list(opts.transports),
            opts.pacing_streams,
            opts.pacing_rollouts,
            opts.pacing_tokens,
            rx_stamp=opts.rx_stamp,
        )
        out.details["pacing"] = {
            "valid": run.summary.get("valid"),
            "client": run.summary.get("client"),
            "seconds": round(run.seconds, 2),
        }
        for t in opts.transports:
            tps = run.transport(t).get("tps", {})
            out.details["pacing"][t] = tps
            p50 = tps.get("decode_p50")
            err_pct = abs(p50 - SUSTAINED_TPS) / SUSTAINED_TPS * 100 if p50 else None
            out.figures.append(
                figure(
                    f"decode_tps_error.{t}",
                    f"decode TPS error at {SUSTAINED_TPS:,.0f} TPS, {t}, {opts.pacing_streams} streams",
                    err_pct,
                    "%",
                    at_most(DECODE_ERROR_MAX_PCT, f"<= {DECODE_ERROR_MAX_PCT:g} %"),
                )
            )
            out.figures.append(
                figure(
                    f"burst_peak.{t}",
                    f"burst TPS peak (model {BURST_TPS:,.0f}), {t}, {opts.pacing_streams} streams",
                    tps.get("burst_peak"),
                    "tok/s",
                    at_least(BURST_PEAK_MIN, f">= {BURST_PEAK_MIN:,.0f}"),
                    digits=0,
                )
            )
        say("overload detection: the same open-loop run with a normal and a blocking client")
        control, overloaded = overload_runs(
            url, opts.overload_rate, opts.overload_rollouts, opts.overload_block_ms
        )
    ok_control = bool(control.summary.get("valid"))
    caught = not overloaded.summary.get("valid", True)
    out.figures.append(
        figure(
            "overload.control_valid",
            "control run (client keeps up) reported valid",
            1.0 if ok_control else 0.0,
            "",
            at_least(1, "valid"),
        )
    )
    out.figures.append(
        figure(
            "overload.detected",
            f"overloaded client ({opts.overload_block_ms:g} ms blocked per turn) reported invalid",
            1.0 if caught else 0.0,
            "",
            at_least(1, "invalid"),
        )
    )
    out.details["overload"] = {
        "control": {
            "valid": control.summary.get("valid"),
            "invalid_reasons": control.summary.get("invalid_reasons"),
        },
        "overloaded": {
            "valid": overloaded.summary.get("valid"),
            "invalid_reasons": overloaded.summary.get("invalid_reasons"),
        },
    }


def _overhead_level(
    url: str, streams: int, opts: SelfbenchOptions, out: _Collected, say: Callable[[str], None]
) -> None:
    """Measurement overhead at one concurrency; at the target level, in ``opts.trials`` trials.

    As for the throughput ceilings, the best trial (lowest p99, per transport) is
    the figure: another guest on the host or another process only ever adds
    latency.  A trial during which the hypervisor took more than
    ``STEAL_DISTURBED_PCT`` of the CPU time measured the host, not the harness:
    it is marked disturbed and another is run, up to ``MAX_TRIAL_FACTOR`` times
    the planned count.  The worst trial is reported next to the best, and every
    trial — with its CPU steal and the client's loop lag — is in the JSON.
    """
    per = opts.overhead_rollouts * (4 if streams == 1 else 1)
    at_target = streams == TARGET_STREAMS
    n_trials = opts.trials if at_target else 1
    trials: list[dict[str, Any]] = []
    while True:
        n = len(trials) + 1
        say(
            f"measurement overhead at {streams} stream(s)"
            + (f", trial {n} (of {n_trials} undisturbed)" if n_trials > 1 else "")
        )
        cpu0 = read_cpu_times()
        run = overhead_run(url, list(opts.transports), streams, per, rx_stamp=opts.rx_stamp)
        steal = steal_percent(cpu0, read_cpu_times())
        trial: dict[str, Any] = {
            "valid": run.summary.get("valid"),
            "invalid_reasons": run.summary.get("invalid_reasons"),
            "client": run.summary.get("client"),
            "cpu_steal_pct": steal,
            "disturbed": steal is not None and steal > STEAL_DISTURBED_PCT,
            "seconds": round(run.seconds, 2),
        }
        for t in opts.transports:
            trial[t] = {
                "measurement_error_ms": run.transport(t).get("measurement_error_ms", {}),
                # the same error without the server's first-token lateness: the client's part
                "client_error_ms": run.transport(t).get("client_error_ms", {}),
                "server_late_ms": run.transport(t).get("server_late_ms", {}),
                "turns": run.transport(t).get("turns", {}),
            }
        trials.append(trial)
        if n_trials == 1:
            break
        if trial["disturbed"]:
            say(f"  disturbed: {steal:g} % CPU steal (> {STEAL_DISTURBED_PCT:g} %)")
        if sum(not tr["disturbed"] for tr in trials) >= n_trials:
            break
        if len(trials) >= n_trials * MAX_TRIAL_FACTOR:
            break
    detail: dict[str, Any] = dict(trials[0]) if n_trials == 1 else {"trials": trials}
    out.details[f"overhead_{streams}"] = detail
    considered, note = usable_trials(trials)
    plural = "s" if streams > 1 else ""
    for t in opts.transports:
        best, worst = best_and_worst([tr[t]["measurement_error_ms"] for tr in considered])
        # The client-side error of the trial whose total is the figure (the same run).
        client = next(tr[t] for tr in considered if tr[t]["measurement_error_ms"] is best)
        if n_trials > 1:
            detail[t] = {"best_trial": best, "worst_trial": worst}
        for q, bound in (("p50", TTFT_P50_MAX_MS), ("p99", TTFT_P99_MAX_MS)):
            out.figures.append(
                figure(
                    f"ttft_overhead.{t}.{streams}.{q}",
                    f"TTFT overhead {q}, {t}, {streams} stream{plural}"
                    + (_of_trials(len(considered)) if n_trials > 1 else ""),
                    best.get(q),
                    "ms",
                    at_most(bound, f"<= {bound:g} ms") if at_target else None,
                    note=note,
                )
            )
            out.figures.append(
                figure(
                    f"ttft_client_error.{t}.{streams}.{q}",
                    f"TTFT client-side error {q} (overhead - server lateness and read delay), {t}, "
                    f"{streams} stream{plural}",
                    client.get("client_error_ms", {}).get(q),
                    "ms",
                    note=note,
                )
            )
        if n_trials > 1:
            out.figures.append(
                figure(
                    f"ttft_overhead.{t}.{streams}.p99_worst_trial",
                    f"TTFT overhead p99, {t}, {streams} stream{plural}, worst trial",
                    worst.get("p99"),
                    "ms",
                    note=note,
                )
            )


def usable_trials(trials: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """The undisturbed trials (all of them, with a note saying so, if every one was disturbed)."""
    quiet = [tr for tr in trials if not tr.get("disturbed")]
    if quiet:
        return quiet, ""
    steals = [tr["cpu_steal_pct"] for tr in trials if tr.get("cpu_steal_pct") is not None]
    least = min(steals) if steals else float("nan")
    return trials, (
        f"every trial was disturbed: at least {least:g} % CPU steal (> {STEAL_DISTURBED_PCT:g} %)"
    )


def best_and_worst(errs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The trials' measurement-error summaries with the lowest and the highest p99."""
    ranked = sorted(errs, key=lambda e: _or_inf(e.get("p99")))
    return ranked[0], ranked[-1]


def _of_trials(n: int) -> str:
    return f", best of {n} trials" if n > 1 else ", 1 trial"


def _or_inf(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) else float("inf")


def _kstamp(opts: SelfbenchOptions, out: _Collected, say: Callable[[str], None]) -> None:
    with embedded_server(overrides=SERVER_OVERRIDES) as url:
        kernel_stamp_figures(
            url,
            list(opts.transports),
            opts.kstamp_rollouts,
            opts.kstamp_trials,
            out.figures,
            out.details,
            say,
        )


def _memory(opts: SelfbenchOptions, out: _Collected, say: Callable[[str], None]) -> None:
    say(f"memory: {opts.memory_turns:,} synthetic turns through accumulator + writer")
    mem = measure_memory(opts.memory_turns)
    out.figures.append(
        figure(
            "memory.mb_per_million_turns",
            "harness memory per million recorded turns",
            mem.mb_per_million_turns,
            "MB",
            at_most(MEMORY_MAX_MB_PER_MILLION, f"<= {MEMORY_MAX_MB_PER_MILLION:g} MB"),
            digits=1,
        )
    )
    out.figures.append(
        figure(
            "memory.us_per_turn",
            "recording cost per turn (accumulator + writer)",
            mem.us_per_turn,
            "µs",
            digits=1,
        )
    )
    out.details["memory"] = {"turns": mem.turns, "bytes_per_turn": round(mem.bytes_per_turn, 2)}


def _agents(opts: SelfbenchOptions, out: _Collected, say: Callable[[str], None]) -> None:
    a = opts.agents
    say(
        f"agents per client core: {', '.join(opts.transports)}, search from {a.start} "
        f"to {a.max_agents} agents, {a.max_steps} steps at most"
    )
    answers, facts = measure_agents(dataclasses.replace(a, transports=opts.transports), say)
    out.details["agents"] = {
        "placement": facts,
        "settings": {k: getattr(a, k) for k in a.__dataclass_fields__ if k not in ("transports",)},
        **{ans.transport: ans.as_dict() for ans in answers},
    }
    for ans in answers:
        out.figures.extend(agents_figures(ans, a.error_p99_max_ms))


def _locust_agents(opts: SelfbenchOptions, out: _Collected, say: Callable[[str], None]) -> None:
    a = opts.locust_agents.agents
    say(
        f"agents per Locust worker process: {', '.join(a.transports)}, search from {a.start} "
        f"to {a.max_agents} agents, {a.max_steps} steps at most"
    )
    answers, facts = measure_locust_agents(opts.locust_agents, say)
    out.details["locust_agents"] = {
        "placement": facts,
        **{ans.transport: ans.as_dict() for ans in answers},
    }
    out.figures.extend(locust_agents_figures(answers, a.error_p99_max_ms))


def _judged_step(
    step: str,
    run: Callable[[SelfbenchOptions, _Collected, Callable[[str], None]], None],
    opts: SelfbenchOptions,
    out: _Collected,
    say: Callable[[str], None],
) -> None:
    """``run`` one step, again while other processes kept the machine busy (bench/selfbench/busy.py);
    the figures of a step that stayed busy are set aside, not judged."""

    def attempt() -> _Collected:
        part = _Collected()
        run(opts, part, say)
        return part

    part, busy = until_quiet(attempt, say, opts.busy_attempts)
    figures = part.figures
    if busy is not None:
        out.details.setdefault("busy", {})[step] = busy.as_dict()
        if busy.busy:
            say(f"{step}: {busy.not_judged()}")
            figures = set_aside(figures, busy.not_judged())
    out.figures.extend(figures)
    out.details.update(part.details)


def run_selfbench(
    opts: SelfbenchOptions, say: Callable[[str], None] = lambda _: None
) -> tuple[list[Figure], dict[str, Any], dict[str, Any]]:
    """Run every step; returns (figures, meta, details)."""
    out = _Collected()
    started = time.time()
    t0 = time.perf_counter()
    cpu0 = read_cpu_times()
    for step, run in (
        ("throughput", _throughput),
        ("timing", _timing),
        ("kstamp", _kstamp),
        ("memory", _memory),
        ("agents", _agents),
        ("locust_agents", _locust_agents),
    ):
        if step in opts.steps:
            _judged_step(step, run, opts, out, say)
    meta = {
        **run_header("python -m bench.selfbench", started, t0, cpu0),
        "options": {k: getattr(opts, k) for k in opts.__dataclass_fields__},
    }
    return out.figures, meta, out.details
