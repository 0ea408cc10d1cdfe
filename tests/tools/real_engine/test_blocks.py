"""`make real-engine-sim`'s blocks: the ABBA order, each side's turns pooled (figures over the
pooled turns, never averaged percentiles) and a figure's sampling spread (pure: rows in,
figures out; the block folders are written through the real results writer)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from harness.report import ResultsWriter
from harness.report.results import load_run
from harness.workload.records import RolloutRecord, TurnRecord
from tools.real_engine.blocks import (
    abba,
    block_sizes,
    halves,
    level_blocks,
    measured_turns,
    pool,
    pooled_snapshot,
    ratios,
    spreads,
)
from tools.real_engine.engine_metrics import TTFT, Histogram, Snapshot
from tools.real_engine.sim_table import BOUND, compare_levels, render

MS = 1_000_000


def _block(path: Path, ttft_ms: Sequence[float], warmup: int = 0) -> Path:
    """A chat run of single-turn rollouts, rollout ``i`` with TTFT ``ttft_ms[i]`` and 21
    tokens 1.5 ms apart (TPOT 1.5 ms); the first ``warmup`` rollouts are the scenario's warm-up."""
    manifest = {
        "run_id": path.name,
        "scenario_name": "blocks",
        "scenario": {
            "name": "blocks",
            "load": {"mode": "closed", "concurrency": 1, "warmup_rollouts": warmup},
        },
        "seed": 0,
        "transports": ["chat"],
        "embedded_server": False,
        "target": "none",
    }
    clock = 10_000 * MS
    with ResultsWriter(path, manifest) as writer:
        for rid, ttft in enumerate(ttft_ms):
            first = clock + int(ttft * MS)
            last = first + 30 * MS
            writer.add_turn(
                TurnRecord(
                    transport="chat",
                    rollout_id=rid,
                    turn_index=0,
                    sent_ns=clock,
                    first_event_ns=first,
                    first_token_ns=first,
                    last_token_ns=last,
                    done_ns=last + MS,
                    status="completed",
                    output_tokens=21,
                )
            )
            writer.add_rollout(
                RolloutRecord(
                    transport="chat",
                    rollout_id=rid,
                    intended_start_ns=clock,
                    start_ns=clock,
                    end_ns=last + MS,
                    turns=1,
                    status="completed",
                )
            )
            clock = last + 2 * MS
    return path


def test_each_level_runs_its_blocks_abba_so_a_linear_drift_lands_on_both_sides() -> None:
    """Before: one fit and one judged window per level, F R or R F, so a drift over the two
    minutes fell wholly between the sides."""
    got = level_blocks((1, 2, 4), 4)
    fit_first = ["fit", "real", "real", "fit", "fit", "real", "real", "fit"]
    assert got == [(1, fit_first), (2, abba(4, "real")), (4, fit_first)]
    assert abba(4, "real") == ["real", "fit", "fit", "real", "real", "fit", "fit", "real"]
    for _, order in got:
        # k blocks a side; the mean position of each side's blocks is the same: a drift
        # linear in time moves both sides' pooled turns by as much
        assert order.count("fit") == order.count("real") == 4
        where = {s: [i for i, x in enumerate(order) if x == s] for s in ("fit", "real")}
        assert sum(where["fit"]) == sum(where["real"])
    # one block a side: the old pair of windows, the side that opens alternating
    assert level_blocks((1, 2), 1) == [(1, ["fit", "real"]), (2, ["real", "fit"])]
    # the old design over the same blocks: the first half in time as the opening side's window
    ran = [Path(f"b{i}") for i in range(8)]
    assert halves(abba(4, "real"), ran) == {"real": ran[:4], "fit": ran[4:]}
    assert halves(["fit", "real"], ran[:2]) == {"fit": ran[:1], "real": ran[1:2]}
    assert block_sizes(120, 4) == [30, 30, 30, 30]
    assert block_sizes(10, 4) == [3, 3, 2, 2]
    with pytest.raises(ValueError, match="blocks"):
        block_sizes(3, 4)
    with pytest.raises(ValueError, match="blocks"):
        abba(0)


def test_a_sides_figures_are_those_of_its_pooled_turns_not_averaged_percentiles(
    tmp_path: Path,
) -> None:
    a = [10.0 + 0.01 * i for i in range(30)]  # 30 turns near 10 ms
    b = [30.0 + 0.01 * i for i in range(10)]  # 10 turns near 30 ms
    folders = [_block(tmp_path / "b1", [99.0, *a], warmup=1), _block(tmp_path / "b2", b)]
    got = pool(folders, tmp_path / "pooled")
    pooled = np.array(a + b)
    # the median of the 40 turns is a 10 ms one; the mean of the two blocks' medians is ~20
    assert got["ttft_ms", "p50"] == pytest.approx(np.percentile(pooled, 50), rel=0.01)
    assert got["ttft_ms", "p50"] < 11.0
    assert got["ttft_ms", "p99"] == pytest.approx(np.percentile(pooled, 99), rel=0.01)
    assert got["tpot_ms", "p50"] == pytest.approx(1.5, rel=0.01)
    # one run for `loopbench calibrate`: every block's turns, the warm-up left out, no two
    # blocks sharing a rollout (a conversation is keyed by its rollout id)
    run = load_run(tmp_path / "pooled")
    assert len(run.turns) == 40 and run.turns["rollout_id"].nunique() == 40
    assert len(run.rollouts) == 40
    assert list(measured_turns(tmp_path / "b1")["rollout_id"]) == list(range(1, 31))
    # and its manifest says so: a reader honouring the first block's warm-up would drop
    # pooled rollout 0 again
    assert len(measured_turns(tmp_path / "pooled")) == 40
    assert run.manifest_model.scenario_facts.warmup_rollouts == 0
    # pooled again (a repeat after a busy attempt) replaces the folder
    assert pool(folders[1:], tmp_path / "pooled")["ttft_ms", "p50"] > 29.0


def test_vllms_own_counts_over_a_sides_blocks_are_added_up() -> None:
    one = Snapshot({TTFT: Histogram({0.01: 3, float("inf"): 3}, 0.02, 3)}, {"x": 1.0})
    two = Snapshot({TTFT: Histogram({0.01: 0, 0.05: 2, float("inf"): 2}, 0.06, 2)}, {"x": 2.0})
    got = pooled_snapshot([one, two])
    assert got.histograms[TTFT] == Histogram({0.01: 3, 0.05: 2, float("inf"): 5}, 0.08, 5)
    assert got.counters == {"x": 3.0}


def test_the_spread_of_a_p99_of_few_turns_is_shown_beside_the_ratio_and_flagged(
    tmp_path: Path,
) -> None:
    """A p99 of 120 turns is the slowest turn or two: its bootstrap spread over one side's
    pooled turns exceeds the bound, and the table says so."""
    rng = np.random.default_rng(1)
    ttft = list(10.0 + rng.exponential(3.0, 120))
    turns = load_run(_block(tmp_path / "b", ttft)).turns
    got = spreads(turns)
    assert got["ttft_ms", "p50"] < BOUND < got["ttft_ms", "p99"]
    assert got["tpot_ms", "p50"] == pytest.approx(0.0, abs=0.01)  # every turn 1.5 ms a token
    assert spreads(turns) == got  # seeded: the same table twice
    real = {1: {("ttft_ms", "p50"): 12.0, ("ttft_ms", "p99"): 25.0, ("tpot_ms", "p50"): 1.0}}
    fit = {("ttft_ms", "p50"): 15.0, ("ttft_ms", "p99"): 25.0}
    one = {1: ratios(fit, real[1])}
    assert one[1] == {("ttft_ms", "p50"): 1.25, ("ttft_ms", "p99"): 1.0}
    rows = compare_levels((1,), real, {}, real, None, None, 1, {1: got}, one)
    assert rows[1].spread == got["ttft_ms", "p99"]
    assert rows[0].repeat_one_window == 1.25 and rows[2].repeat_one_window is None
    table = render(rows)
    assert "real's spread" in table and "fit/real, 1 window a side" in table and "1.250" in table
    assert f"±{got['ttft_ms', 'p99']:.0%} (> 15%)" in table
    assert f"±{got['ttft_ms', 'p50']:.0%} " in table and table.count("(> 15%)") == 1
