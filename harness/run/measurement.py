"""One measured run, from an open results folder to ``summary.json``: the run lifecycle.

``loopbench run``, ``run --procs``, ``gate --ab`` and the Locust master each get
their records differently (passes in this process, child processes, interleaved
A/B rounds, Locust worker messages); everything else about a run is here, once:
the results writer and accumulator fed by every record, what happened to the
intended starts (:class:`ScheduleStats`), the measuring processes' health, the
validity rules (:mod:`harness.run.validity`), which transport is the baseline of
the speedup comparisons, the client's connection pool, and the summary.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.metrics.results_model import Manifest, Summary
from harness.metrics.rx_stamps import RxStampStats
from harness.metrics.sample_size import sample_size_reasons
from harness.metrics.summary import Accumulator
from harness.report.error_summary import error_block
from harness.report.results import ResultsWriter
from harness.run.health import ClientHealth, client_summary
from harness.run.schedule_stats import ScheduleStats
from harness.run.validity import validity_reasons
from harness.wire.transports import comparison_pairs
from harness.workload.records import RolloutRecord, TurnRecord
from harness.workload.rollout import (
    load_scenario_trace,
    scenario_trace_gaps,
    throughput_derivation,
)
from harness.workload.scenario import Load, Scenario

#: connection pool of an open loop without max_in_flight (rollouts in flight are unbounded)
OPEN_LOOP_CONNECTIONS = 1024


def pool_size(load: Load) -> int:
    """Client connections per transport, sized so that requests never queue for one.

    A closed loop has ``concurrency`` rollouts in flight, an open loop as many as
    arrive (at most ``max_in_flight``).
    """
    if load.mode == "closed":
        return max(16, load.concurrency * 2)
    return max(16, load.max_in_flight or OPEN_LOOP_CONNECTIONS)


def load_summary(scenario: Scenario, rollouts: int) -> dict[str, Any]:
    """The summary's ``load`` block: the load the run was asked to apply."""
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
    gaps = scenario_trace_gaps(scenario)
    if gaps:
        # the replayed trace is not all the recorded agent did: the results say so too
        out["trace_lost"] = gaps
    return out


class Measurement:
    """One run's results folder, accumulator, schedules and client health; :meth:`finish`
    judges validity and writes ``summary.json``.

    Per record it costs what writing the row and folding it into the accumulator
    cost; everything else happens once per run.  ``several_processes``: the run
    is measured by more than one process (``--procs``, Locust workers), so the
    summary's ``client`` block lists them.
    """

    def __init__(
        self,
        scenario: Scenario,
        run_dir: Path,
        manifest: Mapping[str, Any],
        transports: Sequence[str],
        *,
        planned: int,
        baseline: str | None = None,
        several_processes: bool = False,
    ) -> None:
        self.scenario = scenario
        opened = Manifest.of(manifest)
        self.run_id = opened.run_id
        self.hints = opened.hints
        self.transports = list(transports)
        self.baseline = baseline
        self.planned = planned
        self.several_processes = several_processes
        # The plan's size goes to disk first: after a kill -9 it is what tells a transport
        # that stopped part way from one that finished (harness/report/rebuild.py).
        self.writer = ResultsWriter(run_dir, {**manifest, "rollouts_planned": planned})
        # One process runs each rollout whole: its turns arrive before its record.
        self.acc = Accumulator(
            warmup_rollouts=scenario.load.warmup_rollouts,
            slo=scenario.slo.thresholds(),
            fold_rollouts=True,
        )
        self.schedules = {name: ScheduleStats() for name in self.transports}
        self.late_ns = round(scenario.load.max_schedule_lag_ms * 1e6)
        self.clients: list[ClientHealth] = []
        self.reasons: list[str] = []
        self.partial = False
        # Ctrl-C / SIGTERM ended the run (``loopbench run`` exits 130); partial covers more.
        self.interrupted = False
        # {transport: {error kind: the first message of that kind}}: the example per kind that
        # the console and the summary's ``errors`` block print next to the count.
        self.error_examples: dict[str, dict[str, str]] = {}
        self.summary: dict[str, Any] | None = None
        #: receive stamps per transport (docs/metrics.md §1.9)
        self.rx = RxStampStats()

    @property
    def run_dir(self) -> Path:
        return self.writer.path

    # -- records (per event: keep these two calls and nothing more) ---------------------------

    def add_turn(self, rec: TurnRecord) -> None:
        self.rx.add(rec)  # first: past the diagnostic window, the row keeps one stamp only
        self.writer.add_turn(rec)
        self.acc.add_turn(rec)
        if not rec.ok:
            self.note_error(rec.transport, rec.error_kind or rec.status, rec.error_message)

    def note_error(self, transport: str, kind: str, message: str) -> None:
        """Keep the first message of each error kind as that kind's example."""
        seen = self.error_examples.setdefault(transport, {})
        if kind not in seen and message:
            # The row's message starts with its kind, which the summary shows next to it.
            seen[kind] = message.removeprefix(f"{kind}: ")

    def add_rollout(self, rec: RolloutRecord) -> None:
        self.writer.add_rollout(rec)
        self.acc.add_rollout(rec)

    def add_rollout_row(self, rec: RolloutRecord) -> None:
        """A rollout whose statistics arrive merged later (Locust): its row and its start."""
        self.writer.add_rollout(rec)
        sched = self.schedules.get(rec.transport)
        if sched is not None and rec.rollout_id >= self.acc.warmup_rollouts:
            sched.observe(rec, self.late_ns)

    # -- run state ------------------------------------------------------------------------------

    def stop_early(self, reason: str, *, interrupted: bool = False) -> None:
        """The run ends before its plan did: partial, and invalid for ``reason``.

        ``interrupted``: by the user (Ctrl-C, SIGTERM), which the summary says apart.
        """
        self.partial = True
        self.interrupted = self.interrupted or interrupted
        self.reasons.append(reason)

    def to_state(self) -> dict[str, Any]:
        """What another process needs to fold this run into its own (``--procs``)."""
        return {
            "accumulator": self.acc.to_state(),
            "schedules": {name: s.to_state() for name, s in self.schedules.items()},
            "clients": [c.to_state() for c in self.clients],
            "partial": self.partial,
            "interrupted": self.interrupted,
            "reasons": list(self.reasons),
            "error_examples": self.error_examples,
            "rx_stamps": self.rx.to_state(),
        }

    def merge_state(self, state: Mapping[str, Any], name: str) -> None:
        """Fold in the run of process ``name``; its own reasons and health keep its name."""
        self.acc.merge(Accumulator.from_state(state["accumulator"]))
        for transport, s in state["schedules"].items():
            self.schedules.setdefault(transport, ScheduleStats()).merge(ScheduleStats.from_state(s))
        self.clients += [ClientHealth.from_state(c, name=name) for c in state["clients"]]
        self.partial = self.partial or bool(state["partial"])
        self.interrupted = self.interrupted or bool(state.get("interrupted"))
        for transport, kinds in (state.get("error_examples") or {}).items():
            for kind, message in kinds.items():
                self.note_error(transport, kind, message)
        self.reasons += [f"{name}: {r}" for r in state["reasons"]]
        self.rx.merge(state.get("rx_stamps") or {})

    # -- the end --------------------------------------------------------------------------------

    def assemble(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The summary: the accumulator's statistics, schedules, validity, client, load."""
        summary = self.acc.summary(
            run_id=self.run_id,
            comparisons=comparison_pairs(self.transports, self.baseline),
            hints=self.hints,
        )
        for name, t in summary["transports"].items():
            sched = self.schedules.get(name)
            if sched is not None:
                t["schedule"] = sched.as_dict()
            rx = self.rx.summary(name)
            if rx is not None:
                t["rx_stamp"] = rx
        # read back once as the model: every judgement below reads attributes
        model = Summary.of(summary)
        errors = error_block(model.transports, self.error_examples)
        reasons = validity_reasons(
            model, self.schedules, self.scenario.load, self.clients, errors, self.reasons
        )
        summary["invalid_reasons"] = reasons
        summary["valid"] = not reasons
        # Stated, not invalidating: nearly every short run has p99 from < 100 samples, and a
        # rule that failed them all would be ignored; the number is marked and the reason kept.
        summary["sample_size_notes"] = sample_size_reasons(model)
        summary["partial"] = self.partial
        summary["interrupted"] = self.interrupted
        summary["errors"] = errors
        summary["not_run"] = self.not_run(model.transports)
        summary["client_cpu_share"], summary["client"] = client_summary(
            self.clients, self.several_processes
        )
        summary["load"] = load_summary(self.scenario, self.planned)
        summary["scenario"] = self.scenario.name
        summary["seed"] = self.scenario.seed
        summary.update(extra or {})
        return summary

    def not_run(self, ran: Collection[str]) -> dict[str, Any]:
        """What of the plan never ran: transports with no record (not in ``ran``), per
        transport the measured rollouts never begun (not started, or in a later round), and
        those cut off mid-way (``cancelled``: their turns so far are kept, the rollout is not
        recorded)."""
        measured = max(0, self.planned - self.scenario.load.warmup_rollouts)
        rollouts: dict[str, int] = {}
        cancelled: dict[str, int] = {}
        for name in self.transports:
            sched = self.schedules.get(name) or ScheduleStats()
            left = max(0, measured - sched.started - sched.dropped - sched.cancelled)
            if left:
                rollouts[name] = left
            if sched.cancelled:
                cancelled[name] = sched.cancelled
        return {
            "transports": [name for name in self.transports if name not in ran],
            "rollouts": rollouts,
            "cancelled": cancelled,
        }

    def finish(
        self, extra: Mapping[str, Any] | None = None, *, start_time_s: float | None = None
    ) -> dict[str, Any]:
        """Write histograms and ``summary.json`` (closing the row files); returns the summary."""
        try:
            summary = self.assemble(extra)
        except BaseException:
            # Whatever went wrong, the rows measured so far are flushed and readable.
            self.writer.close()
            raise
        self.writer.finish(summary, self.acc.histograms(), start_time_s=start_time_s)
        self.summary = summary
        return summary

    def close(self) -> None:
        self.writer.close()
