"""Run a scenario: the same seeded rollouts over each transport, records streamed to disk.

This is the asyncio orchestration layer: it runs the passes (each transport, per
interleaving round) and hands every record to the run's
:class:`~harness.run.measurement.Measurement` as it arrives (so an interrupted run
keeps what it measured), which writes the results and judges the run.

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
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.client.options import DEFAULT_SETTINGS, ClientSettings
from harness.metrics.results_model import Summary
from harness.report.render import render_run_safely
from harness.report.results import new_run_id
from harness.report.server_metrics import write_server_metrics
from harness.run.embedded import scenario_server
from harness.run.event_loop import run_async
from harness.run.interrupt import RunInterrupts
from harness.run.live_export import LiveExport
from harness.run.manifest import build_manifest
from harness.run.measurement import Measurement, pool_size
from harness.run.passes import ClientWatch, PassCounts, pass_duration, run_pass
from harness.run.progress import LineProgress, ProgressSink
from harness.run.rounds import interleaving_rounds
from harness.run.server_scrape import ServerScraper, embedded_metrics_url
from harness.transports import Transport, TransportOptions, make_transport
from harness.transports.rx_socket import resolve_rx_stamp
from harness.wire import quiet_gc
from harness.wire.errors import ResultsError, ResultsWriteError
from harness.wire.tokens import FIXED_WIDTH, TokenConvention
from harness.workload.plan import RolloutPlan, conversations
from harness.workload.records import TurnRecord
from harness.workload.rollout import generate_rollouts
from harness.workload.scenario import Load, RolloutConfig, Scenario

# How often live counters are handed to the progress display.
PROGRESS_TICK_S = 0.25


def _say_stderr(message: str) -> None:
    print(message, file=sys.stderr)


@dataclass(slots=True)
class RunOptions:
    transports: Sequence[str] | None = None
    target: str | None = None
    client: ClientSettings = DEFAULT_SETTINGS
    # sizes the synthetic text and counts streamed tokens (--tokenizer; default 4 characters)
    tokens: TokenConvention = FIXED_WIDTH
    results_root: Path = Path("results")
    run_id: str | None = None
    progress: bool = True
    baseline: str | None = None
    server_args: Sequence[str] = ()
    # Called synchronously with every turn record.  Tests use a blocking hook to stand in
    # for a slow, CPU-bound client and check that the run reports it fell behind.
    turn_hook: Callable[[TurnRecord], None] | None = None
    # False: write results but no report.md/plots (load tests that only read summary.json).
    render: bool = True
    # --prometheus-port: the exporter already serving; each run attaches its measurement to it
    live: LiveExport | None = None
    # --server-metrics URL: a Prometheus endpoint polled during the run (server_metrics.csv.gz);
    # without it the embedded server's /metrics, unless scrape_embedded is False.
    server_metrics: str | None = None
    server_metrics_interval_s: float = 1.0
    scrape_embedded: bool = True
    # Where the run's warnings go (an unreachable --server-metrics URL).
    # A module-level function, not a lambda: --procs sends the options to its children (pickled).
    say: Callable[[str], None] = field(default=_say_stderr)
    # the run id in each rollout's session-affinity value; None: the measurement's run id
    # (a --procs child measures under its own id, but its rollouts belong to the parent's run)
    session_run_id: str | None = None
    # --slice-s: the report's time-slice width, kept in manifest.json so `loopbench report`
    # rebuilds the same slices (None: automatic)
    slice_s: float | None = None

    def client_options(self) -> dict[str, Any]:
        """The manifest's ``client_options`` of this run."""
        return self.client.manifest_dict(
            tokenizer=self.tokens.name, rx_stamp=resolve_rx_stamp(self.client.rx_stamp)
        )


@dataclass(slots=True)
class RunResult:
    run_dir: Path
    summary: dict[str, Any]
    # The finished measurement, so a multi-process run (harness.run.procs) can merge them.
    measurement: Measurement | None = None

    @property
    def summary_model(self) -> Summary:
        """The summary written, read into its model."""
        return Summary.of(self.summary)

    def stop_if_interrupted(self) -> None:
        """For a command that runs several runs: Ctrl-C stopped this one, so stop there too
        (its results are written; ``main`` exits 130)."""
        if self.summary_model.interrupted:
            raise KeyboardInterrupt


def transport_options(
    base_url: str,
    opts: RunOptions,
    load: Load,
    rollout: RolloutConfig | None = None,
    plans: Sequence[RolloutPlan] = (),
) -> TransportOptions:
    """The asyncio client's settings for one target: ``opts`` and a pool sized to the load
    (and to the most conversations one of ``plans`` runs, sub-agents included)."""
    # A rollout's sub-agents send at the same time as it: no request may queue for a connection.
    widest = max(
        (len(conversations(p)) for p in plans if any(t.subagents for t in p.turns)), default=1
    )
    ws_subagents = opts.client.ws_subagents
    if ws_subagents is None:
        subagents = rollout.subagents if rollout is not None else None
        ws_subagents = subagents.ws if subagents is not None else "connection"
    return TransportOptions.of(
        opts.client,
        base_url,
        max_connections=pool_size(load) * widest,
        tokens=opts.tokens,
        ws_subagents=ws_subagents,
        rx_stamp=resolve_rx_stamp(opts.client.rx_stamp),
    )


def server_scraper(opts: RunOptions, base_url: str, *, embedded: bool) -> ServerScraper | None:
    """The run's ``--server-metrics`` poller, started; None when nothing is scraped."""
    url = opts.server_metrics
    if url is None and embedded and opts.scrape_embedded:
        url = embedded_metrics_url(base_url)
    if url is None:
        return None
    scraper = ServerScraper(
        url, opts.server_metrics_interval_s, say=opts.say, verify_tls=opts.client.verify_tls
    )
    return scraper if scraper.start() else None


def finish_scrape(scraper: ServerScraper | None, run: Measurement) -> dict[str, Any]:
    """Stop ``scraper``, write its file into the run; the summary's ``server_metrics`` block."""
    if scraper is None:
        return {}
    result = scraper.stop()
    if result.samples:
        try:
            write_server_metrics(run.run_dir, result.samples)
        except ResultsError as exc:
            # observability, not the measurement: the summary is still written
            scraper.say(f"warning: {exc}")
    return {"server_metrics": result.summary()}


def open_measurement(
    scenario: Scenario,
    scenario_path: str,
    planned: int,
    base_url: str,
    opts: RunOptions,
    *,
    embedded: bool,
    procs: int = 0,
) -> Measurement:
    """The run's measurement and its results folder; ``procs`` > 0 for a ``--procs`` parent."""
    transports = list(opts.transports or scenario.transports)
    run_id = opts.run_id or new_run_id(scenario.name, time.time())
    manifest = build_manifest(
        scenario, scenario_path, transports, base_url, embedded, run_id, opts.client_options()
    )
    if procs:
        manifest["procs"] = procs
    if opts.slice_s is not None:
        manifest["slice_s"] = opts.slice_s
    return Measurement(
        scenario,
        Path(opts.results_root) / run_id,
        manifest,
        transports,
        planned=planned,
        baseline=opts.baseline,
        several_processes=procs > 0,
    )


def measured_pass(
    run: Measurement,
    transport: Transport,
    plans: Sequence[RolloutPlan],
    round_index: int,
    live: PassCounts,
    duration_s: float | None,
    opts: RunOptions,
) -> Coroutine[Any, Any, None]:
    """One pass of ``transport`` whose records and schedule go to ``run``."""
    return run_pass(
        transport,
        plans,
        run.scenario,
        round_index,
        run.add_turn,
        run.add_rollout,
        live,
        run.schedules[transport.name],
        duration_s,
        hints=opts.client.hints,
        turn_hook=opts.turn_hook,
        run_id=opts.session_run_id or run.run_id,
    )


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
    run = open_measurement(scenario, scenario_path, len(plans), base_url, opts, embedded=embedded)
    with RunInterrupts(asyncio.current_task(), run.run_dir) as interrupts:
        summary = await _measure_and_write(
            run, scenario, plans, base_url, opts, interrupts, embedded, printer, progress
        )
    if interrupts.late:
        # Everything was written; the user still asked to stop, which a tool running
        # several runs must see.
        raise KeyboardInterrupt
    return RunResult(run.run_dir, summary, run)


async def _measure_and_write(
    run: Measurement,
    scenario: Scenario,
    plans: list[RolloutPlan],
    base_url: str,
    opts: RunOptions,
    interrupts: RunInterrupts,
    embedded: bool,
    printer: Callable[[str], None] | None,
    progress: ProgressSink | None,
) -> dict[str, Any]:
    if opts.live is not None:
        opts.live.attach(run)
    transports = run.transports
    if progress is None and printer is not None:
        progress = LineProgress(printer, interval_s=1.0)
    options = transport_options(base_url, opts, scenario.load, scenario.rollout, plans)
    load = scenario.load
    rounds = interleaving_rounds(plans, load.rounds if load.order == "interleaved" else 1)
    duration = pass_duration(load, len(rounds))
    # Built once, before the watch starts, and shared by the rounds: importing a
    # transport and building its TLS context block the loop for tens to hundreds of ms,
    # which is set-up, not the client falling behind.
    clients = {name: make_transport(name, options) for name in transports}
    scraper = server_scraper(opts, base_url, embedded=embedded)
    watch = ClientWatch()
    failed: ResultsWriteError | None = None
    try:
        for round_index, chunk in enumerate(rounds):
            for name in transports:
                live = PassCounts(total=len(chunk))
                started = time.perf_counter_ns()
                task = asyncio.ensure_future(
                    measured_pass(run, clients[name], chunk, round_index, live, duration, opts)
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
                quiet_gc.collect_between_passes()  # nothing in flight: the pass's cycles go
    except (asyncio.CancelledError, KeyboardInterrupt):
        run.stop_early("run interrupted before every rollout finished", interrupted=True)
    except Exception as exc:
        # A results file could not be written (it surfaces wrapped in the rollout's task
        # group): the run ends now, with one line, not a traceback after the whole load.
        failed = write_failure(exc)
        if failed is None:
            raise
    finally:
        interrupts.writing = True
        run.clients.append(await watch.stop())
        for client in clients.values():
            await client.aclose()
        if progress is not None:
            progress.close()
        if failed is not None:
            if scraper is not None:
                scraper.stop()
            # No summary over rows that stop short: the folder reads as a killed run's.
            run.close()
        else:
            summary = run.finish(finish_scrape(scraper, run))
            if opts.render:
                render_run_safely(run.run_dir)
    if failed is not None:
        raise failed
    return summary


def write_failure(exc: BaseException) -> ResultsWriteError | None:
    """The results-file write that failed, if that is what ``exc`` is or wraps."""
    if isinstance(exc, ResultsWriteError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        return next(filter(None, map(write_failure, exc.exceptions)), None)
    return None


def run_scenario(
    scenario: Scenario,
    scenario_path: str,
    opts: RunOptions,
    printer: Callable[[str], None] | None = None,
    progress: ProgressSink | None = None,
) -> RunResult:
    """Run synchronously: start the embedded server unless ``opts.target`` is set."""
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
        return run_async(coro)

    if opts.target:
        return go(opts.target, False)
    with scenario_server(scenario, opts.server_args) as url:
        return go(url, True)
