"""Distribution sampling and validation: moments and quantiles on a fixed seed."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from pydantic import TypeAdapter, ValidationError

from harness.workload.distributions import (
    ConstantDist,
    Distribution,
    EmpiricalDist,
    LognormalDist,
    NormalDist,
    UniformDist,
)

# one distribution validated outside a scenario, as a scenario field validates it
parse_distribution = TypeAdapter(Distribution).validate_python

N = 40_000


def _samples(spec: object, seed: int = 1) -> list[float]:
    dist = parse_distribution(spec)
    rng = random.Random(seed)
    return [dist.sample(rng) for _ in range(N)]


def _quantile(xs: list[float], q: float) -> float:
    return sorted(xs)[int(q * (len(xs) - 1))]


def test_bare_number_is_constant() -> None:
    dist = parse_distribution(300)
    assert isinstance(dist, ConstantDist)
    assert dist.sample(random.Random(0)) == 300
    assert dist.mean() == 300


def test_uniform_mean_and_range() -> None:
    xs = _samples({"dist": "uniform", "min": 8, "max": 12})
    assert isinstance(parse_distribution({"dist": "uniform", "min": 8, "max": 12}), UniformDist)
    assert min(xs) >= 8 and max(xs) <= 12
    assert statistics.fmean(xs) == pytest.approx(10, rel=0.01)
    assert _quantile(xs, 0.25) == pytest.approx(9, rel=0.02)


def test_normal_mean_and_sd() -> None:
    xs = _samples({"dist": "normal", "mean": 120, "sd": 30})
    assert statistics.fmean(xs) == pytest.approx(120, rel=0.01)
    assert statistics.stdev(xs) == pytest.approx(30, rel=0.03)


def test_truncated_normal_respects_bounds_and_mean() -> None:
    spec = {"dist": "normal", "mean": 100, "sd": 50, "min": 80, "max": 300}
    dist = parse_distribution(spec)
    assert isinstance(dist, NormalDist)
    xs = _samples(spec)
    assert min(xs) >= 80 and max(xs) <= 300
    assert statistics.fmean(xs) == pytest.approx(dist.mean(), rel=0.01)
    # Truncating the lower tail moves the mean up.
    assert dist.mean() > 100


def test_lognormal_median_and_p95() -> None:
    spec = {"dist": "lognormal", "median": 400, "p95": 2000}
    dist = parse_distribution(spec)
    assert isinstance(dist, LognormalDist)
    assert dist.sigma == pytest.approx(math.log(5) / 1.6448536, rel=1e-6)
    xs = _samples(spec)
    assert _quantile(xs, 0.5) == pytest.approx(400, rel=0.03)
    assert _quantile(xs, 0.95) == pytest.approx(2000, rel=0.05)
    assert statistics.fmean(xs) == pytest.approx(dist.mean(), rel=0.05)


def test_empirical_draws_only_given_values() -> None:
    spec = {"dist": "empirical", "values": [40, 60, 60, 120]}
    dist = parse_distribution(spec)
    assert isinstance(dist, EmpiricalDist)
    xs = _samples(spec)
    assert set(xs) == {40, 60, 120}
    assert statistics.fmean(xs) == pytest.approx(dist.mean(), rel=0.02)
    assert xs.count(60) / N == pytest.approx(0.5, abs=0.02)


def test_same_seed_same_draws() -> None:
    spec = {"dist": "lognormal", "median": 120, "p95": 600}
    assert _samples(spec, seed=5)[:100] == _samples(spec, seed=5)[:100]
    assert _samples(spec, seed=5)[:100] != _samples(spec, seed=6)[:100]


@pytest.mark.parametrize(
    "spec",
    [
        {"dist": "uniform", "min": 5, "max": 5},
        {"dist": "lognormal", "median": 400, "p95": 400},
        {"dist": "lognormal", "median": 0, "p95": 10},
        {"dist": "normal", "mean": 1, "sd": 0},
        {"dist": "normal", "mean": 1, "sd": 1, "min": 2},
        {"dist": "empirical", "values": []},
        {"dist": "pareto", "alpha": 1},
        {"min": 1, "max": 2},
        {"dist": "uniform", "min": 1, "max": 2, "mean": 3},
        True,
        "ten",
    ],
)
def test_invalid_specs_are_rejected(spec: object) -> None:
    with pytest.raises(ValidationError):
        parse_distribution(spec)
