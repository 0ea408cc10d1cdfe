"""One modelled timeline per request: arrival anchoring, the API-to-engine hand-over,
and one token per delta when ``min_delta_interval_ms`` is 0."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from reference_server import sim as sim_module
from reference_server.core.api_tier import RequestCost
from reference_server.core.profiles import load_profiles
from reference_server.sim import Simulator, mark_arrival

# An HTTP request on an open connection, 100 tokens to process, nothing rehydrated.
COST = RequestCost(False, False, False, 100)


def _sim(overrides: dict[str, str] | None = None, interval: float | None = None) -> Simulator:
    api, engine = load_profiles(
        "optimized", "cerebras-spark", {"engine.burst_probability": "0", **(overrides or {})}
    )
    return Simulator(api, engine, seed=1, min_delta_interval_ms=interval)


def test_api_tier_time_runs_from_arrival_and_hands_its_end_to_the_engine() -> None:
    sim = _sim()

    async def main() -> tuple[int, int, dict[str, float], int | None]:
        before = time.perf_counter_ns()
        mark_arrival()
        after = time.perf_counter_ns()
        time.sleep(0.003)  # the app parsing the request: inside the modelled time
        timing, _ = await sim.pre_inference(COST)
        return before, after, timing, sim_module._API_DONE_NS.get()

    before, after, timing, done = asyncio.run(main())
    pre_ns = round(timing["api_pre"] * 1e6)
    assert timing["api_queue"] == 0.0
    assert done is not None and before + pre_ns <= done <= after + pre_ns


def test_without_arrival_the_clock_starts_at_the_call_and_the_handover_is_used_once() -> None:
    sim = _sim({"engine.base_ttft_ms": "0", "engine.prefill_tps": "1000000000"})

    async def main() -> tuple[int | None, int | None]:
        t0 = time.perf_counter_ns()
        await sim.pre_inference(COST)
        handed = sim_module._API_DONE_NS.get()
        assert handed is not None and handed >= t0

        async def emit(sizes: Sequence[int]) -> None:
            return None

        await sim.inference([(1, 10)], 10, 3, 5, emit)
        return handed, sim_module._API_DONE_NS.get()

    handed, after = asyncio.run(main())
    assert handed is not None and after is None  # consumed by the engine


def test_interval_zero_emits_one_token_per_delta_even_when_all_are_due() -> None:
    sim = _sim({"engine.sustained_tps": "100000000", "engine.burst_tps": "100000000"}, interval=0.0)
    counts: list[int] = []

    calls: list[int] = []

    async def emit(sizes: Sequence[int]) -> None:
        calls.append(len(sizes))
        counts.extend(sizes)

    asyncio.run(sim.inference([(1, 10)], 10, 1200, 3, emit))
    assert counts == [1] * 1200
    # Deltas due together are handed over together (one write), in bounded batches.
    assert len(calls) < 1200 and max(calls) <= sim_module.MAX_DELTAS_PER_EMIT
    assert max(calls) > 1
