"""Master side of a distributed run: hand out work, collect rows and histograms, write results.

The master owns the plan (:class:`~.work.WorkQueue`), answers claims, writes
record rows as workers ship them, and at the end merges the workers'
accumulators — HDR histograms merged bucket by bucket, so merged percentiles
are exactly those of one histogram of every sample — into the same results
folder ``loopbench run`` writes (``harness.report.results.ResultsWriter``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent

from harness.locust_driver.net import now_ns
from harness.locust_driver.protocol import MSG_WORK, RunConfig
from harness.locust_driver.wire import plan_to_wire, rollout_from_row, turn_from_row
from harness.locust_driver.work import Claim, WorkQueue
from harness.metrics.summary import Accumulator
from harness.report.results import ResultsWriter, new_run_id
from harness.workload.rollout import generate_rollouts
from harness.workload.scenario import Scenario

log = logging.getLogger("loopbench.locust")

#: client CPU above this share of one core: the worker itself may be the bottleneck
CPU_SATURATION_SHARE = 0.95
#: open loop: users are provisioned for rollouts due within this horizon
POOL_HORIZON_NS = 2_000_000_000
POOL_HEADROOM = 1.25
FINAL_WAIT_S = 30.0


@dataclass(slots=True)
class WorkerReport:
    rows_turns: int = 0
    rows_rollouts: int = 0
    final: dict[str, Any] | None = None


@dataclass(slots=True)
class MasterRun:
    config: RunConfig
    scenario: Scenario
    queue: WorkQueue
    writer: ResultsWriter
    started_wall_s: float
    started_mono_s: float
    time_limit_s: float | None
    workers: dict[str, WorkerReport] = field(default_factory=dict)
    pending: list[tuple[str, int]] = field(default_factory=list)
    users: int = 0
    stopping: bool = False
    finalized: bool = False
    partial: bool = False


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
    keepalive: bool = True
    verify_tls: bool = True
    api_key_env: str = ""
    hints: bool = True
    extra_manifest: dict[str, Any] = field(default_factory=dict)


class MasterSide:
    """One per master process.  ``send(msg_type, data, client_id)`` is ``runner.send_message``."""

    def __init__(self, options: MasterOptions, send: Callable[..., None]) -> None:
        self.options = options
        self._send = send
        self.run: MasterRun | None = None
        self.last_summary: dict[str, Any] | None = None
        self.last_run_dir: Path | None = None
        self.unrendered: Path | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def begin(self) -> RunConfig:
        from harness.run.runner import build_manifest

        opts = self.options
        scenario = opts.scenario
        run_id = self._fresh_run_id()
        config = RunConfig(
            run_id=run_id,
            target=opts.target,
            model=scenario.model,
            warmup_rollouts=scenario.load.warmup_rollouts,
            keepalive=opts.keepalive,
            verify_tls=opts.verify_tls,
            api_key_env=opts.api_key_env,
            hints=opts.hints,
        )
        load = scenario.load
        queue = WorkQueue(
            generate_rollouts(scenario),
            opts.transports,
            # Throughput mode is open loop with a derived rate: intended starts apply too.
            open_loop=load.mode != "closed",
            rounds=load.rounds if load.order == "interleaved" else 1,
        )
        manifest = build_manifest(
            scenario, opts.scenario_path, opts.transports, opts.target, opts.embedded, run_id
        )
        manifest["driver"] = "locust"
        manifest["locust"] = dict(opts.extra_manifest)
        writer = ResultsWriter(opts.results_root / run_id, manifest)
        self.run = MasterRun(
            config=config,
            scenario=scenario,
            queue=queue,
            writer=writer,
            started_wall_s=time.time(),
            started_mono_s=time.monotonic(),
            time_limit_s=opts.time_limit_s,
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
        load = run.scenario.load
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
        limit = run.time_limit_s
        if limit is not None and time.monotonic() - run.started_mono_s >= limit:
            run.partial = True
            return True
        return False

    def interrupt(self) -> None:
        """End the current run early (it is recorded as partial)."""
        if self.run is not None:
            self.run.partial = True

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
        run = self.run
        if run is None or data.get("run_id") != run.config.run_id:
            return
        run.workers.setdefault(node, WorkerReport())

    def on_claim(self, node: str, data: dict[str, Any]) -> None:
        run = self.run
        req = int(data["req"])
        if run is None or run.stopping:
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
        self._send(
            MSG_WORK,
            {
                "req": req,
                "kind": "run",
                "phase": claim.phase,
                "transport": claim.transport,
                "round": claim.round,
                "plan": plan_to_wire(claim.plan),
                "start_in_ns": claim.start_in_ns,
            },
            node,
        )

    def on_rows(self, node: str, data: dict[str, Any]) -> None:
        run = self.run
        if run is None or run.finalized or data.get("run_id") != run.config.run_id:
            return
        report = run.workers.setdefault(node, WorkerReport())
        self._write_rows(report, data)

    def on_final(self, node: str, data: dict[str, Any]) -> None:
        run = self.run
        if run is None or run.finalized or data.get("run_id") != run.config.run_id:
            return
        report = run.workers.setdefault(node, WorkerReport())
        self._write_rows(report, data)
        report.final = data

    def _write_rows(self, report: WorkerReport, data: dict[str, Any]) -> None:
        run = self.run
        assert run is not None
        for row in data.get("turns", ()):
            run.writer.add_turn(turn_from_row(row))
        for row in data.get("rollouts", ()):
            run.writer.add_rollout(rollout_from_row(row))
        report.rows_turns += len(data.get("turns", ()))
        report.rows_rollouts += len(data.get("rollouts", ()))

    # -- results ---------------------------------------------------------------------------------

    def finalize(self, wait_s: float = FINAL_WAIT_S, *, render: bool = True) -> Path | None:
        """Wait for every worker's final message (bounded), merge, write the results folder.

        ``render=False`` leaves report.md/report.html to :meth:`render_pending`, so a
        headless master can let its workers go before spending seconds on plots.
        """
        run = self.run
        if run is None or run.finalized:
            return None
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(w.final is None for w in run.workers.values()):
            gevent.sleep(0.05)
        run.finalized = True
        self.run = None
        merged = Accumulator(warmup_rollouts=run.scenario.load.warmup_rollouts)
        invalid: list[str] = []
        per_worker: dict[str, Any] = {}
        for node, report in sorted(run.workers.items()):
            final = report.final
            if final is None:
                invalid.append(f"worker {node}: no final report within {wait_s:g} s")
                per_worker[node] = {"final": False, "rows_turns": report.rows_turns}
                continue
            acc = Accumulator.from_state(final["state"])
            merged.merge(acc)
            cpu = float(final.get("cpu_share", 0.0))
            if cpu > CPU_SATURATION_SHARE:
                invalid.append(f"worker {node}: client CPU saturated: {cpu:.0%} of one core")
            per_worker[node] = {
                "final": True,
                "turns": int(final["turns_total"]),
                "rollouts": int(final["rollouts_total"]),
                "rows_turns": report.rows_turns,
                "rows_rollouts": report.rows_rollouts,
                "cpu_share": cpu,
                "accumulator_turns": {
                    name: t["counts"][0] for name, t in final["state"]["transports"].items()
                },
            }
            if report.rows_turns != int(final["turns_total"]):
                invalid.append(
                    f"worker {node}: rows received {report.rows_turns}, "
                    f"worker measured {final['turns_total']} turns"
                )
        summary = merged.summary(
            run_id=run.config.run_id,
            comparisons=_pairs(self.options.transports),
        )
        lag_limit = float(run.scenario.load.max_schedule_lag_ms)
        for name, t in summary.get("transports", {}).items():
            lag = t.get("schedule_lag_ms", {}).get("p99")
            if lag is not None and not math.isnan(lag) and lag > lag_limit:
                invalid.append(
                    f"{name}: schedule lag p99 {lag:.1f} ms exceeds "
                    f"load.max_schedule_lag_ms {lag_limit:g}"
                )
        if run.partial or not run.queue.done:
            invalid.append(
                f"run stopped before every rollout finished "
                f"({run.queue.finished}/{run.queue.total})"
            )
        summary["invalid_reasons"] = invalid
        summary["valid"] = not invalid
        summary["partial"] = not run.queue.done
        cpu_shares = [w["cpu_share"] for w in per_worker.values() if "cpu_share" in w]
        summary["client_cpu_share"] = round(max(cpu_shares), 3) if cpu_shares else None
        summary["scenario"] = run.scenario.name
        summary["seed"] = run.scenario.seed
        summary["locust"] = {
            "workers": per_worker,
            "users": run.users,
            "rollouts_scheduled": run.queue.total,
            "rollouts_finished": run.queue.finished,
        }
        run.writer.finish(summary, merged.histograms(), start_time_s=run.started_wall_s)
        self.unrendered = run.writer.path
        if render:
            self.render_pending()
        self.last_summary = summary
        self.last_run_dir = run.writer.path
        log.info("loopbench results: %s", run.writer.path)
        return run.writer.path

    def render_pending(self) -> None:
        """report.md, report.html and plots of the last results folder, as `loopbench run` writes."""
        run_dir, self.unrendered = self.unrendered, None
        if run_dir is None:
            return
        from harness.report.render import render_run_safely

        # Reports failures on stderr; the measured results are on disk already.
        render_run_safely(run_dir)


def _pairs(transports: list[str]) -> list[tuple[str, str]]:
    # As `loopbench run` without --baseline: http when present, else the first transport.
    base = "http" if "http" in transports else transports[0]
    return [(base, t) for t in transports if t != base]
