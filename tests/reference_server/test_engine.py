"""The pure engine model, driven by a fake clock: rates, bursts, batching, cache, capacity."""

from __future__ import annotations

import functools
import itertools
import math
import random
import statistics
from bisect import bisect_right

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_server.core.engine import (
    NS_PER_MS,
    NS_PER_S,
    DecodePlan,
    EngineCapacity,
    Pacer,
    PrefixCache,
    decode_plan,
    expected_decode_ms,
    first_token_ns,
    prefill_ns,
)
from reference_server.core.profiles import EngineProfile, ProfileError, load_profiles


def _offsets(plan: DecodePlan) -> tuple[int, ...]:
    return tuple(plan.iter_offsets())


def _batches(plan: DecodePlan, min_interval_ns: int) -> list[tuple[int, int]]:
    return list(plan.iter_batches(min_interval_ns))


WINDOW_NS = 100 * NS_PER_MS


def _engine(name: str = "cerebras-spark", **overrides: str) -> EngineProfile:
    return load_profiles("optimized", name, {f"engine.{k}": v for k, v in overrides.items()})[1]


def _peak_window_tokens(times_ns: list[int], counts: list[int], window_ns: int = WINDOW_NS) -> int:
    """Most tokens emitted within any closed window of ``window_ns`` (as the harness measures)."""
    prefix = [0]
    for c in counts:
        prefix.append(prefix[-1] + c)
    best = 0
    for i, t in enumerate(times_ns):
        j = bisect_right(times_ns, t + window_ns)
        best = max(best, prefix[j] - prefix[i])
    return best


def _decode_tps(plan: DecodePlan) -> float:
    return (plan.n_tokens - 1) * NS_PER_S / plan.duration_ns


# -- prefill ---------------------------------------------------------------------------------


def test_prefill_and_first_token_arithmetic() -> None:
    eng = _engine()
    assert prefill_ns(40_000, eng) == NS_PER_S  # 40k tokens/s
    assert prefill_ns(0, eng) == 0
    assert prefill_ns(-5, eng) == 0
    assert first_token_ns(2_000, eng) == 50 * NS_PER_MS + 20 * NS_PER_MS


# -- prefix cache ----------------------------------------------------------------------------


def test_prefix_cache_longest_match() -> None:
    cache = PrefixCache(100)
    conv = [(11, 100), (12, 300), (13, 700)]
    assert cache.lookup(conv) == 0
    cache.insert(conv[:2])
    assert cache.lookup(conv) == 300
    cache.insert(conv)
    assert cache.lookup([*conv, (14, 1500)]) == 700
    # A different conversation sharing only the first item.
    assert cache.lookup([(11, 100), (99, 250)]) == 100
    assert cache.lookup([(98, 100)]) == 0
    assert cache.hits == 3 and cache.misses == 2


def test_prefix_cache_lru_eviction_and_refresh() -> None:
    cache = PrefixCache(3)
    cache.insert([(1, 10), (2, 20)])
    cache.insert([(3, 30)])
    assert cache.lookup([(1, 10)]) == 10  # refreshes 1; 2 is now the oldest
    cache.insert([(4, 40)])
    assert len(cache) == 3
    assert cache.lookup([(2, 20)]) == 0
    assert cache.lookup([(1, 10)]) == 10
    assert cache.lookup([(3, 30)]) == 30
    assert cache.lookup([(4, 40)]) == 40


def test_prefix_cache_disabled() -> None:
    cache = PrefixCache(0)
    cache.insert([(1, 10)])
    assert cache.lookup([(1, 10)]) == 0
    with pytest.raises(ValueError, match="max_entries"):
        PrefixCache(-1)


# -- decode plans ----------------------------------------------------------------------------


def test_a_full_prefix_cache_table_steps_up_once_as_it_churns_then_stays() -> None:
    # What the soak accounts for: CPython resizes a dict for its live entries x3 once its
    # slots are used up, and an LRU's evictions use them up; the table at its first fill is
    # one size below the one a churning cache keeps for good.
    cache, rng = PrefixCache(4096), random.Random(2)
    for _ in range(4096):
        cache.insert([(rng.getrandbits(63), 100)])
    first_full = cache.table_bytes()
    sizes = set()
    for step in range(40):
        for _ in range(2048):
            cache.insert([(rng.getrandbits(63), 100)])
        if step >= 4:
            sizes.add(cache.table_bytes())
    assert len(cache) == 4096
    assert sizes == {max(sizes)} and max(sizes) > 1.5 * first_full, (first_full, sizes)


def test_plan_without_burst_is_exactly_sustained() -> None:
    eng = _engine(burst_probability="0")
    plan = decode_plan(1001, random.Random(1), eng)
    assert plan.burst is None
    assert _offsets(plan)[0] == 0
    assert _offsets(plan)[1] == NS_PER_MS
    assert plan.duration_ns == 1000 * NS_PER_MS
    assert _decode_tps(plan) == pytest.approx(1000.0, rel=1e-12)


def test_gpu_legacy_never_bursts() -> None:
    eng = _engine("gpu-legacy")
    rng = random.Random(3)
    for _ in range(50):
        plan = decode_plan(400, rng, eng)
        assert plan.burst is None
        assert _decode_tps(plan) == pytest.approx(65.0, rel=1e-9)


def test_plans_are_deterministic_by_seed() -> None:
    eng = _engine()
    a = [decode_plan(900, random.Random(s), eng) for s in range(40)]
    b = [decode_plan(900, random.Random(s), eng) for s in range(40)]
    assert a == b
    assert len({p.burst for p in a}) > 2  # the seed matters


def test_burst_runs_at_burst_rate_and_fills_a_window() -> None:
    eng = _engine(burst_probability="1")
    plan = decode_plan(2000, random.Random(7), eng)
    assert plan.burst is not None
    start, length = plan.burst
    assert eng.burst_min_tokens <= length <= eng.burst_max_tokens
    gap_ns = NS_PER_S / eng.burst_tps
    offsets = _offsets(plan)
    for i in range(start, start + length):
        assert offsets[i] - offsets[i - 1] == pytest.approx(gap_ns, abs=1)
    for i in range(1, start):
        assert offsets[i] - offsets[i - 1] == pytest.approx(NS_PER_MS, abs=1)
    # Batched as the server emits it, the burst fills one 100 ms window at the burst rate.
    batches = _batches(plan, 2 * NS_PER_MS)
    peak = _peak_window_tokens([t for t, _ in batches], [k for _, k in batches])
    assert peak * NS_PER_S / WINDOW_NS >= 4000
    # ...and batching adds at most one batch to the true (one token per delta) peak.
    exact = _peak_window_tokens(list(offsets), [1] * plan.n_tokens)
    assert exact <= peak <= exact + max(k for _, k in batches)


def test_decode_tps_median_is_sustained_rate() -> None:
    for name, rate in (("cerebras-spark", 1000.0), ("gpu-legacy", 65.0)):
        eng = _engine(name)
        rng = random.Random(11)
        tps = [_decode_tps(decode_plan(rng.choice([150, 400, 1500]), rng, eng)) for _ in range(400)]
        assert statistics.median(tps) == pytest.approx(rate, rel=0.03)


@pytest.mark.parametrize("run_seed", range(10))
def test_burst_peak_over_a_few_dozen_long_responses(run_seed: int) -> None:
    eng = _engine()
    rng = random.Random(run_seed)
    best = 0
    for _ in range(24):
        plan = decode_plan(1500, rng, eng)
        batches = _batches(plan, 2 * NS_PER_MS)
        best = max(best, _peak_window_tokens([t for t, _ in batches], [k for _, k in batches]))
    assert best * NS_PER_S / WINDOW_NS >= 3600


def test_expected_decode_matches_sampled_mean() -> None:
    eng = _engine()
    rng = random.Random(5)
    for n in (150, 400, 1500):
        mean_ms = statistics.fmean(
            decode_plan(n, rng, eng).duration_ns / NS_PER_MS for _ in range(3000)
        )
        assert mean_ms == pytest.approx(expected_decode_ms(n, eng), rel=0.03)
    assert expected_decode_ms(400, _engine("gpu-legacy")) == pytest.approx(399 / 65 * 1000)


def test_empty_and_single_token_plans() -> None:
    eng = _engine()
    assert _batches(decode_plan(0, random.Random(0), eng), 2 * NS_PER_MS) == []
    one = decode_plan(1, random.Random(0), eng)
    assert _offsets(one) == (0,) and _batches(one, 2 * NS_PER_MS) == [(0, 1)]


# -- batching --------------------------------------------------------------------------------


def test_batches_at_sustained_rate() -> None:
    plan = decode_plan(300, random.Random(0), _engine(burst_probability="0"))
    batches = _batches(plan, 2 * NS_PER_MS)
    assert batches[0] == (0, 1)
    assert batches[-1][0] == 299 * NS_PER_MS
    assert sum(k for _, k in batches) == 300
    assert len(batches) == 150
    assert _batches(plan, 0) == [(off, 1) for off in _offsets(plan)]


@functools.cache
def _bursty_engine() -> EngineProfile:
    """The profile every example of the property test plans with (read from YAML once)."""
    return _engine(burst_probability="0.5")


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=1500),
    seed=st.integers(min_value=0, max_value=2**32),
    interval_us=st.integers(min_value=0, max_value=20_000),
)
def test_batches_properties(n: int, seed: int, interval_us: int) -> None:
    plan = decode_plan(n, random.Random(seed), _bursty_engine())
    interval = interval_us * 1000
    batches = _batches(plan, interval)
    offsets = _offsets(plan)
    assert sum(k for _, k in batches) == n
    assert all(k >= 1 for _, k in batches)
    assert batches[0][0] == 0 and batches[-1][0] == plan.duration_ns
    # Each batch goes out when its last token is due: never early.
    last_index = -1
    for t, k in batches:
        last_index += k
        assert t == offsets[last_index]
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(batches)]
    if plan.duration_ns >= interval:
        assert all(g >= interval for g in gaps)


# -- pacing against a fake clock -------------------------------------------------------------


def test_pacer_keeps_the_long_run_rate_under_late_wakeups() -> None:
    plan = decode_plan(3001, random.Random(0), _engine(burst_probability="0"))
    batches = _batches(plan, 2 * NS_PER_MS)
    t0 = 5 * NS_PER_S
    pacer = Pacer(batches, t0)
    offsets = _offsets(plan)
    rng = random.Random(42)
    emitted: list[tuple[int, int]] = []
    while not pacer.done:
        deadline = pacer.next_deadline_ns()
        assert deadline is not None
        # The event loop wakes up to 15 ms late, sometimes much later.
        late = rng.choice([0, rng.randrange(15 * NS_PER_MS), rng.randrange(60 * NS_PER_MS)])
        now = deadline + late
        k = pacer.take_due(now)
        assert k >= 1
        # Every batch due by now went out, nothing not yet due did; so the emitted count
        # trails the per-token schedule by less than one batch, however late the wake-up.
        due_batches = sum(c for off, c in batches if t0 + off <= now)
        due_tokens = sum(1 for off in offsets if t0 + off <= now)
        total = sum(c for _, c in emitted) + k
        assert total == due_batches
        assert due_tokens - 2 < total <= due_tokens
        emitted.append((now, k))
    assert sum(k for _, k in emitted) == 3001
    assert len(emitted) < len(batches)  # late wake-ups coalesced batches
    assert pacer.last_deadline_ns - t0 == 3000 * NS_PER_MS
    # The final token's emission is late only by that wake-up's lateness, not by accumulated drift.
    assert emitted[-1][0] - (t0 + plan.duration_ns) < 60 * NS_PER_MS


def test_pacer_on_time_reproduces_the_plan() -> None:
    plan = decode_plan(500, random.Random(9), _engine(burst_probability="1"))
    batches = _batches(plan, 2 * NS_PER_MS)
    pacer = Pacer(batches, 1000)
    out = []
    while not pacer.done:
        deadline = pacer.next_deadline_ns()
        assert deadline is not None
        assert pacer.take_due(deadline - 1) == 0
        out.append((deadline - 1000, pacer.take_due(deadline)))
    assert out == batches


def test_pacer_rate_scale_slows_the_remaining_tokens() -> None:
    plan = decode_plan(1001, random.Random(0), _engine(burst_probability="0"))
    pacer = Pacer(_batches(plan, 0), 0)
    # Half speed from the midpoint: the second 500 tokens take 1 s instead of 0.5 s.
    while not pacer.done:
        deadline = pacer.next_deadline_ns()
        assert deadline is not None
        if deadline >= 500 * NS_PER_MS:
            pacer.set_scale(500 * NS_PER_MS, 0.5)
            deadline = pacer.next_deadline_ns()
            assert deadline is not None
        pacer.take_due(deadline)
    assert pacer.last_deadline_ns == 1500 * NS_PER_MS
    with pytest.raises(ValueError, match="scale"):
        pacer.set_scale(0, 0.0)


# -- capacity --------------------------------------------------------------------------------


def test_capacity_fifo_queue_and_queue_time() -> None:
    cap = EngineCapacity(max_streams=2, aggregate_tps=10_000)
    a = cap.request(0, 1000)
    b = cap.request(10, 1000)
    c = cap.request(20, 1000)
    d = cap.request(30, 1000)
    assert a.admitted and b.admitted and not c.admitted and not d.admitted
    assert (cap.active, cap.queued) == (2, 2)
    assert cap.release(b, 100) == [c]
    assert c.queue_ns == 80
    assert d.queue_ns == 0 and not d.admitted
    assert cap.release(a, 250) == [d]
    assert d.queue_ns == 220
    assert cap.release(a, 300) == []  # double release is harmless
    assert (cap.active, cap.queued) == (2, 0)


def test_capacity_cancel_while_queued() -> None:
    cap = EngineCapacity(max_streams=1, aggregate_tps=10_000)
    a = cap.request(0, 1000)
    b = cap.request(0, 1000)
    c = cap.request(0, 1000)
    assert cap.release(b, 5) == []  # b gave up waiting
    assert cap.release(a, 10) == [c]
    assert cap.active == 1 and cap.queued == 0


def test_capacity_fair_rate_scaling() -> None:
    cap = EngineCapacity(max_streams=10, aggregate_tps=3000)
    tickets = [cap.request(0, 1000) for _ in range(3)]
    assert cap.rate_scale(0) == 1.0
    extra = cap.request(0, 1000)
    assert cap.rate_scale(0) == pytest.approx(0.75)
    tickets.append(cap.request(0, 1000))
    assert cap.rate_scale(0) == pytest.approx(0.6)
    cap.release(extra, 1)
    cap.release(tickets[0], 1)
    assert cap.rate_scale(1) == 1.0
    with pytest.raises(ValueError, match="max_streams"):
        EngineCapacity(0, 1.0)


# -- interference (batching) -----------------------------------------------------------------


def test_first_token_waits_for_the_streams_active_at_admission() -> None:
    eng = _engine(ttft_per_active_ms="1.5")
    assert first_token_ns(2_000, eng, others=0) == 70 * NS_PER_MS
    assert first_token_ns(2_000, eng, others=3) == 70 * NS_PER_MS + 4_500_000
    # the shipped profiles have no interference: a newcomer's first token is the same
    assert first_token_ns(2_000, _engine(), others=7) == 70 * NS_PER_MS


def test_an_idle_engine_wakes_up_for_a_request_alone() -> None:
    eng = _engine(ttft_per_active_ms="1.5", idle_wake_ms="2.5")
    # alone: the wake-up on top; beside others: their interference, no wake-up
    assert first_token_ns(2_000, eng, others=0) == 70 * NS_PER_MS + 2_500_000
    assert first_token_ns(2_000, eng, others=1) == 70 * NS_PER_MS + 1_500_000
    # absent from a profile: 0, every older profile's first token unchanged
    assert _engine().idle_wake_ms == 0.0
    assert first_token_ns(2_000, _engine(), others=0) == 70 * NS_PER_MS
    with pytest.raises(ProfileError, match="idle_wake_ms"):
        _engine(idle_wake_ms="-1")


def test_a_busy_engine_charges_a_newcomer_once() -> None:
    """vLLM with its worker pinned to one CPU: a request beside others waits once for the
    running step, then each other stream adds its share."""
    eng = _engine(ttft_per_active_ms="1.5", busy_admit_ms="4")
    assert first_token_ns(2_000, eng, others=0) == 70 * NS_PER_MS
    assert first_token_ns(2_000, eng, others=1) == 70 * NS_PER_MS + 5_500_000
    assert first_token_ns(2_000, eng, others=3) == 70 * NS_PER_MS + 8_500_000
    assert _engine().busy_admit_ms == 0.0
    with pytest.raises(ProfileError, match="busy_admit_ms"):
        _engine(busy_admit_ms="-1")


def test_the_ttft_spread_is_a_seeded_draw_of_mean_zero_growing_with_the_others() -> None:
    """vLLM on the CPU: its TTFT p99 is 1.7-2.5x its p50 where the fixed model's is 1.2-1.5x
    (issue 38 item 4).  Each request's first token moves by scale x (Exp(1) - 1), scale
    ttft_spread_ms + ttft_spread_per_active_ms per other stream: mean 0 (expected figures
    unchanged), p99 - p50 = scale x ln 50, as early as -scale, the same for the same seed."""
    eng = _engine(ttft_spread_ms="2", ttft_spread_per_active_ms="1")
    fixed = first_token_ns(2_000, eng, others=3)  # no rng: the fixed part only
    assert fixed == 70 * NS_PER_MS
    draws = [
        (first_token_ns(2_000, eng, others=3, rng=random.Random(i)) - fixed) / NS_PER_MS
        for i in range(20_000)
    ]
    scale = 2 + 3 * 1
    assert statistics.fmean(draws) == pytest.approx(0, abs=0.05 * scale)
    assert min(draws) >= -scale
    q = statistics.quantiles(draws, n=100)
    assert q[98] - q[49] == pytest.approx(scale * math.log(50), rel=0.05)
    # alone: the base scale only
    alone = [
        (first_token_ns(2_000, eng, rng=random.Random(i)) - fixed) / NS_PER_MS
        for i in range(20_000)
    ]
    qa = statistics.quantiles(alone, n=100)
    assert qa[98] - qa[49] == pytest.approx(2 * math.log(50), rel=0.05)
    # seeded: the same seed draws the same first token
    assert first_token_ns(2_000, eng, 3, random.Random(5)) == first_token_ns(
        2_000, eng, 3, random.Random(5)
    )


def test_a_profile_without_a_spread_draws_nothing() -> None:
    """Absent from a profile: 0, the first token is the fixed one and the generator is left
    as it was (the decode plan drawn from it before is unchanged too)."""
    eng = _engine(busy_admit_ms="4")
    assert eng.ttft_spread_ms == eng.ttft_spread_per_active_ms == 0.0
    rng = random.Random(9)
    assert first_token_ns(2_000, eng, 1, rng) == first_token_ns(2_000, eng, 1)
    assert rng.random() == random.Random(9).random()
    with pytest.raises(ProfileError, match="ttft_spread_ms"):
        _engine(ttft_spread_ms="-1")


def test_capacity_batching_slows_every_stream_by_the_others() -> None:
    cap = EngineCapacity(max_streams=10, aggregate_tps=1e9, slowdown_per_stream=0.1)
    first = cap.request(0, 1000)
    assert cap.rate_scale(0) == 1.0  # alone: the profile's own rate
    tickets = [first] + [cap.request(0, 1000) for _ in range(3)]
    # four streams: time per token x (1 + 0.1 x 3)
    assert cap.rate_scale(0) == pytest.approx(1 / 1.3)
    for t in tickets[1:]:
        cap.release(t, 1)
    assert cap.rate_scale(1) == 1.0


def test_capacity_batching_and_budget_multiply() -> None:
    cap = EngineCapacity(max_streams=10, aggregate_tps=3000, slowdown_per_stream=0.1)
    for _ in range(4):
        cap.request(0, 1000)
    assert cap.rate_scale(0) == pytest.approx(0.75 / 1.3)


def test_interference_fields_load_from_a_profile_and_default_to_zero() -> None:
    assert _engine().decode_slowdown_per_stream == 0.0
    assert _engine().ttft_per_active_ms == 0.0
    eng = _engine(decode_slowdown_per_stream="0.08", ttft_per_active_ms="2")
    assert (eng.decode_slowdown_per_stream, eng.ttft_per_active_ms) == (0.08, 2.0)
    with pytest.raises(ProfileError, match="decode_slowdown_per_stream"):
        _engine(decode_slowdown_per_stream="-1")
