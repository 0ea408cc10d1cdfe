"""Fine-grained absolute-deadline sleeps (reference_server.timer) on real event loops."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from reference_server import timer
from reference_server.timer import COALESCE_NS, sleep_until

T = TypeVar("T")
LOOPS = ["asyncio", "uvloop"]


def _run(coro: Coroutine[Any, Any, T], loop: str) -> T:
    if loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(coro)
    return asyncio.run(coro)


@pytest.mark.parametrize("loop", LOOPS)
def test_sleepers_wake_in_deadline_order_and_never_early(loop: str) -> None:
    async def main() -> list[tuple[int, int]]:
        woke: list[tuple[int, int]] = []
        base = time.perf_counter_ns()
        # Deliberately out of order, and two sharing one deadline.
        offsets = [9_000_000, 3_000_000, 6_000_000, 3_000_000, 12_000_000, 1_000_000]

        async def one(i: int, off: int) -> None:
            await sleep_until(base + off)
            woke.append((i, time.perf_counter_ns() - base - off))

        await asyncio.gather(*(one(i, off) for i, off in enumerate(offsets)))
        order = [i for i, _ in woke]
        assert [offsets[i] for i in order] == sorted(offsets)
        return woke

    woke = _run(main(), loop)
    # How early a wake-up may be: the fine timer's coalescing, else the coarse fallback's.
    coarse = 500_000 if loop == "uvloop" else 1_000
    early = COALESCE_NS if timer._LIBC is not None else coarse
    assert all(late >= -early for _, late in woke), woke


@pytest.mark.parametrize("loop", LOOPS)
def test_a_cancelled_sleeper_does_not_disturb_the_others(loop: str) -> None:
    async def main() -> int:
        base = time.perf_counter_ns()
        doomed = asyncio.ensure_future(sleep_until(base + 2_000_000))
        survivor = asyncio.ensure_future(sleep_until(base + 4_000_000))
        await asyncio.sleep(0)
        doomed.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await doomed
        await survivor
        return time.perf_counter_ns() - base

    assert _run(main(), loop) >= 4_000_000 - COALESCE_NS


@pytest.mark.parametrize("loop", LOOPS)
def test_a_past_deadline_returns_at_once(loop: str) -> None:
    async def main() -> None:
        await sleep_until(time.perf_counter_ns() - 1_000_000)

    _run(main(), loop)


@pytest.mark.skipif(timer._LIBC is None, reason="timerfd is Linux-only")
def test_uvloop_fine_timer_beats_its_millisecond_timers_on_the_same_waits() -> None:
    """The point of the module, as a ratio in one run: mean lateness vs asyncio.sleep on uvloop."""
    uvloop = pytest.importorskip("uvloop")
    waits_ns = [1_300_000 + 170_000 * i for i in range(30)]

    async def lateness(fine: bool) -> float:
        total = 0
        for w in waits_ns:
            deadline = time.perf_counter_ns() + w
            if fine:
                await sleep_until(deadline)
            else:
                await asyncio.sleep(w / 1e9)
            total += abs(time.perf_counter_ns() - deadline)
        return total / len(waits_ns)

    async def main() -> tuple[float, float]:
        return await lateness(True), await lateness(False)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        fine, coarse = runner.run(main())
    assert fine < coarse, (fine, coarse)
