"""``loopbench compare``: one statistic per row, CIs only from enough samples, several runs.

Synthetic runs written through the real writer (no server); the checks against real runs
are in ``test_compare_checks.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from harness.metrics.stats import MIN_CI_PAIRS
from harness.report import analysis as A
from harness.report import load_run
from harness.report.compare import (
    compare,
    delta_rows,
    fmt_change,
    fmt_p,
    verdict_line,
)


def _latencies(median: float, n: int, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(median * np.exp(rng.normal(0.0, 0.05, n)))


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory, synthetic: ModuleType
) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("compare")
    a = synthetic.make_run(
        root / "a", rollout_ms={"http": _latencies(1000, 30, 1)}, ttft_ms={"http": 100.0}, seed=1
    )
    # B: rollouts 30 % faster, TTFT unchanged (different noise)
    b = synthetic.make_run(
        root / "b", rollout_ms={"http": _latencies(700, 30, 2)}, ttft_ms={"http": 100.0}, seed=1
    )
    # A again, re-measured: same distribution, other noise
    a2 = synthetic.make_run(
        root / "a2", rollout_ms={"http": _latencies(1000, 30, 3)}, ttft_ms={"http": 100.0}, seed=1
    )
    return a, b, a2


def _by_metric(a: Path, b: Path) -> dict[str, Any]:
    return {d.metric: d for d in compare([load_run(a), load_run(b)]).deltas["B"]}


def test_faster_rollouts_are_significant(runs: tuple[Path, Path, Path]) -> None:
    a, b, _ = runs
    d = _by_metric(a, b)
    roll = d["rollout p50"]
    assert roll.verdict == "better"
    assert roll.p_value < 1e-6
    assert roll.ratio == pytest.approx(0.7, rel=0.05)
    assert roll.ratio_ci95[0] < roll.ratio < roll.ratio_ci95[1] < 1.0
    assert roll.delta == pytest.approx(roll.b - roll.a)
    assert roll.delta_pct == pytest.approx(-30, abs=5)
    # TTFT did not move: no verdict of change
    assert d["TTFT p50"].verdict == "no significant change"
    # reversed, the same change is a regression
    assert _by_metric(b, a)["rollout p50"].verdict == "worse"


def test_same_distribution_is_not_significant(runs: tuple[Path, Path, Path]) -> None:
    a, _, a2 = runs
    d = _by_metric(a, a2)
    tested = [x for x in d.values() if x.p_value is not None]
    assert {x.metric for x in tested} == {
        "TTFT p50",
        "TTFB p50",
        "turn p50",
        "rollout p50",
        "decode TPS p50",
    }
    assert all(x.verdict == "no significant change" for x in tested)
    assert d["rollout p99"].p_value is None and d["rollout p99"].verdict == ""


def test_delta_and_ratio_describe_one_statistic(runs: tuple[Path, Path, Path]) -> None:
    """Δ, Δ %, the ratio and its CI are all about the same numbers A and B (the regression:
    decode TPS showed Δ +0.1 % of summary.json's p50 next to a median ratio of 2.498)."""
    a, b, _ = runs
    run_a, run_b = load_run(a), load_run(b)
    rows = compare([run_a, run_b]).deltas["B"]
    assert rows
    for d in rows:
        if d.delta_pct is None:
            continue
        assert d.delta == pytest.approx(d.b - d.a), d.metric
        assert d.ratio == pytest.approx(d.b / d.a), d.metric
        assert d.delta_pct == pytest.approx((d.ratio - 1) * 100), d.metric
        if d.ratio_ci95 is not None:
            lo, hi = d.ratio_ci95
            # the printed interval is the ratio's, in the Δ % scale
            shown = f"[{(lo - 1) * 100:+.1f}, {(hi - 1) * 100:+.1f}]".replace("-", "−")
            assert shown in fmt_change(d), d.metric
    # a tested row's A and B are the medians of the very samples the test and CI use
    turns_a, turns_b = A.turn_table(run_a), A.turn_table(run_b)
    decode = next(d for d in rows if d.metric == "decode TPS p50")
    assert decode.a == pytest.approx(float(turns_a["decode_tps"].dropna().median()))
    assert decode.b == pytest.approx(float(turns_b["decode_tps"].dropna().median()))
    assert decode.n_a == turns_a["decode_tps"].notna().sum()


def test_fewer_than_five_samples_give_no_ci(tmp_path: Path, synthetic: ModuleType) -> None:
    assert MIN_CI_PAIRS == 5
    a = synthetic.make_run(tmp_path / "a", rollout_ms={"http": [1000.0, 1100.0]}, seed=1)
    b = synthetic.make_run(tmp_path / "b", rollout_ms={"http": [600.0, 650.0]}, seed=1)
    d = _by_metric(a, b)
    roll = d["rollout p50"]
    assert roll.n_a == roll.n_b == 2
    assert roll.ratio_ci95 is None and roll.p_value is None and roll.verdict == ""
    assert roll.note == "n=2: too few for a CI (need 5)"
    assert roll.delta_pct == pytest.approx((625 / 1050 - 1) * 100)
    (row,) = [r for r in delta_rows([roll])]
    assert row[5] == "−40.5 %" and row[6] == "-" and row[7] == "n=2: too few for a CI (need 5)"
    # 8 turns per side: enough for a CI of the turn metrics
    assert d["turn p50"].ratio_ci95 is not None


def test_p_values_are_printed_with_sensible_precision() -> None:
    assert fmt_p(1.0) == "1.00"
    assert fmt_p(0.4567) == "0.46"
    assert fmt_p(0.0123) == "0.01"
    assert fmt_p(0.0042) == "0.004"
    assert fmt_p(3e-12) == "<0.001"
    assert fmt_p(None) == "-"


def test_unfinished_and_partial_runs_are_not_comparable(
    tmp_path: Path, synthetic: ModuleType
) -> None:
    ok = synthetic.make_run(tmp_path / "ok", rollout_ms={"http": [900.0] * 6})
    cut = synthetic.make_run(tmp_path / "cut", rollout_ms={"http": [900.0] * 6}, finish=False)
    part = synthetic.make_run(tmp_path / "part", rollout_ms={"http": [900.0] * 6}, partial=True)
    cmp = compare([load_run(ok), load_run(cut), load_run(part)])
    assert any(r.startswith("B: did not finish (no summary.json") for r in cmp.reasons)
    assert any(r.startswith("C: partial run") for r in cmp.reasons)
    # the unfinished run's rows still show what its row files hold
    roll = next(d for d in cmp.deltas["B"] if d.metric == "rollout p50")
    assert roll.b == pytest.approx(900.0) and roll.delta_pct == pytest.approx(0.0)
    assert verdict_line(cmp).startswith("NOT COMPARABLE (2 reasons)")


def test_error_rate_limit_comes_from_the_scenario(tmp_path: Path, synthetic: ModuleType) -> None:
    """8 of 24 turns failed: above the default 5 %, within a scenario's max_error_rate 0.5."""
    lat = {"http": [900.0] * 6}
    ok = synthetic.make_run(tmp_path / "ok", rollout_ms=lat)
    bad = synthetic.make_run(tmp_path / "bad", rollout_ms=lat, failed_turns={"http": 8})
    (reason,) = compare([load_run(ok), load_run(bad)]).reasons
    assert reason.startswith("B: http: 33% of 24 turns failed, above load.max_error_rate 5%")
    assert "server_error x8" in reason and "HTTP 500: injected" in reason
    lenient = synthetic.make_run(
        tmp_path / "lenient",
        rollout_ms=lat,
        failed_turns={"http": 8},
        scenario={"max_error_rate": 0.5},
    )
    ok2 = synthetic.make_run(tmp_path / "ok2", rollout_ms=lat, scenario={"max_error_rate": 0.5})
    assert compare([load_run(ok2), load_run(lenient)]).reasons == []


def test_three_runs_each_against_the_reference(
    runs: tuple[Path, Path, Path], cli: Callable[..., Any]
) -> None:
    a, b, a2 = runs
    cmp = compare([load_run(a), load_run(b), load_run(a2)])
    assert cmp.comparable and list(cmp.deltas) == ["B", "C"]
    assert {d.candidate for d in cmp.deltas["C"]} == {"C"}
    line = verdict_line(cmp)
    assert line.startswith("comparable · B vs A: rollout p50 (http) −")
    assert "better" in line and "; C vs A: rollout p50 (http)" in line and "no errors" in line
    out = cli("compare", a, b, a2, "--no-html").stdout
    assert "B = b  vs  A = a (reference)" in out and "C = a2  vs  A = a (reference)" in out
    assert "Δ (C−A)" in out


def test_compare_command_prints_the_table_and_exits_0(
    runs: tuple[Path, Path, Path], tmp_path: Path, cli: Callable[..., Any]
) -> None:
    a, b, _ = runs
    md = tmp_path / "cmp.md"
    out = cli("compare", str(a), str(b), "--md", str(md), "--n-boot", "500", "--no-html").stdout
    assert out.startswith("Verdict: comparable")
    assert "rollout p50 (ms)" in out and "better" in out
    text = md.read_text()
    assert text.startswith("# loopbench compare")
    assert "| http | rollout p50 (ms) |" in text
    assert not list(a.parent.glob("compare-*")), "--no-html writes no folder"


def test_a_transport_a_partial_run_never_reached_keeps_its_rows(
    tmp_path: Path, synthetic: ModuleType
) -> None:
    full = synthetic.make_run(
        tmp_path / "full", rollout_ms={"http": [900.0] * 6, "ws": [600.0] * 6}
    )
    # interrupted before ws started: ws is in the manifest, not in the rows or the summary
    cut = synthetic.make_run(
        tmp_path / "cut", rollout_ms={"http": [900.0] * 6, "ws": []}, partial=True
    )
    cmp = compare([load_run(full), load_run(cut)])
    assert "B: ws: never ran (no turns recorded)" in cmp.reasons
    assert not any("transports" in r for r in cmp.reasons)
    ws = [d for d in cmp.deltas["B"] if d.transport == "ws"]
    assert len(ws) == 11 and all(d.note == "B: never ran" for d in ws)
