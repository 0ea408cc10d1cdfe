"""Open-loop arrival plans: rates, gap laws, bursts, stages and limits on fixed seeds."""

from __future__ import annotations

import itertools
import random
import statistics
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.workload.scenario import Load
from harness.workload.schedule import NS_PER_S, schedule_starts, throughput_load


def intended_starts(
    load: Load, count: int, rng: random.Random, mean_output_tokens: float | None = None
) -> list[int]:
    """Intended start offsets (ns from the run start), sorted ascending."""
    return [s.offset_ns for s in schedule_starts(load, count, rng, mean_output_tokens)]


def _load(**fields: Any) -> Load:
    return Load.model_validate({"mode": "open", **fields})


def _gaps_s(starts: list[int]) -> list[float]:
    return [(b - a) / NS_PER_S for a, b in itertools.pairwise(starts)]


def test_closed_loop_starts_everything_at_zero() -> None:
    assert intended_starts(Load(), 5, random.Random(0)) == [0] * 5


def test_constant_rate_is_exact() -> None:
    starts = intended_starts(_load(arrival={"process": "constant", "rate": 4}), 9, random.Random(0))
    assert starts == [i * 250_000_000 for i in range(9)]


def test_poisson_mean_rate_and_cv() -> None:
    starts = intended_starts(
        _load(arrival={"process": "poisson", "rate": 5}), 20_000, random.Random(1)
    )
    assert len(starts) == 20_000
    assert starts[0] == 0
    gaps = _gaps_s(starts)
    assert 1 / statistics.fmean(gaps) == pytest.approx(5, rel=0.02)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(1.0, rel=0.03)


@pytest.mark.parametrize(
    ("arrival", "cv"),
    [
        ({"process": "gamma", "rate": 2, "cv": 2.0}, 2.0),
        ({"process": "gamma", "rate": 2, "cv": 0.5}, 0.5),
        ({"process": "gamma", "rate": 2, "burstiness": 4.0}, 0.5),
    ],
)
def test_gamma_rate_and_cv(arrival: dict[str, Any], cv: float) -> None:
    gaps = _gaps_s(intended_starts(_load(arrival=arrival), 40_000, random.Random(2)))
    assert 1 / statistics.fmean(gaps) == pytest.approx(2, rel=0.03)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(cv, rel=0.05)


def test_bursts_add_exactly_m_starts_inside_window() -> None:
    base = {"arrival": {"process": "poisson", "rate": 1}}
    plain = intended_starts(_load(**base), 50, random.Random(3))
    bursty = schedule_starts(
        _load(**base, bursts=[{"at_s": 10, "extra": 20, "over_s": 2}]), 50, random.Random(3)
    )
    burst_offsets = [s.offset_ns for s in bursty if s.source == "burst"]
    assert len(burst_offsets) == 20
    assert all(10 * NS_PER_S <= t <= 12 * NS_PER_S for t in burst_offsets)
    # The base schedule is untouched: bursts come on top.
    assert [s.offset_ns for s in bursty if s.source == "base"] == plain
    assert len(bursty) == 70
    offsets = [s.offset_ns for s in bursty]
    assert offsets == sorted(offsets)


def test_zero_width_burst_is_a_spike() -> None:
    load = _load(arrival={"rate": 1}, bursts=[{"at_s": 5, "extra": 7}])
    starts = schedule_starts(load, 3, random.Random(0))
    assert [s.offset_ns for s in starts if s.source == "burst"] == [5 * NS_PER_S] * 7
    assert {s.burst for s in starts if s.source == "burst"} == {0}


def test_duration_limits_the_schedule_and_ignores_count() -> None:
    load = _load(arrival={"process": "poisson", "rate": 10}, duration_s=60)
    starts = intended_starts(load, 5, random.Random(4))
    assert all(t < 60 * NS_PER_S for t in starts)
    assert len(starts) == pytest.approx(600, rel=0.1)


def test_constant_stages() -> None:
    load = _load(
        arrival={"process": "constant"},
        stages=[{"duration_s": 10, "rate": 1}, {"duration_s": 10, "rate": 3}],
        duration_s=20,
    )
    starts = intended_starts(load, 1000, random.Random(0))
    first = [t for t in starts if t < 10 * NS_PER_S]
    second = [t for t in starts if t >= 10 * NS_PER_S]
    assert len(first) == 10 and len(second) == 30
    assert _gaps_s(second) == pytest.approx([1 / 3] * 29)


def test_linear_ramp_follows_the_rate_integral() -> None:
    # Rate 0 → 10/s over 100 s: Λ(t) = t²/20, i.e. 125 arrivals in the first
    # half and 375 in the second.
    load = _load(
        arrival={"process": "constant"},
        stages=[{"duration_s": 100, "rate": 0, "end_rate": 10}],
        duration_s=100,
    )
    starts = intended_starts(load, 10_000, random.Random(0))
    assert len(starts) == 500
    assert sum(t < 50 * NS_PER_S for t in starts) == 125
    assert starts[100] == pytest.approx((20 * 100) ** 0.5 * NS_PER_S, abs=1)


def test_pause_stage_then_tail_rate() -> None:
    load = _load(
        arrival={"process": "constant", "rate": 2},
        stages=[{"duration_s": 5, "rate": 0}, {"duration_s": 4, "rate": 1}],
    )
    starts = intended_starts(load, 8, random.Random(0))
    seconds = [t / NS_PER_S for t in starts]
    assert seconds == pytest.approx([5, 6, 7, 8, 9, 9.5, 10, 10.5])


def test_stages_without_tail_rate_end_the_schedule() -> None:
    load = _load(arrival={"process": "constant"}, stages=[{"duration_s": 3, "rate": 1}])
    assert len(intended_starts(load, 100, random.Random(0))) == 4  # t = 0, 1, 2 and 3


def test_same_seed_same_schedule() -> None:
    load = _load(arrival={"process": "gamma", "rate": 3, "cv": 1.5})
    assert intended_starts(load, 200, random.Random(9)) == intended_starts(
        load, 200, random.Random(9)
    )
    assert intended_starts(load, 200, random.Random(9)) != intended_starts(
        load, 200, random.Random(8)
    )


@settings(max_examples=60, deadline=None)
@given(
    process=st.sampled_from(["constant", "poisson", "gamma"]),
    rate=st.floats(0.1, 50),
    count=st.integers(0, 200),
    extra=st.integers(1, 20),
    at_s=st.floats(0, 30),
    over_s=st.floats(0, 10),
    seed=st.integers(0, 2**32),
)
def test_schedule_invariants(
    process: str, rate: float, count: int, extra: int, at_s: float, over_s: float, seed: int
) -> None:
    arrival: dict[str, Any] = {"process": process, "rate": rate}
    if process == "gamma":
        arrival["cv"] = 1.7
    load = _load(arrival=arrival, bursts=[{"at_s": at_s, "extra": extra, "over_s": over_s}])
    starts = intended_starts(load, count, random.Random(seed))
    assert len(starts) == count + extra
    assert starts == sorted(starts)
    assert all(isinstance(t, int) and t >= 0 for t in starts)


def _throughput(**fields: Any) -> Load:
    return Load.model_validate({"mode": "throughput", **fields})


def test_throughput_becomes_rate_stages() -> None:
    load = _throughput(
        throughput={"tps": 1000, "bursts": [{"at_s": 10, "over_s": 5, "tps": 4000}]},
        arrival={"process": "constant"},
        duration_s=30,
    )
    open_load = throughput_load(load, 500.0)
    assert open_load.mode == "open"
    assert [(s.duration_s, s.rate) for s in open_load.stages] == [(10, 2.0), (5, 8.0)]
    assert open_load.arrival is not None and open_load.arrival.rate == 2.0
    starts = intended_starts(load, 0, random.Random(0), 500.0)
    # Constant gaps: 20 starts in [0, 10), 40 in [10, 15), 30 in [15, 30).
    assert len(starts) == 20 + 40 + 30
    assert sum(10 * NS_PER_S <= s < 15 * NS_PER_S for s in starts) == 40


def test_throughput_keeps_the_gap_law() -> None:
    load = _throughput(
        throughput={"tps": 2000}, arrival={"process": "gamma", "cv": 2.0}, duration_s=10_000
    )
    gaps = _gaps_s(intended_starts(load, 0, random.Random(5), 1000.0))
    assert 1 / statistics.fmean(gaps) == pytest.approx(2.0, rel=0.05)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(2.0, rel=0.08)


def test_throughput_needs_the_mean_output() -> None:
    load = _throughput(throughput={"tps": 1000})
    with pytest.raises(ValueError, match="mean_output_tokens"):
        schedule_starts(load, 5, random.Random(0))
    with pytest.raises(ValueError, match="positive"):
        throughput_load(load, 0.0)
