"""The asyncio adapter on a real event loop: pacing, slots, queueing, cancellation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import pytest

from reference_server.core.api_tier import RequestCost
from reference_server.core.profiles import load_profiles
from reference_server.sim import (
    DEFAULT_MIN_DELTA_INTERVAL_MS,
    Simulator,
    decode_seed,
    with_static_prefix,
)


def _sim(
    min_delta_interval_ms: float | None = None, overrides: dict[str, str] | None = None
) -> Simulator:
    api, engine = load_profiles(
        "optimized",
        "cerebras-spark",
        {"engine.burst_probability": "0", **(overrides or {})},
    )
    return Simulator(api, engine, seed=1, min_delta_interval_ms=min_delta_interval_ms)


T = TypeVar("T")


class _Recorder:
    def __init__(self) -> None:
        self.times_ns: list[int] = []
        self.counts: list[int] = []

    async def __call__(self, sizes: Sequence[int]) -> None:
        now = time.perf_counter_ns()
        for k in sizes:  # one delta event each, written together
            self.times_ns.append(now)
            self.counts.append(k)


def _run(coro: Coroutine[Any, Any, T], loop: str = "asyncio") -> T:
    if loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    return asyncio.run(coro)


@pytest.mark.parametrize(
    ("interval_ms", "loop"), [(None, "asyncio"), (0.0, "asyncio"), (None, "uvloop")]
)
def test_paces_300_tokens_at_1000_tps(interval_ms: float | None, loop: str) -> None:
    sim = _sim(interval_ms, {"engine.base_ttft_ms": "0"})
    rec = _Recorder()
    result = _run(sim.inference([(1, 10)], 10, 300, 7, rec), loop)
    assert sum(rec.counts) == 300
    assert all(k >= 1 for k in rec.counts)
    # One delta per batch (2 tokens per 2 ms, or 1 per token); a late wake-up may merge some.
    max_emits = 300 if interval_ms == 0.0 else 150
    assert 1 < len(rec.counts) <= max_emits
    span_ms = (rec.times_ns[-1] - rec.times_ns[0]) / 1e6
    assert span_ms == pytest.approx(299.0, rel=0.03)
    assert result["decode"] == pytest.approx(299.0)
    assert result["cached_tokens"] == 0


def test_default_delta_interval() -> None:
    assert _sim().describe()["min_delta_interval_ms"] == DEFAULT_MIN_DELTA_INTERVAL_MS
    with pytest.raises(ValueError, match="min_delta_interval_ms"):
        _sim(-1.0)


def test_prefix_cache_spans_requests() -> None:
    sim = _sim()

    async def run() -> tuple[dict[str, float | int], dict[str, float | int]]:
        async def emit(sizes: Sequence[int]) -> None:
            return None

        conv = [(101, 3000)]
        first = await sim.inference(conv, 3000, 2, 1, emit)
        second = await sim.inference([*conv, (102, 5150)], 5150, 2, 2, emit)
        return first, second

    first, second = asyncio.run(run())
    assert first["cached_tokens"] == 0 and second["cached_tokens"] == 3000
    # prefill reports the uncached prefill plus the base TTFT
    assert second["prefill"] == pytest.approx(2150 / 40.0 + 20.0)
    assert second["ttft"] == pytest.approx(second["engine_queue"] + second["prefill"])


def test_engine_slots_queue_fifo() -> None:
    sim = _sim(overrides={"engine.max_streams": "1", "engine.base_ttft_ms": "0"})
    order: list[str] = []

    def emitter(tag: str) -> Callable[[Sequence[int]], Awaitable[None]]:
        async def emit(sizes: Sequence[int]) -> None:
            order.append(tag)

        return emit

    async def run() -> list[dict[str, float | int]]:
        return list(
            await asyncio.gather(
                sim.inference([(1, 1)], 1, 20, 1, emitter("a")),
                sim.inference([(2, 1)], 1, 20, 2, emitter("b")),
                sim.inference([(3, 1)], 1, 20, 3, emitter("c")),
            )
        )

    a, b, c = asyncio.run(run())
    assert order == sorted(order)  # one stream at a time, in arrival order
    assert a["engine_queue"] == 0
    assert 0 < b["engine_queue"] < c["engine_queue"]
    assert sim.capacity.active == 0 and sim.capacity.queued == 0


def test_cancelled_streams_free_their_slot() -> None:
    sim = _sim(overrides={"engine.max_streams": "1"})

    async def emit(sizes: Sequence[int]) -> None:
        return None

    async def run() -> dict[str, float | int]:
        running = asyncio.create_task(sim.inference([(1, 1)], 1, 5000, 1, emit))
        waiting = asyncio.create_task(sim.inference([(2, 1)], 1, 5000, 2, emit))
        await asyncio.sleep(0)
        assert sim.capacity.queued == 1
        waiting.cancel()
        running.cancel()
        for task in (waiting, running):
            with pytest.raises(asyncio.CancelledError):
                await task
        assert sim.capacity.active == 0 and sim.capacity.queued == 0
        return await sim.inference([(3, 1)], 1, 3, 3, emit)

    assert asyncio.run(run())["engine_queue"] == 0


def test_api_workers_bound_concurrency() -> None:
    api, engine = load_profiles(overrides={"api.workers": "1"})
    sim = Simulator(api, engine)
    cost = RequestCost(
        new_connection=False, websocket=True, connection_resolved=True, processed_tokens=100
    )

    async def run() -> list[tuple[dict[str, float], int]]:
        return list(await asyncio.gather(sim.pre_inference(cost), sim.pre_inference(cost)))

    (first, _), (second, _) = asyncio.run(run())
    expected = api.fixed_resolved_ms + 100 * api.per_token_us / 1000 + api.hops * api.hop_ms
    assert first["api_pre"] == second["api_pre"] == pytest.approx(expected)
    assert first["api_queue"] < second["api_queue"]


def test_post_inference_returns_modelled_ms() -> None:
    sim = _sim(overrides={"api.post_ms": "5"})
    cost = RequestCost(False, False, False, 10)
    assert asyncio.run(sim.post_inference(cost)) == 5.0


def test_describe_names_profiles() -> None:
    d = _sim().describe()
    assert d["api"]["name"] == "optimized"
    assert d["engine"]["name"] == "cerebras-spark"
    assert d["engine"]["burst_probability"] == 0
    assert d["seed"] == 1


def test_decode_is_anchored_at_the_actual_first_token() -> None:
    """A late wake-up after prefill delays the first token (TTFT), not the decode rate."""
    sim = _sim(None, {"engine.base_ttft_ms": "30"})
    rec = _Recorder()

    async def main() -> dict[str, float | int]:
        async def stall() -> None:
            # from 15 ms, well before the first token is due (30 ms): a wake-up a few ms late
            # on a busy machine still blocks the loop when the token is due
            await asyncio.sleep(0.015)
            time.sleep(0.03)  # the event loop is busy right when the first token is due

        blocker = asyncio.ensure_future(stall())
        result = await sim.inference([(1, 10)], 10, 300, 7, rec)
        await blocker
        return result

    t0 = time.perf_counter_ns()
    result = _run(main())
    assert (rec.times_ns[0] - t0) / 1e6 >= 44  # 30 ms due, the stall ends at ~45 ms
    span_ms = (rec.times_ns[-1] - rec.times_ns[0]) / 1e6
    # Anchored on the stale deadline the span would be ~15 ms short (~1,050 TPS).
    assert span_ms == pytest.approx(299.0, rel=0.02)
    assert result["decode"] == pytest.approx(299.0)


def test_static_prefix_is_cached_with_the_items() -> None:
    sim = _sim(None, {"engine.base_ttft_ms": "0"})
    tools = (12345, 400)

    async def two() -> tuple[int, int]:
        async def sink(_: Sequence[int]) -> None:
            return None

        first = await sim.inference([(1, 100)], 500, 2, 1, sink, static_prefix=tools)
        second = await sim.inference([(1, 100), (2, 300)], 700, 2, 1, sink, static_prefix=tools)
        return int(first["cached_tokens"]), int(second["cached_tokens"])

    assert _run(two()) == (0, 500)  # tools + first item, everything the first request had
    assert with_static_prefix([(1, 100)], None) == [(1, 100)]
    shifted = with_static_prefix([(1, 100), (2, 300)], (7, 50))
    assert [t for _, t in shifted] == [50, 150, 350]


def test_decode_seed_follows_content_not_ids() -> None:
    a = [
        {"type": "message", "role": "user", "content": "fix the bug"},
        {"type": "function_call", "call_id": "call_a", "name": "run", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_a", "output": "3 tests failed"},
    ]
    b = [dict(item, call_id="call_b") if "call_id" in item else item for item in a]
    assert decode_seed(a) == decode_seed(b)  # same turn of the same rollout, another transport
    assert decode_seed(a) != decode_seed(a[:1])
    c = [*a[:2], dict(a[2], output="all tests passed")]
    assert decode_seed(a) != decode_seed(c)
    assert 0 <= decode_seed([]) < 2**63


def test_batching_interference_reaches_the_streams() -> None:
    """The profile's interference is wired into the adapter: four streams admitted together
    each decode (1 + 0.5 x 3) times slower than alone, and each newcomer's first token waits
    ttft_per_active_ms per stream already active (the modelled ms it returns, exact)."""
    sets = {
        "engine.decode_slowdown_per_stream": "0.5",
        "engine.ttft_per_active_ms": "3",
        "engine.base_ttft_ms": "0",
    }
    sim = _sim(overrides=sets)

    async def emit(sizes: Sequence[int]) -> None:
        return None

    async def run(first: int, n: int) -> list[dict[str, float | int]]:
        # prompts never seen before (no prefix-cache hit): one uncached token each
        prompts = range(first, first + n)
        return list(
            await asyncio.gather(*(sim.inference([(i, 1)], 1, 101, i, emit) for i in prompts))
        )

    alone = asyncio.run(run(0, 1))[0]
    four = asyncio.run(run(10, 4))
    assert alone["decode"] == pytest.approx(100.0, rel=0.05)  # 100 gaps at 1,000 tokens/s
    for r in four:
        assert r["decode"] == pytest.approx(250.0, rel=0.1)
    prefill = 1 / 40  # one uncached token at 40,000 tokens/s, ms
    assert sorted(r["prefill"] for r in four) == pytest.approx(
        [prefill + 3.0 * k for k in range(4)]
    )


def test_the_ttft_spread_reaches_each_first_token_seeded_by_the_turn() -> None:
    """The profile's TTFT spread is wired into the adapter and drawn from the response's own
    seed: the same turn (seed) gets the same first token on every request, other turns other
    ones, and the draws move the modelled first token both ways around the fixed part."""
    sets = {"engine.ttft_spread_ms": "2", "engine.base_ttft_ms": "3", "engine.prefill_tps": "1e9"}
    sim = _sim(overrides=sets)

    async def emit(sizes: Sequence[int]) -> None:
        return None

    async def first(seed: int, prompt: int) -> float:
        # a prompt never seen before: one uncached token, whatever the seed
        return float((await sim.inference([(prompt, 1)], 1, 2, seed, emit))["prefill"])

    draws = [asyncio.run(first(seed, seed)) for seed in range(12)]
    again = [asyncio.run(first(seed, 100 + seed)) for seed in range(12)]
    assert draws == again
    assert len(set(draws)) == 12
    assert min(draws) < 3.0 < max(draws) and min(draws) >= 1.0
