"""Fine-grained absolute-deadline sleeps (reference_server.timer) on real event loops."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import statistics
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
    # Deliberately out of order, and two sharing one deadline.
    offsets = [9_000_000, 3_000_000, 6_000_000, 3_000_000, 12_000_000, 1_000_000]

    async def main() -> tuple[list[tuple[int, int]], int]:
        woke: list[tuple[int, int]] = []
        registered: list[int] = []
        base = time.perf_counter_ns()

        async def one(i: int, off: int) -> None:
            registered.append(time.perf_counter_ns())
            await sleep_until(base + off)
            woke.append((i, time.perf_counter_ns() - base - off))

        await asyncio.gather(*(one(i, off) for i, off in enumerate(offsets)))
        return woke, max(registered) - base

    # The order is only the timer's to keep when every sleeper was waiting before the first
    # deadline; a process descheduled for a millisecond while the six start (a busy machine)
    # hands the timer deadlines already past, which may wake in any order.  Such a try is
    # repeated, not judged.
    for _ in range(20):
        woke, all_waiting_ns = _run(main(), loop)
        if all_waiting_ns < min(offsets) - COALESCE_NS:
            break
    else:
        pytest.fail("the six sleepers never all started within 1 ms in 20 tries")
    order = [i for i, _ in woke]
    assert [offsets[i] for i in order] == sorted(offsets)
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
    """The point of the module, as a ratio in one run: lateness vs asyncio.sleep on uvloop.

    The two sleeps alternate wait by wait and their medians are compared, so a machine that
    deschedules the test now and then (other processes, CI's parallel workers) delays both
    alike instead of deciding the comparison; uvloop's millisecond timers stay late by their
    rounding (~0.5 ms on these waits) whatever the load.
    """
    uvloop = pytest.importorskip("uvloop")
    waits_ns = [1_300_000 + 170_000 * i for i in range(30)]

    async def late_ns(w: int, fine: bool) -> int:
        deadline = time.perf_counter_ns() + w
        if fine:
            await sleep_until(deadline)
        else:
            await asyncio.sleep(w / 1e9)
        return abs(time.perf_counter_ns() - deadline)

    async def main() -> tuple[list[int], list[int]]:
        fine, coarse = [], []
        for w in waits_ns:
            fine.append(await late_ns(w, True))
            coarse.append(await late_ns(w, False))
        return fine, coarse

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        fine, coarse = runner.run(main())
    assert statistics.median(fine) < statistics.median(coarse), (fine, coarse)


def _fine(loop: asyncio.AbstractEventLoop) -> timer.FineTimer:
    fine = timer.fine_timer(loop)
    if fine is None:
        pytest.skip("no timerfd here: yield_to_due returns at once")
    return fine


@pytest.mark.parametrize("loop", LOOPS)
def test_new_work_goes_after_the_tokens_due_one_piece_per_wake_up(loop: str) -> None:
    """Two pieces of new work arrive before tokens due in 0.3 and 0.6 ms: the first runs
    after the first token, the second after the second (each delays the next token by its
    own cost at most); a token due 8 ms later is not waited for."""

    async def main() -> tuple[list[str], int]:
        fine = _fine(asyncio.get_running_loop())
        order: list[str] = []
        base = time.perf_counter_ns()
        first_woke = [0]

        async def token(after_ns: int, name: str) -> None:
            await sleep_until(base + after_ns)
            order.append(name)
            if name == "first":
                first_woke[0] = time.perf_counter_ns() - base

        async def work(name: str) -> None:
            await fine.yield_to_due(500_000, 4_000_000)
            order.append(name)

        tokens = [
            asyncio.ensure_future(token(after, name))
            for after, name in ((8_600_000, "far"), (300_000, "first"), (600_000, "second"))
        ]
        await asyncio.sleep(0)  # all asleep on the timer
        await asyncio.gather(work("work A"), work("work B"), *tokens)
        return order, first_woke[0]

    for _ in range(20):
        order, first_woke = _run(main(), loop)
        # Woken after the second token was due too (a descheduled process): both go in one
        # wake-up, and the order is not the one judged here.  Repeated, not judged.
        if first_woke < 550_000 - COALESCE_NS:
            break
    assert order == ["first", "work A", "second", "work B", "far"]


@pytest.mark.parametrize("loop", LOOPS)
def test_new_work_is_spread_over_dense_deadlines_and_never_starved(loop: str) -> None:
    """Deadlines every 0.2 ms for 20 ms and five pieces of new work at once: one goes
    after each wake-up's tokens, so no two run back to back; all are done within 2 ms."""

    async def main() -> tuple[list[str], int]:
        fine = _fine(asyncio.get_running_loop())
        order: list[str] = []
        base = time.perf_counter_ns()

        async def token(due: int) -> None:
            await sleep_until(due)
            order.append("token")

        async def work() -> None:
            await fine.yield_to_due(500_000, 3_000_000)
            order.append("work")

        tokens = [asyncio.ensure_future(token(base + k * 200_000)) for k in range(1, 100)]
        await asyncio.sleep(0)
        await asyncio.gather(*(work() for _ in range(5)))
        done = time.perf_counter_ns() - base
        await asyncio.gather(*tokens)
        return order, done

    for _ in range(20):
        order, done = _run(main(), loop)
        if done < 2_000_000:
            break
    assert done < 2_000_000, f"five pieces took {done / 1e6:.2f} ms in each of 20 runs"
    assert order[0] == "token"
    works = [i for i, what in enumerate(order) if what == "work"]
    assert len(works) == 5 and all(b - a >= 2 for a, b in itertools.pairwise(works)), order[:20]


@pytest.mark.parametrize("loop", LOOPS)
def test_no_new_work_waits_past_the_cap_when_it_outnumbers_the_wake_ups(loop: str) -> None:
    """Deadlines every 0.2 ms for 20 ms and 40 pieces of new work at once, capped at 2 ms:
    one piece per wake-up would hold the last ones ~8 ms; the cap lets every piece go
    within 2 ms (plus a wake-up and scheduling slack)."""
    at_most_ns = 2_000_000

    async def main() -> int:
        fine = _fine(asyncio.get_running_loop())
        base = time.perf_counter_ns()

        async def work() -> int:
            began = time.perf_counter_ns()
            await fine.yield_to_due(500_000, at_most_ns)
            return time.perf_counter_ns() - began

        tokens = [asyncio.ensure_future(sleep_until(base + k * 200_000)) for k in range(1, 100)]
        await asyncio.sleep(0)
        waits = await asyncio.gather(*(work() for _ in range(40)))
        await asyncio.gather(*tokens)
        return max(waits)

    # The longest wait reaches the cap (more pieces than wake-ups) and ends there.  A
    # descheduled process can overrun any bound, or pause past every deadline before the
    # first sleep so that nothing is due: repeated, not judged.
    band = range(at_most_ns - 500_000, at_most_ns + 1_000_000)
    for _ in range(10):
        longest = _run(main(), loop)
        if longest in band:
            break
    assert longest in band, f"the longest wait was {longest / 1e6:.2f} ms"


@pytest.mark.parametrize("loop", LOOPS)
def test_new_work_goes_behind_sleepers_released_but_not_yet_resumed(loop: str) -> None:
    """The wake-up already released a due sleeper whose task has not run: new work that the
    loop happens to run first (its bytes came in the same poll) still goes behind it."""

    async def main() -> list[str]:
        fine = _fine(asyncio.get_running_loop())
        order: list[str] = []

        async def token() -> None:
            await sleep_until(time.perf_counter_ns() + 200_000)
            order.append("token")

        sleeper = asyncio.ensure_future(token())
        await asyncio.sleep(0)
        while time.perf_counter_ns() < fine._heap[0][0]:
            pass  # past its deadline, with this task still running
        fine._fire()  # what the timerfd's callback does: the sleeper is released, not resumed
        await fine.yield_to_due(1_000_000)
        order.append("new work")
        await sleeper
        return order

    assert _run(main(), loop) == ["token", "new work"]


def test_without_a_timer_yield_to_due_does_not_suspend() -> None:
    """No sleeper ever used the loop's timer: nothing can be due, new work goes on at once."""

    async def main() -> bool:
        step = asyncio.ensure_future(asyncio.sleep(0))
        await timer.yield_to_due()
        return step.done()

    assert asyncio.run(main()) is False
