"""``summary.json`` rebuilt from the flushed rows of a run that never wrote one (a ``kill -9``).

The rows go through the accumulator a live run uses; the summary says what it is
(``rebuilt``, ``partial``, ``interrupted``, invalid with that reason first, so the verdict
line opens with it).  What only the live process knew (schedule lag, client CPU and loop
lag, rollouts never begun) is absent, not guessed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from harness.metrics.results_model import Summary, as_summary
from harness.metrics.rx_stamps import RxStampStats
from harness.metrics.summary import Accumulator
from harness.report.error_summary import error_block
from harness.report.results import SUMMARY, Run, load_run, write_summary
from harness.wire.errors import ResultsError
from harness.wire.plural import counted
from harness.wire.transports import comparison_pairs
from harness.workload.records import RolloutRecord, TurnRecord

#: the first reason of a rebuilt summary (the verdict line starts with it)
REBUILT_REASON = (
    "rebuilt by loopbench report from the rows of a run that did not finish "
    "(the harness was killed before it wrote summary.json): {turns} and {rollouts} "
    "were on disk; schedule and client health are unknown"
)


def row_records(table: Any, cls: type) -> Iterable[Any]:
    """The records of a results table's rows (an empty cell: the field's default)."""
    names = [f.name for f in fields(cls) if f.name != "itl_ns"]
    types = {f.name: f.type for f in fields(cls)}
    for row in table.itertuples(index=False):
        values: dict[str, Any] = {}
        for name in names:
            v = getattr(row, name, None)
            if v is None or (isinstance(v, float) and math.isnan(v)):
                continue
            t = types[name]
            if t == "bool":
                values[name] = v if isinstance(v, bool) else str(v).lower() in ("true", "1")
            elif t == "int":
                values[name] = int(v)
            elif t in ("float", "float | None"):  # an empty cell (None) was skipped above
                values[name] = float(v)
            else:
                values[name] = str(v)
        yield cls(**values)


def rebuild_summary(run_dir: str | Path) -> dict[str, Any]:
    """Fold the rows of ``run_dir`` into ``summary.json`` (written); returns it.

    Refuses a folder that already has a summary: a finished run is never rewritten.
    """
    run = load_run(run_dir)
    if run.finished:
        raise ResultsError(f"{run.path / SUMMARY}: exists; only an unfinished run is rebuilt")
    return _write(run)


def _write(run: Run) -> dict[str, Any]:
    manifest = run.manifest_model
    facts = manifest.scenario_facts
    acc = Accumulator(warmup_rollouts=facts.warmup_rollouts, slo=facts.slo)
    examples: dict[str, dict[str, str]] = {}
    rx = RxStampStats()
    turns = 0
    for rec in row_records(run.turns, TurnRecord):
        acc.add_turn(rec)
        rx.add(rec)
        turns += 1
        if not rec.ok and rec.error_message:
            kind = rec.error_kind or rec.status
            examples.setdefault(rec.transport, {}).setdefault(
                kind, rec.error_message.removeprefix(f"{kind}: ")
            )
    rollouts = 0
    for roll in row_records(run.rollouts, RolloutRecord):
        acc.add_rollout(roll)
        rollouts += 1
    planned = list(manifest.transports) or acc.transports
    summary = acc.summary(
        run_id=run.run_id,
        comparisons=comparison_pairs(planned),
        hints=manifest.hints,
    )
    for name, t in summary["transports"].items():
        block = rx.summary(name)
        if block is not None:
            t["rx_stamp"] = block
    reason = REBUILT_REASON.format(
        turns=counted(turns, "turn"), rollouts=counted(rollouts, "rollout")
    )
    summary["valid"] = False
    summary["invalid_reasons"] = [reason]
    summary["partial"] = True
    summary["interrupted"] = True
    summary["rebuilt"] = True
    summary["rebuilt_from"] = {"turns": turns, "rollouts": rollouts}
    summary["errors"] = error_block(Summary.of(summary).transports, examples)
    summary["not_run"] = not_run(run, planned, acc.warmup_rollouts)
    summary["scenario"] = facts.name
    summary["seed"] = manifest.seed
    # The histograms' interval: the span of the turns on disk, ending now.
    span_s = 0.0
    if len(run.turns):
        span_s = max(0, int(run.turns["done_ns"].max()) - int(run.turns["sent_ns"].min())) / 1e9
    now = time.time()
    write_summary(run.path, summary, acc.histograms(), start_time_s=now - span_s, end_time_s=now)
    return summary


def not_run(run: Run, transports: list[str], warmup: int) -> dict[str, Any]:
    """What of the plan has no complete result on disk, as a live run's ``not_run`` says it.

    Per transport: ``cancelled``, the measured rollouts with turn rows but no rollout row
    (cut off by the kill); ``rollouts``, those never begun, counted against the manifest's
    ``rollouts_planned`` (absent from a manifest written before it was kept: then only the
    transports without a row and the ones cut off are known). A rollout row is written once
    a rollout ends, so a transport whose every rollout has one is the only complete one.
    """
    planned = run.manifest_model.rollouts_planned
    measured = max(0, int(planned) - warmup) if isinstance(planned, int) else None
    begun = _rollout_ids(run.turns, warmup)
    ended = _rollout_ids(run.rollouts, warmup)
    rollouts: dict[str, int] = {}
    cancelled: dict[str, int] = {}
    for name in transports:
        done, started = ended.get(name, set()), begun.get(name, set())
        cut = len(started - done)
        if cut:
            cancelled[name] = cut
        if measured is not None and measured - len(done) - cut > 0:
            rollouts[name] = measured - len(done) - cut
    return {
        "transports": [t for t in transports if t not in begun and t not in ended],
        "rollouts": rollouts,
        "cancelled": cancelled,
    }


def _rollout_ids(table: Any, warmup: int) -> dict[str, set[int]]:
    """Per transport, the measured rollouts (warm-up ones left out) with a row in ``table``."""
    if not len(table):
        return {}
    rows = table[table["rollout_id"] >= warmup]
    return {
        str(name): set(ids.astype(int)) for name, ids in rows.groupby("transport")["rollout_id"]
    }


def needs_rebuild(run_dir: str | Path) -> bool:
    """A run folder (it has a manifest) that never wrote its summary."""
    path = Path(run_dir)
    return (path / "manifest.json").exists() and not (path / SUMMARY).exists()


def rebuilt_note(doc: Summary | Mapping[str, Any]) -> str:
    """One line for the console and the report."""
    summary = as_summary(doc)
    src = (summary.rebuilt_from if summary is not None else None) or {}
    return (
        f"summary.json rebuilt from {counted(int(src.get('turns', 0)), 'turn row')} and "
        f"{counted(int(src.get('rollouts', 0)), 'rollout row')} of a run that did not finish"
    )
