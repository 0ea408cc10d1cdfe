"""``loopbench run --procs N``: the client in N processes, the embedded server with N workers.

One Python process drives about one core.  On a multi-core machine this runs
the same seeded rollouts split across N client processes (round-robin, so every
process gets early and late rollouts, and every transport runs a process's
rollouts, keeping comparisons paired), each with its share of the closed-loop
concurrency, all started together behind a barrier.  Each child runs the
ordinary :func:`~harness.run.runner.run_plans` into a private folder and sends back
its measurement; the parent folds them into one
:class:`~harness.run.measurement.Measurement` (accumulators merged, HDR histograms
bucket by bucket, so merged percentiles are those of one histogram of every
sample; schedules summed; each child's health kept under its name), re-writes
their rows into the one results folder, and judges the merged run with the same
validity rules as a single-process run.

Clocks: every process stamps with ``perf_counter_ns`` (``CLOCK_MONOTONIC`` on
Linux, one clock for the whole machine), so per-second token buckets line up.
An open-loop child anchors its schedule at its own first intended start, which
is at most one inter-arrival gap after the global first one.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from harness.report.rebuild import row_records
from harness.report.render import render_run_safely
from harness.report.results import load_run, new_run_id
from harness.run.embedded import scenario_server
from harness.run.event_loop import run_async
from harness.run.measurement import Measurement
from harness.run.runner import (
    RunOptions,
    RunResult,
    finish_scrape,
    open_measurement,
    run_plans,
    server_scraper,
)
from harness.run.schedule_stats import ScheduleStats
from harness.wire.errors import LoopbenchError
from harness.wire.plural import counted
from harness.workload.plan import RolloutPlan
from harness.workload.records import RolloutRecord, TurnRecord
from harness.workload.rollout import generate_rollouts
from harness.workload.scenario import Scenario

#: how long children may take to import and reach the start barrier
START_TIMEOUT_S = 120.0
#: in a child: the SIGTERMs that came before its event loop could take them
_STOP: list[int] = []


def partition(plans: Sequence[RolloutPlan], procs: int) -> list[list[RolloutPlan]]:
    """Round-robin in start order: each part sees the whole arrival pattern, thinned."""
    ordered = sorted(plans, key=lambda p: (p.start_offset_ns, p.rollout_id))
    return [list(ordered[i::procs]) for i in range(procs)]


def split_concurrency(concurrency: int, procs: int) -> list[int]:
    """``concurrency`` agents over ``procs`` processes, as evenly as possible."""
    base, extra = divmod(concurrency, procs)
    return [base + (1 if i < extra else 0) for i in range(procs)]


def _child(
    index: int,
    job: Callable[[], Coroutine[Any, Any, RunResult]],
    barrier: Any,
    conn: Connection,
    stop: Any,
) -> None:
    # The parent decides when the run stops: a Ctrl-C in the terminal reaches every process
    # of the group, a SIGTERM only the parent, which then sends each child SIGTERM.  So the
    # children ignore SIGINT and end their run gracefully (rows flushed, partial) on SIGTERM.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A SIGTERM before the run's loop is up (at the barrier) is kept for _stoppable.
    signal.signal(signal.SIGTERM, lambda signum, frame: _STOP.append(signum))
    # A SIGTERM sent while this process still ignored signals (its imports) was lost: the
    # parent also sets ``stop`` before it signals, so the stop is seen either way.
    if stop.is_set():
        _STOP.append(signal.SIGTERM)
    try:
        barrier.wait(START_TIMEOUT_S)
        result = run_async(_stoppable(job))
        assert result.measurement is not None
        conn.send(
            {
                "index": index,
                "run_dir": str(result.run_dir),
                "state": result.measurement.to_state(),
            }
        )
    except BaseException as exc:
        conn.send({"index": index, "error": f"{type(exc).__name__}: {exc}"})
        raise
    finally:
        conn.close()


def _start_ignoring_signals(proc: Any) -> None:
    """Start ``proc`` with SIGINT and SIGTERM ignored until :func:`_child` takes them.

    A spawned child inherits ignored signals; without this a stop during its imports
    would kill it before it could send what it measured.
    """
    if threading.current_thread() is not threading.main_thread():
        # Only the main thread may set handlers; a caller off it handles signals itself.
        proc.start()
        return
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        proc.start()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _stop_signals(on_stop: Callable[[], None]) -> Iterator[None]:
    """SIGINT and SIGTERM call ``on_stop`` (and nothing is raised) inside the block.

    Off the main thread, where no handler can be set, the caller's own handling stays.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        on_stop()

    sigs = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, handler) for sig in sigs}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


async def _stoppable(job: Callable[[], Coroutine[Any, Any, RunResult]]) -> RunResult:
    """``job`` in this task, cancelled by SIGTERM (the runner keeps what it measured)."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    if _STOP:
        task.cancel()
    return await job()


def _records(run_dir: Path) -> Iterator[TurnRecord | RolloutRecord]:
    """The turn rows, then the rollout rows, of a child's private results folder."""
    run = load_run(run_dir)
    for table, cls in ((run.turns, TurnRecord), (run.rollouts, RolloutRecord)):
        yield from row_records(table, cls)


def _copy_rows(writer: Any, run_dir: Path) -> None:
    for rec in _records(run_dir):
        if isinstance(rec, TurnRecord):
            writer.add_turn(rec)
        else:
            writer.add_rollout(rec)


def _salvage(run: Measurement, dead: _Dead, part: Sequence[RolloutPlan]) -> None:
    """Fold in what a child that died wrote to its folder: its statistics come from its rows.

    Its schedule: every measured rollout of its share intended, the recorded ones started,
    those with turns but no rollout row begun and cut off (cancelled), the rest not started.
    """
    warmup = run.scenario.load.warmup_rollouts
    begun: dict[str, set[int]] = {name: set() for name in run.transports}
    rows = 0
    try:
        for rec in _records(dead.run_dir):
            rows += 1
            if isinstance(rec, TurnRecord):
                run.add_turn(rec)
            else:
                run.acc.add_rollout(rec)
                run.add_rollout_row(rec)
            begun.setdefault(rec.transport, set()).add(rec.rollout_id)
    except (LoopbenchError, OSError) as exc:
        dead.why += f"; its rows could not be read ({exc})"
    measured = sum(1 for p in part if p.rollout_id >= warmup)
    for name in run.transports:
        sched = run.schedules.setdefault(name, ScheduleStats())
        sched.intended += measured
        sched.not_started += measured - len({r for r in begun.get(name, ()) if r >= warmup})
    run.stop_early(
        f"client process {dead.name} (pid {dead.pid}) died: {dead.why}; the run keeps the "
        f"{rows} rows it wrote before, its rollouts still running are lost"
    )


@dataclass(slots=True)
class _Dead:
    """A client process that ended without sending its measurement."""

    index: int
    name: str
    pid: int | None
    why: str
    run_dir: Path


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"exited with code {code}"


def run_procs(
    scenario: Scenario,
    scenario_path: str,
    opts: RunOptions,
    procs: int,
    *,
    say: Callable[[str], None] = lambda _: None,
) -> RunResult:
    """Run ``scenario`` with ``procs`` client processes (and server workers when embedded)."""
    if procs < 1:
        raise LoopbenchError(f"--procs: expected an integer >= 1, got {procs}")
    plans = generate_rollouts(scenario)
    # Named now, not when the merged measurement opens: the children's session-affinity
    # values carry it (harness/client/shaping.py).
    opts = replace(opts, run_id=opts.run_id or new_run_id(scenario.name, time.time()))
    load = scenario.load
    shares = split_concurrency(load.concurrency, procs) if load.mode == "closed" else [1] * procs
    parts = partition(plans, procs)
    jobs = [
        (i, part, share)
        for i, (part, share) in enumerate(zip(parts, shares, strict=True))
        if part and share
    ]
    with tempfile.TemporaryDirectory(prefix="loopbench-procs-") as tmp:
        if opts.target:
            return _run(
                scenario, scenario_path, opts, plans, jobs, opts.target, False, Path(tmp), say
            )
        args = list(opts.server_args)
        if procs > 1:
            args += ["--workers", str(procs)]
            if "--store" not in args:
                # Workers share the store: a file, private to this run.
                args += ["--store", str(Path(tmp) / "store.sqlite3")]
        with scenario_server(scenario, args) as url:
            return _run(scenario, scenario_path, opts, plans, jobs, url, True, Path(tmp), say)


def _run(
    scenario: Scenario,
    scenario_path: str,
    opts: RunOptions,
    plans: list[RolloutPlan],
    jobs: list[tuple[int, list[RolloutPlan], int]],
    base_url: str,
    embedded: bool,
    tmp: Path,
    say: Callable[[str], None],
) -> RunResult:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(jobs))
    stop = ctx.Event()
    children: list[tuple[Any, Connection]] = []
    for i, part, share in jobs:
        child_scenario = scenario.model_copy(
            update={"load": scenario.load.model_copy(update={"concurrency": share})}
        )
        child_opts = replace(
            opts,
            results_root=tmp / "procs",
            run_id=f"p{i}",
            progress=False,
            render=False,
            turn_hook=None,
            # threads and a socket do not cross into a spawned child (refused with --procs)
            live=None,
            # the parent scrapes the server, once for the whole run
            server_metrics=None,
            scrape_embedded=False,
            session_run_id=opts.run_id,
        )
        parent_end, child_end = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=_child,
            args=(
                i,
                partial(
                    run_plans,
                    child_scenario,
                    scenario_path,
                    part,
                    base_url,
                    child_opts,
                    embedded=embedded,
                ),
                barrier,
                child_end,
                stop,
            ),
            name=f"loopbench-client-{i}",
        )
        _start_ignoring_signals(proc)
        child_end.close()
        children.append((proc, parent_end))
    scraper = server_scraper(opts, base_url, embedded=embedded)
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    dead: list[_Dead] = []
    interrupted = False

    def stop_children() -> None:
        # Ctrl-C or SIGTERM: stop every child; each still sends what it measured.
        nonlocal interrupted
        interrupted = True
        stop.set()
        for p, _ in children:
            if p.is_alive() and p.pid is not None:
                p.terminate()

    # From here a stop is a flag the signal handler sets, never an exception: one raised
    # between two statements of this loop would lose a child's message, or escape it.
    with _stop_signals(stop_children):
        say(f"running {counted(len(plans), 'rollout')} in {len(children)} client processes")
        announced = False
        try:
            for (proc, end), (index, _, _) in zip(children, jobs, strict=True):
                while True:
                    try:
                        msg = end.recv()
                        break
                    except KeyboardInterrupt:  # off the main thread, no handler of ours
                        stop_children()
                    except EOFError:
                        # Died without a word (kill -9, the OOM killer): what it wrote
                        # to its folder is kept and the run goes on without it.
                        proc.join(5)
                        msg = {"dead": _exit_text(proc.exitcode)}
                        break
                if interrupted and not announced:
                    announced = True
                    say("stopping: waiting for the client processes' measurements…")
                if "dead" in msg:
                    dead.append(
                        _Dead(index, proc.name, proc.pid, msg["dead"], tmp / "procs" / f"p{index}")
                    )
                    say(f"client process {proc.name} (pid {proc.pid}) died: {msg['dead']}")
                elif "error" in msg:
                    errors.append(f"client process {msg['index']}: {msg['error']}")
                else:
                    results.append(msg)
        finally:
            for proc, end in children:
                proc.join(30)
                if proc.is_alive():
                    proc.terminate()
                    proc.join(5)
                end.close()
    if errors:
        if scraper is not None:
            scraper.stop()
        raise LoopbenchError("; ".join(errors))

    run = open_measurement(
        scenario, scenario_path, len(plans), base_url, opts, embedded=embedded, procs=len(jobs)
    )
    parts = {i: part for i, part, _ in jobs}
    try:
        for r in sorted(results, key=lambda r: r["index"]):
            run.merge_state(r["state"], f"client process {r['index']}")
            _copy_rows(run.writer, Path(r["run_dir"]))
        for d in dead:
            _salvage(run, d, parts[d.index])
        if interrupted and not run.interrupted:
            run.stop_early("run interrupted before every rollout finished", interrupted=True)
    except BaseException:
        run.close()
        raise
    summary = run.finish(finish_scrape(scraper, run))
    if opts.render:
        render_run_safely(run.run_dir)
    return RunResult(run.run_dir, summary, run)
