"""Master side of a distributed run: hand out work, collect rows and histograms, write results
(docs/distributed.md, "What runs where").

The workers' accumulators merge into the run's :class:`~harness.run.measurement.Measurement`
bucket by bucket, so merged percentiles are exactly those of one histogram of every sample.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent

from harness.client.options import DEFAULT_SETTINGS, ClientSettings
from harness.locust_driver.clock import now_ns
from harness.locust_driver.protocol import MSG_WORK, RunConfig, version_mismatch
from harness.locust_driver.wire import rollout_from_row, turn_from_row, work_message
from harness.locust_driver.work import Claim, WorkQueue
from harness.metrics.summary import Accumulator
from harness.report.render import render_run_safely
from harness.report.results import new_run_id
from harness.run.health import ClientHealth
from harness.run.manifest import build_manifest
from harness.run.measurement import Measurement
from harness.wire.errors import LoopbenchError, ResultsWriteError
from harness.wire.plural import counted
from harness.wire.version import loopbench_version
from harness.workload.rollout import generate_rollouts
from harness.workload.scenario import Scenario

log = logging.getLogger("loopbench.locust")

#: open loop: users are provisioned for rollouts due within this horizon
POOL_HORIZON_NS = 2_000_000_000
POOL_HEADROOM = 1.25
#: after the stop: how long the master waits for each live worker's final report
FINAL_WAIT_S = 30.0
#: when the master process itself is quitting (SIGTERM to it, the web UI's quit): its
#: workers got the quit at the same moment, so their finals are due at once
QUIT_WAIT_S = 2.0
#: the manifest's ``client_options.rx_stamp`` of a Locust run: each worker resolves its own
PER_WORKER = "per-worker"


@dataclass(slots=True)
class WorkerReport:
    #: the worker's statistics rebuilt from the rows it shipped: what the run keeps of a
    #: worker that sends no final report (it died), so the summary agrees with the rows
    shadow: Accumulator
    rows_turns: int = 0
    rows_rollouts: int = 0
    final: dict[str, Any] | None = None
    pid: int | None = None
    #: (phase, rollout id) claimed by this worker whose rollout row has not arrived
    held: set[tuple[int, int]] = field(default_factory=set)
    #: why the worker is gone ("" while it is live)
    lost: str = ""
    lost_rollouts: int = 0

    def name(self, node: str) -> str:
        return f"{node} (pid {self.pid})" if self.pid is not None else node


@dataclass(slots=True)
class MasterRun:
    config: RunConfig
    queue: WorkQueue
    measurement: Measurement
    started_wall_s: float
    started_mono_s: float
    workers: dict[str, WorkerReport] = field(default_factory=dict)
    pending: list[tuple[str, int]] = field(default_factory=list)
    users: int = 0
    stopping: bool = False
    finalized: bool = False
    partial: bool = False
    #: (round, transport) -> phase index, to match a rollout row to its claim
    phase_of: dict[tuple[int, str], int] = field(default_factory=dict)
    #: the `loopbench locust` process that started this master died (reason), "" if not
    orphaned: str = ""


@dataclass(frozen=True, slots=True)
class MasterOptions:
    scenario: Scenario
    scenario_path: str
    transports: list[str]
    target: str
    embedded: bool
    results_root: Path
    run_id: str | None
    time_limit_s: float | None
    #: the flags and the scenario's target: resolved (no API key: the workers read their own)
    client: ClientSettings = DEFAULT_SETTINGS
    api_key_env: str = ""
    extra_manifest: dict[str, Any] = field(default_factory=dict)
    #: the tokenizer file ("" for none)
    tokenizer: str = ""
    #: False: --no-report (results without report.md, report.html and plots/)
    render: bool = True


class MasterSide:
    """One per master process.  ``send(msg_type, data, client_id)`` is ``runner.send_message``."""

    def __init__(self, options: MasterOptions, send: Callable[..., None]) -> None:
        self.options = options
        self._send = send
        self.run: MasterRun | None = None
        self.last_summary: dict[str, Any] | None = None
        self.unrendered: Path | None = None
        #: a results file could not be written: the one line said, the run ended ("" if not)
        self.write_failed = ""
        #: a worker of another loopbench version joined: the one line said ("" if none did)
        self.refused = ""
        self.version = loopbench_version()

    # -- lifecycle -------------------------------------------------------------------------------

    def begin(self) -> RunConfig | None:
        """Start the run: its settings for the workers, its queue and results folder.

        None once a version refusal or a failed write ended the run: the shape's next tick
        must not start a second run that would never run, with a summary of its own.
        """
        if self.refused or self.write_failed:
            return None
        opts = self.options
        scenario = opts.scenario
        run_id = self._fresh_run_id()
        config = RunConfig(
            run_id=run_id,
            target=opts.target,
            model=scenario.model,
            warmup_rollouts=scenario.load.warmup_rollouts,
            slo=json.dumps(scenario.slo.thresholds()),
            client=opts.client,
            api_key_env=opts.api_key_env,
            tokenizer=opts.tokenizer,
            loopbench=self.version,
        )
        load = scenario.load
        plans = generate_rollouts(scenario)
        queue = WorkQueue(
            plans,
            opts.transports,
            # Throughput mode is open loop with a derived rate: intended starts apply too.
            open_loop=load.mode != "closed",
            rounds=load.rounds if load.order == "interleaved" else 1,
        )
        manifest = build_manifest(
            scenario,
            opts.scenario_path,
            opts.transports,
            opts.target,
            opts.embedded,
            run_id,
            # each worker's edge host resolves --rx-stamp on its own machine; the summary
            # counts the turns stamped each way (docs/metrics.md §1.9)
            opts.client.manifest_dict(tokenizer=opts.tokenizer or "4-chars", rx_stamp=PER_WORKER),
        )
        manifest["driver"] = "locust"
        manifest["locust"] = dict(opts.extra_manifest)
        measurement = Measurement(
            scenario,
            opts.results_root / run_id,
            manifest,
            opts.transports,
            planned=len(plans),
            several_processes=True,
        )
        warmup = load.warmup_rollouts
        for phase in queue.phases:
            measurement.schedules[phase.transport].intended += sum(
                1 for p in phase.plans if p.rollout_id >= warmup
            )
        self.run = MasterRun(
            config=config,
            queue=queue,
            measurement=measurement,
            started_wall_s=time.time(),
            started_mono_s=time.monotonic(),
            phase_of={(p.round, p.transport): i for i, p in enumerate(queue.phases)},
        )
        log.info("loopbench run %s: %d rollouts to run", run_id, queue.total)
        return config

    def _fresh_run_id(self) -> str:
        opts = self.options
        base = opts.run_id or new_run_id(opts.scenario.name, time.time())
        run_id, n = base, 1
        # The web UI can start several tests from one master: each gets its own folder.
        while (opts.results_root / run_id / "manifest.json").exists():
            n += 1
            run_id = f"{base}-{n}"
        return run_id

    def target_users(self) -> int:
        """Locust users wanted now (see docs/distributed.md, "Load shapes")."""
        run = self.run
        assert run is not None
        load = self.options.scenario.load
        queue = run.queue
        if load.mode == "closed":
            longest = max((len(p.plans) for p in queue.phases), default=1)
            run.users = max(1, min(load.concurrency, longest))
        else:
            # Open loop: arrivals follow the schedule exactly (claims carry the intended
            # start); users are only the pool that runs them.  Never shrink the pool:
            # Locust stops surplus users by killing them, mid-rollout.
            need = queue.in_flight + queue.due_within(now_ns(), POOL_HORIZON_NS) + 1
            if need > run.users:
                # Grow with headroom: every change of the user count is a spawn message,
                # which costs each worker a pause (see locustfile._on_init).
                run.users = math.ceil(need * POOL_HEADROOM)
        return run.users

    def should_stop(self) -> bool:
        run = self.run
        if run is None:
            return False
        if run.queue.done:
            return True
        limit = self.options.time_limit_s
        if limit is not None and time.monotonic() - run.started_mono_s >= limit:
            run.partial = True
            return True
        return False

    def interrupt(self) -> None:
        """End the current run early (partial, and interrupted as `loopbench run` says it)."""
        if self.run is not None:
            self.run.partial = True
            self.run.measurement.interrupted = True

    def orphan(self, why: str) -> None:
        """The process that started this master is gone: end the run, saying so."""
        run = self.run
        if run is not None and not run.orphaned:
            run.partial = True
            run.orphaned = why
            run.measurement.reasons.append(f"orphaned: {why}")

    def _report(self, node: str) -> WorkerReport:
        run = self.run
        assert run is not None
        report = run.workers.get(node)
        if report is None:
            report = run.workers[node] = WorkerReport(
                Accumulator(
                    warmup_rollouts=self.options.scenario.load.warmup_rollouts,
                    slo=self.options.scenario.slo.thresholds(),
                )
            )
        return report

    def worker_lost(self, node: str, why: str) -> None:
        """A worker stopped answering (Locust marked it missing): what it held is lost.

        Its rollouts not recorded yet (claimed, or reported finished but their row never
        shipped) end as lost so the run can end; its rows already shipped stay, and its
        statistics are rebuilt from them.  Later messages from it are ignored.
        """
        run = self.run
        if run is None or run.finalized:
            return
        report = run.workers.get(node)
        if report is None or report.lost or report.final is not None:
            return
        report.lost = why
        report.lost_rollouts = len(report.held)
        phase_before = run.queue.current
        for phase, rollout_id in sorted(report.held):
            run.queue.lose(phase, rollout_id)
        report.held.clear()
        seconds = time.monotonic() - run.started_mono_s
        log.warning(
            "loopbench: worker %s lost %.1f s into the run (%s); %d rollouts counted lost",
            report.name(node),
            seconds,
            why,
            report.lost_rollouts,
        )
        run.measurement.reasons.append(
            f"worker {report.name(node)} lost {seconds:.1f} s into the run ({why}): "
            f"{counted(report.lost_rollouts, 'rollout')} it held counted lost; its statistics "
            f"are those of the {counted(report.rows_turns, 'turn row')} it shipped"
        )
        if run.queue.current != phase_before and run.pending and not run.stopping:
            held, run.pending = run.pending, []
            for client, pending_req in held:
                self._answer(client, pending_req)

    def mark_stopping(self) -> None:
        """No more work: answer every held claim with ``done``."""
        run = self.run
        if run is None:
            return
        run.stopping = True
        for client, req in run.pending:
            self._send(MSG_WORK, {"req": req, "kind": "done"}, client)
        run.pending.clear()

    # -- messages --------------------------------------------------------------------------------

    def on_hello(self, node: str, data: dict[str, Any]) -> None:
        mismatch = version_mismatch(data, self.version, me="master", them=f"worker {node}")
        if mismatch is not None:
            # Said once (every worker of the other version says hello); the locustfile ends
            # the run with the usage code.
            if not self.refused:
                self.refused = str(mismatch)
                print(f"error: {mismatch}", file=sys.stderr, flush=True)
                # Nothing was measured: no summary of a run that never ran.
                self._drop_run()
            return
        run = self.run
        if run is None or data.get("run_id") != run.config.run_id:
            return
        pid = data.get("pid")
        self._report(node).pid = int(pid) if pid is not None else None

    def on_claim(self, node: str, data: dict[str, Any]) -> None:
        run = self.run
        req = int(data["req"])
        if run is None or run.stopping or self._report(node).lost:
            self._send(MSG_WORK, {"req": req, "kind": "done"}, node)
            return
        finished = data.get("finished")
        phase_before = run.queue.current
        if finished:
            run.queue.finish(int(finished[0]), int(finished[1]))
        self._answer(node, req)
        if run.queue.current != phase_before and run.pending:
            held, run.pending = run.pending, []
            for client, pending_req in held:
                self._answer(client, pending_req)

    def _answer(self, node: str, req: int) -> None:
        run = self.run
        assert run is not None
        claim: Claim = run.queue.claim(now_ns())
        if claim.kind == "wait":
            run.pending.append((node, req))
            return
        if claim.kind == "done" or claim.plan is None:
            self._send(MSG_WORK, {"req": req, "kind": "done"}, node)
            return
        self._report(node).held.add((claim.phase, claim.plan.rollout_id))
        self._send(MSG_WORK, work_message(req, claim), node)

    def on_rows(self, node: str, data: dict[str, Any]) -> None:
        try:
            self._write_rows(node, data)
        except ResultsWriteError as exc:
            self._write_failure(exc)

    def on_final(self, node: str, data: dict[str, Any]) -> None:
        try:
            report = self._write_rows(node, data)
        except ResultsWriteError as exc:
            self._write_failure(exc)
            return
        if report is not None:
            report.final = data

    def _write_failure(self, exc: ResultsWriteError) -> None:
        """A results file could not be written: end the run now, in one line, rows kept.

        No summary over rows that stop short (the folder reads as a killed run's); the
        locustfile sees :attr:`write_failed` and quits with exit 4.
        """
        if self.write_failed:
            return
        self.write_failed = str(exc)
        print(f"error: {exc}", file=sys.stderr, flush=True)
        self._drop_run()

    def _drop_run(self) -> None:
        """End the current run without a summary (the folder reads as a killed run's)."""
        run = self.run
        if run is None:
            return
        self.mark_stopping()
        run.finalized = True
        self.run = None
        with contextlib.suppress(OSError, LoopbenchError):
            run.measurement.close()

    def _write_rows(self, node: str, data: dict[str, Any]) -> WorkerReport | None:
        """Write a worker's rows of the current run; None (nothing written) for a stale message."""
        run = self.run
        if run is None or run.finalized or data.get("run_id") != run.config.run_id:
            return None
        report = self._report(node)
        if report.lost:
            # Its held rollouts were counted lost: rows now would be counted twice.
            return None
        measurement = run.measurement
        for row in data.get("turns", ()):
            rec = turn_from_row(row)
            measurement.rx.add(rec)  # stamp kinds are counted from the rows, as in `run`
            measurement.writer.add_turn(rec)
            report.shadow.add_turn(rec)
            if not rec.ok:
                # The statistics arrive merged; the example message of each kind comes from here.
                measurement.note_error(
                    rec.transport, rec.error_kind or rec.status, rec.error_message
                )
        for row in data.get("rollouts", ()):
            roll = rollout_from_row(row)
            measurement.add_rollout_row(roll)
            report.shadow.add_rollout(roll)
            report.held.discard(
                (run.phase_of.get((roll.round, roll.transport), -1), roll.rollout_id)
            )
        report.rows_turns += len(data.get("turns", ()))
        report.rows_rollouts += len(data.get("rollouts", ()))
        return report

    # -- results ---------------------------------------------------------------------------------

    def finalize(self, wait_s: float = FINAL_WAIT_S, *, render: bool = True) -> Path | None:
        """Wait for every worker's final message (bounded), merge, write the results folder.

        ``render=False`` leaves report.md/report.html to :meth:`render_pending`, so a
        headless master can let its workers go before spending seconds on plots.
        """
        run = self.run
        if run is None or run.finalized:
            return None
        if run.orphaned:
            wait_s = 0.0  # its workers were started by the same dead process: none will report
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(
            w.final is None and not w.lost for w in run.workers.values()
        ):
            gevent.sleep(0.05)
        run.finalized = True
        self.run = None
        measurement = run.measurement
        per_worker: dict[str, Any] = {}
        lost_rollouts = 0
        for node, report in sorted(run.workers.items()):
            final = report.final
            if final is None:
                if not report.lost:
                    measurement.reasons.append(
                        f"worker {report.name(node)}: no final report within {wait_s:g} s; "
                        f"its statistics are those of the {report.rows_turns} turn rows it shipped"
                    )
                # What it shipped is on disk: the summary counts exactly that.
                measurement.acc.merge(report.shadow)
                lost_rollouts += report.lost_rollouts + len(report.held)
                per_worker[node] = {
                    "final": False,
                    "pid": report.pid,
                    "lost": report.lost or "no final report",
                    "rows_turns": report.rows_turns,
                    "rows_rollouts": report.rows_rollouts,
                    "rollouts_lost": report.lost_rollouts + len(report.held),
                }
                continue
            measurement.acc.merge(Accumulator.from_state(final["state"]))
            measurement.clients.append(ClientHealth.from_state(final["health"], f"worker {node}"))
            per_worker[node] = {
                "final": True,
                "pid": report.pid,
                "turns": int(final["turns_total"]),
                "rollouts": int(final["rollouts_total"]),
                "rows_turns": report.rows_turns,
                "rows_rollouts": report.rows_rollouts,
                "cpu_share": round(float(final["health"]["cpu_share"]), 4),
                "accumulator_turns": {
                    name: int(t["turns"]) for name, t in final["state"]["transports"].items()
                },
            }
            if report.rows_turns != int(final["turns_total"]):
                measurement.reasons.append(
                    f"worker {node}: rows received {report.rows_turns}, "
                    f"worker measured {counted(int(final['turns_total']), 'turn')}"
                )
        warmup = self.options.scenario.load.warmup_rollouts
        for name, sched in measurement.schedules.items():
            # Begun but never recorded (in flight at the stop, or held by a lost worker)
            # shows as cancelled: intended = started + cancelled + dropped + not_started.
            sched.not_started = min(
                max(0, sched.intended - sched.started - sched.dropped),
                run.queue.unclaimed(name, warmup),
            )
        if run.partial or not run.queue.done:
            measurement.reasons.append(
                f"run stopped before every rollout finished "
                f"({run.queue.finished}/{run.queue.total})"
            )
        measurement.partial = run.partial or not run.queue.done or run.queue.lost > 0
        rows_rollouts = sum(w.rows_rollouts for w in run.workers.values())
        extra: dict[str, Any] = {
            "locust": {
                "workers": per_worker,
                "users": run.users,
                "rollouts_scheduled": run.queue.total,
                # from the rollout rows on disk; a rollout reported done whose row never
                # arrived (its worker died first) is lost, not finished
                "rollouts_finished": rows_rollouts,
                "rollouts_lost": lost_rollouts,
            }
        }
        if run.orphaned:
            extra["orphaned"] = run.orphaned
        try:
            summary = measurement.finish(
                extra,
                start_time_s=run.started_wall_s,
            )
        except ResultsWriteError as exc:
            self._write_failure(exc)
            return None

        # An orphan has no one to read its report and seconds to live: `loopbench report`
        # renders the folder later.
        self.unrendered = None if run.orphaned else measurement.run_dir
        if render:
            self.render_pending()
        self.last_summary = summary
        log.info("loopbench results: %s", measurement.run_dir)
        return measurement.run_dir

    def render_pending(self) -> None:
        """report.md, report.html and plots of the last results folder, as `loopbench run` writes."""
        run_dir, self.unrendered = self.unrendered, None
        if run_dir is None or not self.options.render:
            return
        # Reports failures on stderr; the measured results are on disk already.
        render_run_safely(run_dir)
