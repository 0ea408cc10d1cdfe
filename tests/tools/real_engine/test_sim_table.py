"""`make real-engine-sim`: the simulated figures beside the real ones, level by level (pure),
and its command line (usage errors exit 4 with no engine started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools.real_engine.engine_venv import assert_usage_errors
from tools.real_engine.engine_metrics import TPOT, TTFT, Histogram, Snapshot
from tools.real_engine.run import Options, text_scenario
from tools.real_engine.sim_table import (
    compare_levels,
    engine_figures,
    missed,
    render,
    summary_figures,
)
from tools.real_engine.simulate import _scenario, main


def _summary(ttft50: float, ttft99: float, tpot50: float) -> dict[str, object]:
    return {
        "transports": {
            "chat": {
                "ttft_ms": {"p50": ttft50, "p99": ttft99, "mean": 1.0},
                "tpot_ms": {"p50": tpot50, "p99": 9.0},
            }
        }
    }


def test_each_figure_is_judged_by_its_ratio_and_a_missing_side_is_a_miss() -> None:
    real = {1: summary_figures(_summary(10.0, 20.0, 0.80), "chat")}
    real[2] = summary_figures(_summary(12.0, 30.0, 0.90), "chat")
    sim = {1: summary_figures(_summary(11.4, 17.1, 0.92), "chat")}
    sim[2] = summary_figures({"transports": {"chat": {"ttft_ms": {"p50": 12.0}}}}, "chat")
    rows = compare_levels((1, 2), real, {}, sim)
    by = {(r.level, r.metric, r.stat): r for r in rows}
    # +14 % and -14.5 % are inside 15 %; +15 % TPOT is on the edge, still inside
    assert by[1, "ttft_ms", "p50"].ok is True
    assert by[1, "ttft_ms", "p99"].ratio == pytest.approx(0.855)
    assert by[1, "ttft_ms", "p99"].ok is True
    assert by[1, "tpot_ms", "p50"].ok is True
    assert by[2, "ttft_ms", "p50"].ratio == 1.0
    # the simulated run gave no p99 and no TPOT: not a pass by silence
    assert by[2, "ttft_ms", "p99"].ok is None
    assert {(r.level, r.metric, r.stat) for r in missed(rows)} == {
        (2, "ttft_ms", "p99"),
        (2, "tpot_ms", "p50"),
    }
    table = render(rows)
    assert "MISSED" not in table and table.count("n/a") == 2
    assert "1  TTFT p99  20.00" in table
    # the fit pass's figure of the real engine is shown beside it when there is one
    again = {1: summary_figures(_summary(30.0, 40.0, 0.85), "chat")}
    shown = compare_levels((1,), real, {}, sim, again)
    assert shown[0].again == 30.0 and shown[0].ok is True
    # vLLM against itself (fit pass / judged pass): the noise floor, shown, never judged
    assert shown[0].repeat_ratio == pytest.approx(30.0 / real[1]["ttft_ms", "p50"])
    assert f"{shown[0].repeat_ratio:.3f}" in render(shown)
    assert compare_levels((1,), real, {}, sim)[0].repeat_ratio is None
    sim[1] = summary_figures(_summary(11.6, 17.1, 0.92), "chat")  # +16 %
    assert compare_levels((1,), real, {}, sim)[0].ok is False
    # a level run while the machine stayed busy is not judged, either way (and not a pass)
    busy = {1: "not judged: the machine was busy (others used 180 % of a core)"}
    unjudged = compare_levels((1,), real, {}, sim, None, busy)
    assert all(r.ok is None for r in unjudged) and len(missed(unjudged)) == 3
    assert render(unjudged).count("not judged") == 3


def test_rounds_are_listed_apart_and_each_judged() -> None:
    real = {1: summary_figures(_summary(10.0, 20.0, 0.8), "chat")}
    first = compare_levels((1,), real, {}, {1: summary_figures(_summary(10.5, 21.0, 0.8), "chat")})
    second = compare_levels(
        (1,), real, {}, {1: summary_figures(_summary(13.0, 21.0, 0.8), "chat")}, None, None, 2
    )
    assert {r.round for r in first} == {1} and {r.round for r in second} == {2}
    # one round: the table as before; several: each row names its round
    assert "1 r1" not in render(first)
    table = render(first + second)
    assert "1 r1  TTFT p50" in table and "1 r2  TTFT p50" in table
    assert [(r.round, r.metric, r.stat) for r in missed(first + second)] == [(2, "ttft_ms", "p50")]


def test_vllms_own_figures_come_from_its_histograms_over_the_window() -> None:
    window = Snapshot(
        {
            TTFT: Histogram({0.004: 0, 0.006: 100, float("inf"): 100}, 0.5, 100),
            TPOT: Histogram({0.0007: 0, 0.0009: 100, float("inf"): 100}, 0.08, 100),
        }
    )
    got = engine_figures(window)
    assert got["ttft_ms", "p50"] == pytest.approx(5.0)
    assert got["ttft_ms", "p99"] == pytest.approx(5.98)
    assert got["tpot_ms", "p50"] == pytest.approx(0.8)


def test_usage_errors_exit_4_before_any_engine_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = "expected concurrencies like 1,2,4"
    assert_usage_errors(main, ["--levels", "0,2"], expected, tmp_path, capsys)


def test_each_block_of_a_side_sends_other_prompts_than_its_earlier_blocks() -> None:
    """With one seed, every block would send the first block's prompts again, prefix-cached by
    then (the closure run stopped identifying the prefill rate: every turn's uncached tokens
    were the same)."""
    base = Options(requests=30)
    seeds = [_scenario(base, 2, block=b)["seed"] for b in range(4)]
    assert len(set(seeds)) == 4 and seeds[0] == _scenario(base, 2)["seed"]
    # nor the blocks of another level, or the warm-up's, which vLLM's prefix cache keeps over
    # the whole pass while every simulated block starts empty
    every = [_scenario(base, c, block=b)["seed"] for c in (1, 2, 4) for b in range(4)]
    assert len(set(every)) == 12 and text_scenario(base)["seed"] not in every
