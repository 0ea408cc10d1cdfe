"""``loopbench compare``: deltas, Mann–Whitney and bootstrap CIs between two runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from harness.report import load_run
from harness.report.compare import compare_runs


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
        root / "b", rollout_ms={"http": _latencies(700, 30, 2)}, ttft_ms={"http": 100.0}, seed=2
    )
    # A again, re-measured: same distribution, other seed
    a2 = synthetic.make_run(
        root / "a2", rollout_ms={"http": _latencies(1000, 30, 3)}, ttft_ms={"http": 100.0}, seed=3
    )
    return a, b, a2


def _by_metric(a: Path, b: Path) -> dict[str, Any]:
    return {d.metric: d for d in compare_runs(load_run(a), load_run(b))}


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


def test_unfinished_run_is_refused(tmp_path: Path, synthetic: ModuleType) -> None:
    cut = synthetic.make_run(tmp_path / "cut", rollout_ms={"http": [1.0]}, finish=False)
    with pytest.raises(ValueError, match="did not finish"):
        compare_runs(load_run(cut), load_run(cut))


def test_compare_command_prints_the_table_and_exits_0(
    runs: tuple[Path, Path, Path], tmp_path: Path, cli: Callable[..., Any]
) -> None:
    a, b, _ = runs
    md = tmp_path / "cmp.md"
    out = cli("compare", str(a), str(b), "--md", str(md), "--n-boot", "500").stdout
    assert "rollout p50 (ms)" in out and "better" in out
    text = md.read_text()
    assert text.startswith("# loopbench compare")
    assert "| http | rollout p50 (ms) |" in text
