from __future__ import annotations

import math

import numpy as np
import pytest

from harness.metrics.stats import (
    MIN_CI_PAIRS,
    PairedResult,
    bootstrap_ratio_of_medians,
    ci_reason,
    mann_whitney_u,
    paired_speedup,
)


def test_paired_speedup_exact_on_constant_ratio() -> None:
    res = paired_speedup([2.0, 4.0, 6.0, 8.0, 10.0], [1.0, 2.0, 3.0, 4.0, 5.0], n_boot=200)
    assert res == PairedResult(median_ratio=2.0, ci95=(2.0, 2.0), reduction_pct=50.0, n=5)
    assert res.paired
    assert res.ci_reason is None


def test_paired_speedup_uses_per_pair_ratios() -> None:
    # ratios 1, 2, 4, 2, 2 -> median 2; candidate/baseline 1, 0.5, 0.25, .5, .5 -> median 0.5
    res = paired_speedup([10.0, 100.0, 1000.0, 8.0, 6.0], [10.0, 50.0, 250.0, 4.0, 3.0], n_boot=500)
    assert res.median_ratio == 2.0
    assert res.reduction_pct == 50.0
    assert res.ci95 is not None
    assert 1.0 <= res.ci95[0] <= 2.0 <= res.ci95[1] <= 4.0


@pytest.mark.parametrize("n", [1, 2, MIN_CI_PAIRS - 1])
def test_no_ci_below_min_ci_pairs(n: int) -> None:
    base = [100.0 + i for i in range(n)]
    cand = [74.0 + i for i in range(n)]
    res = paired_speedup(base, cand, n_boot=200)
    assert res.ci95 is None
    assert res.ci_reason == f"n={n}: too few for a CI (need {MIN_CI_PAIRS})"
    assert res.median_ratio > 1.0  # the point estimate is still there
    un = paired_speedup(base, cand, paired=False, n_boot=200)
    assert un.ci95 is None and un.ci_reason == res.ci_reason


def test_ci_reason_names_n_and_the_minimum() -> None:
    assert ci_reason(2) == "n=2: too few for a CI (need 5)"
    assert ci_reason(MIN_CI_PAIRS) is None


def test_paired_speedup_is_deterministic_per_seed() -> None:
    rng = np.random.default_rng(1)
    base = rng.lognormal(3, 0.5, 50)
    cand = base / 1.5 * rng.lognormal(0, 0.2, 50)
    a = paired_speedup(base, cand, seed=11)
    b = paired_speedup(base, cand, seed=11)
    c = paired_speedup(base, cand, seed=12)
    assert a == b
    # another seed: another resampling, the same answer to within resampling noise
    assert c.median_ratio == a.median_ratio
    assert a.ci95 is not None and c.ci95 is not None
    assert c.ci95 == pytest.approx(a.ci95, abs=0.05)


def test_paired_speedup_validates_input() -> None:
    with pytest.raises(ValueError, match="as many"):
        paired_speedup([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="positive"):
        paired_speedup([1.0, 0.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="non-empty"):
        paired_speedup([], [])
    with pytest.raises(ValueError, match="n_boot"):
        paired_speedup([1.0], [1.0], n_boot=0)


def test_bootstrap_ci_covers_true_ratio_at_nominal_rate() -> None:
    true_ratio = 1.6
    rng = np.random.default_rng(2024)
    trials = 200
    covered = 0
    for trial in range(trials):
        base = rng.lognormal(mean=8.0, sigma=0.6, size=40)
        # per-pair noise with median 1: the population median of base/cand is true_ratio
        cand = base / true_ratio * rng.lognormal(mean=0.0, sigma=0.25, size=40)
        ci = paired_speedup(base, cand, n_boot=400, seed=trial).ci95
        assert ci is not None
        lo, hi = ci
        covered += lo <= true_ratio <= hi
    coverage = covered / trials
    assert 0.88 <= coverage <= 0.99, coverage


def test_unpaired_speedup_is_ratio_of_medians() -> None:
    res = paired_speedup([10.0, 20.0, 30.0], [5.0, 10.0, 15.0, 1000.0], paired=False, n_boot=300)
    assert res.median_ratio == 20.0 / 12.5
    assert res.reduction_pct == pytest.approx((1 - 12.5 / 20.0) * 100)
    assert res.n == 3
    assert not res.paired
    assert res.ci95 is None  # 3 values on the smaller side: too few for a CI
    res = paired_speedup(
        [10.0, 20.0, 30.0, 40.0, 50.0], [5.0, 10.0, 15.0, 20.0, 1000.0], paired=False
    )
    assert res.ci95 is not None and res.ci95[0] <= res.ci95[1]


def test_bootstrap_ratio_of_medians_brackets_point_estimate() -> None:
    rng = np.random.default_rng(5)
    a = rng.lognormal(2, 0.3, 200)
    b = rng.lognormal(1.5, 0.3, 200)
    ratio, (lo, hi) = bootstrap_ratio_of_medians(a, b, n_boot=1000, seed=3)
    assert ratio == pytest.approx(float(np.median(a) / np.median(b)))
    assert lo < ratio < hi
    assert lo < math.exp(0.5) < hi


def test_mann_whitney_separated_samples() -> None:
    u, p = mann_whitney_u([1, 2, 3], [4, 5, 6])
    assert u == 0.0
    # mu = 4.5, var = 3*3/12*7 = 5.25, z = (4.5 - 0.5)/sqrt(5.25) = 1.7457 -> p = 0.08086
    assert p == pytest.approx(0.080856, abs=1e-5)
    u2, p2 = mann_whitney_u([4, 5, 6], [1, 2, 3])
    assert u2 == 9.0
    assert p2 == p


def test_mann_whitney_with_ties() -> None:
    # combined 1,1,1,2,2,2: ranks 2 and 5; R1 = 2+2+5 = 9 -> U1 = 3
    # var = 9/12 * (7 - 2*(27-3)/30) = 4.05; z = (1.5 - 0.5)/sqrt(4.05) = 0.49690 -> p = 0.61925
    u, p = mann_whitney_u([1, 1, 2], [1, 2, 2])
    assert u == 3.0
    assert p == pytest.approx(0.61925, abs=1e-4)


def test_mann_whitney_identical_and_all_tied() -> None:
    assert mann_whitney_u([1, 2, 3], [1, 2, 3]) == (4.5, 1.0)
    assert mann_whitney_u([7, 7], [7, 7, 7]) == (3.0, 1.0)


def test_mann_whitney_large_shift_is_significant() -> None:
    a = list(range(100))
    b = [x + 50 for x in range(100)]
    u, p = mann_whitney_u(a, b)
    assert u == 1250.0  # pairs with a > b: sum of k for k=1..49 = 1225, plus 50 ties * 0.5
    assert p < 1e-10
    with pytest.raises(ValueError, match="non-empty"):
        mann_whitney_u([], [1.0])
