"""`make real-engine-sim`'s windows against vLLM in blocks, and each side's turns pooled.

vLLM strays from itself over minutes (docs/real-engine.md, "Which placement repeats
itself"): a fit window and a judged window of one block each sample two states of it.  So
each side's turns of a level are split into ``k`` blocks run alternately, ABBA
(``F R R F F R R F`` …), which cancels a linear drift for an even ``k``; each side's blocks
are then pooled: its figures are those of the pooled turns (one histogram over all of them,
as one run of that many turns would report), never an average of the blocks' percentiles.

The sampling spread of a figure over one side's pooled turns (a percentile bootstrap) says
how finely a figure of that many turns can be judged at all: a p99 of 120 turns is the
slowest turn or two.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from harness.metrics import definitions as D
from harness.metrics.summary import Accumulator
from harness.report.rebuild import row_records
from harness.report.results import MANIFEST, ROLLOUTS, TURNS, load_run, write_table_gz
from harness.workload.records import RolloutRecord, TurnRecord
from tools.real_engine.engine_metrics import Snapshot
from tools.real_engine.sim_table import FIGURES, summary_figures

SIDES = ("fit", "real")
#: the bootstrap's resamples and the interval's level (two-sided)
N_BOOT = 2000
LEVEL = 0.95


def abba(k: int, first: str = SIDES[0]) -> list[str]:
    """The ``2k`` blocks of one level, side by side: ``A B B A A B B A`` … from ``first``."""
    if k < 1:
        raise ValueError(f"blocks: expected a positive number, got {k}")
    a, b = (first, SIDES[1] if first == SIDES[0] else SIDES[0])
    unit = (a, b, b, a)
    return [unit[i % 4] for i in range(2 * k)]


def level_blocks(levels: Sequence[int], k: int) -> list[tuple[int, list[str]]]:
    """Each level's blocks in the order they run; the side that opens alternates level by
    level, so a drift over the whole pass does not always open on the same side."""
    return [(c, abba(k, SIDES[i % 2])) for i, c in enumerate(levels)]


def block_sizes(turns: int, k: int) -> list[int]:
    """``turns`` split into ``k`` blocks as even as they go (the first ones take the rest)."""
    if k < 1 or turns < k:
        raise ValueError(f"blocks: expected 1 to {turns} blocks of a side's turns, got {k}")
    return [turns // k + (i < turns % k) for i in range(k)]


def halves(order: Sequence[str], ran: Sequence[Path]) -> dict[str, list[Path]]:
    """The same blocks as the old design's two windows: the first half of them in time as the
    side that opened, the second half as the other (one window a side, back to back), so that
    vLLM's agreement with itself before and after the blocks reads off the same turns."""
    k = len(ran) // 2
    other = next(side for side in SIDES if side != order[0])
    return {order[0]: list(ran[:k]), other: list(ran[k:])}


def ratios(
    num: Mapping[tuple[str, str], float], den: Mapping[tuple[str, str], float]
) -> dict[tuple[str, str], float]:
    """``num / den`` figure by figure, where both have one (and ``den`` is positive)."""
    return {key: num[key] / den[key] for key in num.keys() & den.keys() if den[key] > 0}


def measured_turns(folder: Path, transport: str = "chat") -> pd.DataFrame:
    """The turns of one block that count: its transport's, after its warm-up rollouts."""
    run = load_run(folder)
    warmup = run.manifest_model.scenario_facts.warmup_rollouts
    t = run.turns
    return t[(t["transport"] == transport) & (t["rollout_id"] >= warmup)]


def pool(
    blocks: Sequence[Path], into: Path, transport: str = "chat"
) -> dict[tuple[str, str], float]:
    """The blocks' turns as one run in ``into`` (manifest of the first block; the rollouts
    renumbered so that no two blocks share one) for ``loopbench calibrate``; returns the
    judged figures over the pooled turns."""
    turns: list[pd.DataFrame] = []
    rollouts: list[pd.DataFrame] = []
    offset = 0
    for folder in blocks:
        run = load_run(folder)
        warmup = run.manifest_model.scenario_facts.warmup_rollouts
        ids = [-1]
        for table, out in ((run.turns, turns), (run.rollouts, rollouts)):
            kept = table[table["rollout_id"] >= warmup].copy()
            kept["rollout_id"] = kept["rollout_id"] - warmup + offset
            ids += [int(kept["rollout_id"].max())] if len(kept) else []
            out.append(kept)
        offset = max(ids) + 1 if max(ids) >= 0 else offset
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    pooled_turns = pd.concat(turns, ignore_index=True)
    pooled_rollouts = pd.concat(rollouts, ignore_index=True)
    # The first block's manifest, made true of the pooled rows: their warm-ups are already
    # dropped (a reader honouring the manifest would drop as many again) and they are renumbered.
    manifest = json.loads((blocks[0] / MANIFEST).read_text())
    manifest["run_id"] = into.name
    scenario = manifest.setdefault("scenario", {})
    scenario.setdefault("load", {})["warmup_rollouts"] = 0
    scenario.setdefault("rollout", {})["count"] = len(pooled_rollouts)
    manifest["rollouts_planned"] = len(pooled_rollouts)
    (into / MANIFEST).write_text(json.dumps(manifest, indent=1))
    write_table_gz(into / TURNS, pooled_turns)
    write_table_gz(into / ROLLOUTS, pooled_rollouts)
    acc = Accumulator()
    for turn in row_records(pooled_turns, TurnRecord):
        acc.add_turn(turn)
    for rollout in row_records(pooled_rollouts, RolloutRecord):
        acc.add_rollout(rollout)
    return summary_figures(acc.summary(run_id=into.name, comparisons=()), transport)


def spreads(turns: pd.DataFrame, seed: int = 0) -> dict[tuple[str, str], float]:
    """Each judged figure's sampling spread over ``turns`` (one side's pooled turns): the
    half-width of its percentile-bootstrap interval (:data:`LEVEL`) over the figure, so
    0.2 means ±20 %."""
    rng = np.random.default_rng(seed)
    found: dict[tuple[str, str], float] = {}
    for metric, stat in FIGURES:
        values = D.column(D.get(metric), turns).dropna().to_numpy(dtype=np.float64)
        if values.size < 2:
            continue
        q = float(stat.removeprefix("p")) / 100.0
        point = float(np.quantile(values, q))
        if point <= 0:
            continue
        idx = rng.integers(0, values.size, size=(N_BOOT, values.size))
        boot = np.quantile(values[idx], q, axis=1)
        lo, hi = np.quantile(boot, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
        found[metric, stat] = float(hi - lo) / 2.0 / point
    return found


def pooled_snapshot(deltas: Sequence[Snapshot]) -> Snapshot:
    """vLLM's own counts over several windows (each a scrape difference) added up."""
    total = Snapshot()
    for d in deltas:
        total = total.plus(d)
    return total


def side_turns(folders: Mapping[str, Sequence[Path]], side: str) -> pd.DataFrame:
    """One side's measured turns over its blocks, in one table."""
    tables = [measured_turns(f) for f in folders.get(side, ())]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
