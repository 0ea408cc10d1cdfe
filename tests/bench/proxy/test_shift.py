"""The p99 shift of the proxy's latency bench, with numbers in and out."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.proxy.shift import min_tail_pairs, paired_quantile_shift


def test_quantile_shift_of_a_constant_offset_is_that_offset() -> None:
    rng = np.random.default_rng(3)
    base = rng.exponential(2.0, size=1000)
    shift, ci = paired_quantile_shift(base, base + 0.5, n_boot=300)
    assert shift == pytest.approx(0.5)
    assert ci is not None
    assert ci[0] == pytest.approx(0.5) and ci[1] == pytest.approx(0.5)


def test_quantile_shift_is_not_the_quantile_of_differences() -> None:
    # Fifteen late stamps per side (1.5 %), in different trials: the per-pair differences are
    # +-50 in thirty trials, so their p99 is 50; each side's p99 is the same late value, so
    # the shift of the p99 is zero, and its CI holds zero.
    n = 1000
    base = np.ones(n)
    cand = np.ones(n)
    base[10:25] = 51.0
    cand[500:515] = 51.0
    diffs = cand - base
    assert float(np.quantile(diffs, 0.99)) == pytest.approx(50.0)
    shift, ci = paired_quantile_shift(base, cand, q=0.99, n_boot=300)
    assert shift == pytest.approx(0.0)
    assert ci is not None and ci[0] <= 0.0 <= ci[1]


def test_the_ci_needs_ten_values_beyond_the_quantile() -> None:
    assert min_tail_pairs(0.99) == 1000
    assert min_tail_pairs(0.9) == 100
    assert min_tail_pairs(0.5) == 20
    assert min_tail_pairs(0.01) == 1000  # the low tail is as thin as the high one
    rng = np.random.default_rng(5)
    base, cand = rng.exponential(1.0, size=1000), rng.exponential(1.0, size=1000)
    assert paired_quantile_shift(base, cand, n_boot=100)[1] is not None
    assert paired_quantile_shift(base[:999], cand[:999], n_boot=100)[1] is None
    assert paired_quantile_shift(base[:100], cand[:100], q=0.9, n_boot=100)[1] is not None


def test_quantile_shift_ci_covers_a_tail_shift_and_needs_enough_pairs() -> None:
    rng = np.random.default_rng(11)
    common = rng.lognormal(0.0, 0.5, size=2000)  # what both sides share in a trial
    base = common + rng.exponential(0.1, size=2000)
    cand = common + rng.exponential(0.1, size=2000) + np.where(rng.random(2000) < 0.05, 3.0, 0.0)
    shift, ci = paired_quantile_shift(base, cand, n_boot=500, seed=1)
    assert ci is not None and ci[0] > 0.0 and ci[0] <= shift <= ci[1]
    small, no_ci = paired_quantile_shift(base[:999], cand[:999])
    assert no_ci is None and math.isfinite(small)
    assert paired_quantile_shift(base, cand, seed=4, n_boot=200) == paired_quantile_shift(
        base, cand, seed=4, n_boot=200
    )


def test_quantile_shift_validates_input() -> None:
    with pytest.raises(ValueError, match="as many candidate as baseline"):
        paired_quantile_shift([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="q: expected a quantile"):
        paired_quantile_shift([1.0], [1.0], q=1.0)
    with pytest.raises(ValueError, match="finite"):
        paired_quantile_shift([1.0, math.nan], [1.0, 2.0])
    # differences of latencies can be negative or zero: allowed, unlike the speedup's inputs
    assert paired_quantile_shift([-1.0, 0.0], [0.0, 1.0], q=0.5)[0] == pytest.approx(1.0)
