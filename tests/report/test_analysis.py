"""Derived tables (harness.report.analysis) on synthetic runs with known values."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
import pytest

from harness.metrics.timeseries import AGGREGATE_BUCKET_NS
from harness.report import Run, load_run
from harness.report import analysis as A


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, synthetic: ModuleType) -> Run:
    path = tmp_path_factory.mktemp("analysis") / "r"
    synthetic.make_run(
        path,
        rollout_ms={"ws": [300.0, 330.0, 360.0], "http": [600.0, 630.0, 720.0]},
        ttft_ms={"http": 100.0, "ws": 40.0},
    )
    return load_run(path)


def test_transports_in_canonical_order(run: Run) -> None:
    assert A.run_transports(run) == ["http", "ws"]
    assert A.ordered_transports(["custom", "ws-append", "http"]) == ["http", "ws-append", "custom"]


def test_turn_table_applies_the_metric_definitions(run: Run) -> None:
    t = A.turn_table(run)
    assert len(t) == 24 and t["ok"].all()
    row = t.iloc[0]
    assert row["ttft_ms"] == pytest.approx((row["first_token_ns"] - row["sent_ns"]) / 1e6)
    assert row["turn_ms"] == pytest.approx(row["ttft_ms"] + 41.0)
    # 41 tokens, 40 gaps over 40 ms
    assert t["decode_tps"].to_numpy() == pytest.approx(np.full(24, 1000.0))
    # 40 ms responses cannot fill the 100 ms burst window: no burst rate, as in the summary
    assert t["burst_tps"].isna().all()
    # t_s: first token, seconds after the transport's first request
    for name, g in t.groupby("transport"):
        first = g.sort_values("sent_ns").iloc[0]
        assert g["t_s"].min() == pytest.approx(first["ttft_ms"] / 1000), name


def test_paired_rollouts_and_ttft_speedup(run: Run) -> None:
    pairs = A.paired_rollouts(run)
    assert list(pairs.columns) == ["http", "ws"]
    assert (pairs["http"] / pairs["ws"]).tolist() == pytest.approx([2.0, 630 / 330, 2.0])
    ttft = A.paired_ttft_speedup(run, "http", "ws")
    assert ttft is not None and ttft.n == 12 and ttft.ci95 is not None
    assert 2.0 < ttft.median_ratio < 3.2  # 100 vs 40 ms, each ±10 %
    assert ttft.ci95[0] <= ttft.median_ratio <= ttft.ci95[1]
    assert A.paired_ttft_speedup(run, "http", "ws-append") is None


def test_aggregate_tps_conserves_tokens(run: Run) -> None:
    series = A.aggregate_tps(run, bucket_ns=50_000_000)
    for name in ("http", "ws"):
        g = series[series["transport"] == name]
        assert g["tps"].sum() * 0.05 == pytest.approx(12 * 41)
        # the series starts at the bucket holding the transport's first token
        first_token_s = A.turn_table(run).query("transport == @name")["t_s"].min()
        assert g["t_s"].iloc[0] == pytest.approx(np.floor(first_token_s / 0.05) * 0.05)


@pytest.mark.parametrize("scale", [1, 4])
def test_aggregate_tps_on_the_summary_grid_peaks_at_the_summary_peak(
    scale: int, tmp_path: Path, synthetic: ModuleType
) -> None:
    run = load_run(
        synthetic.make_run(
            tmp_path / "r",
            rollout_ms={"ws": [300.0 * scale] * 3, "http": [600.0 * scale] * 3},
        )
    )
    series = A.aggregate_tps(run, AGGREGATE_BUCKET_NS, grid_origin_ns=0)
    turns = A.turn_table(run)
    assert run.summary is not None
    width = AGGREGATE_BUCKET_NS / 1e9
    for name in ("http", "ws"):
        g = series[series["transport"] == name]
        t = turns[turns["transport"] == name]
        # the active span on the series' time axis (s after the first request)
        origin = t["sent_ns"].min()
        lo = (t["first_token_ns"].min() - origin) / 1e9
        hi = (t["last_token_ns"].max() - origin) / 1e9
        whole = g[(g["t_s"] >= lo - 1e-9) & (g["t_s"] + width <= hi + 1e-9)]
        tps = run.summary["transports"][name]["tps"]
        if whole.empty:
            assert tps["aggregate_peak"] is None and tps["aggregate_peak_reason"]
        else:
            assert whole["tps"].max() == pytest.approx(tps["aggregate_peak"], abs=1e-3)
        assert g["tps"].sum() * width == pytest.approx(12 * 41)


def test_breakdown_adds_up_to_the_mean_turn(run: Run) -> None:
    table = A.breakdown_table(run.summary or {})
    assert list(table.index) == ["http", "ws"]
    server = [*A.SERVER_COMPONENTS, A.UNMODELLED]
    for name in table.index:
        turn_mean = (run.summary or {})["transports"][name]["turn_ms"]["mean"]
        assert table.loc[name, server].sum() == pytest.approx(turn_mean, abs=0.01)
    assert table.loc["http", "decode"] == 40.0


def test_first_turns_fingerprint_the_replayed_rollouts_by_their_first_successful_turn() -> None:
    """compare and gate tell two runs replayed the same rollouts by this one view: a first
    turn's history is the plan's; later turns carry the server's answers, which may differ."""
    rows = [
        # transport, round, rollout, turn, ok, history
        ("ws", 0, 4, 0, True, 100),
        ("ws", 0, 4, 1, True, 190),  # a later turn: not part of the fingerprint
        ("ws", 1, 4, 0, True, 101),  # the same rollout in another round: its own key
        ("ws", 0, 5, 0, False, 999),  # failed: what it sent is not known to be the plan's
        ("http", 0, 4, 0, True, 300),
    ]
    cols = ["transport", "round", "rollout_id", "turn_index", "ok", "history_tokens"]
    turns = pd.DataFrame(rows, columns=cols)
    assert A.first_turns(turns, "ws") == {(0, 4): 100.0, (1, 4): 101.0}
    assert A.first_turns(turns, "http") == {(0, 4): 300.0}
    assert A.first_turns(turns.drop(columns="history_tokens"), "ws") == {}
