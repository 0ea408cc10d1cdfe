"""Sleeps that end within tens of microseconds of an absolute ``perf_counter_ns`` deadline.

Why not ``asyncio.sleep``: uvloop rounds every delay to a whole millisecond and
measures it from a loop time cached at the start of the iteration, so a
modelled wait ends anywhere from about half a millisecond early to a
millisecond late.  Two such waits before the first token (API tier, prefill)
put a millisecond or two of pure timer error into every TTFT the harness
compares with the model.

How: one Linux ``timerfd`` per event loop, armed (``TFD_TIMER_ABSTIME``) at the
earliest pending deadline on ``CLOCK_MONOTONIC`` — the clock behind
``time.perf_counter_ns`` — and watched with ``loop.add_reader``.  A readable fd
wakes ``epoll`` at once, whatever the poll timeout's millisecond granularity.
When it fires, every waiter due within :data:`COALESCE_NS` is released in the
same callback, so streams whose deadlines nearly coincide share one wake-up.
The fd is armed that much *before* the earliest deadline: a wake-up costs
about as long (epoll, the callback, the task switch), so the waiter resumes
close to its deadline instead of consistently after it.

Where ``timerfd`` is unavailable (not Linux, or ``perf_counter`` is another
clock) :func:`sleep_until` falls back to ``asyncio.sleep`` loops.

Due deadlines before new work (:func:`yield_to_due`): every sleeper here is a modelled
instant — a token's write, a first token, the end of an API-tier wait.  Work that no
deadline is waiting for (a WebSocket upgrade, a new ``response.create``'s parsing and
validation, a finished response's tail) would otherwise run whenever it comes, and a
closed loop of streams in step brings it in bursts exactly when the others' last tokens
are due (docs/server.md).  While a sleeper is due within :data:`DUE_WINDOW_NS`, such work
waits for the next wake-up and resumes after the sleepers it released, one piece per
wake-up, so a token is delayed by at most one piece's cost, never by a burst of them; all
of it goes once no deadline is that close, and none waits longer than :data:`MAX_DEFER_NS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import heapq
import itertools
import os
import sys
import time
import weakref
from collections import deque

#: a waiter due this close to a wake-up is released with it (never later than due + jitter)
COALESCE_NS = 50_000
#: new work goes one piece per wake-up while a deadline is due this soon (a piece of it, an
#: upgrade or a create's validation, costs ~0.1-0.3 ms of CPU)...
DUE_WINDOW_NS = 500_000
#: ... and waits no longer than this (two of the default 2 ms delta intervals): never starved
MAX_DEFER_NS = 4_000_000
#: fallback: uvloop timers round to whole milliseconds; within half a tick counts as due
_COARSE_TOLERANCE_NS = 500_000

_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class _Itimerspec(ctypes.Structure):
    _fields_ = (("it_interval", _Timespec), ("it_value", _Timespec))


def _load_libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    if time.get_clock_info("perf_counter").implementation != "clock_gettime(CLOCK_MONOTONIC)":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.timerfd_create.argtypes = (ctypes.c_int, ctypes.c_int)
        libc.timerfd_settime.argtypes = (
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_Itimerspec),
            ctypes.c_void_p,
        )
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _load_libc()


class FineTimer:
    """Absolute-deadline sleeps for one event loop, on one timerfd."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        if _LIBC is None:
            raise OSError("timerfd is not available on this platform")
        fd = _LIBC.timerfd_create(_CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self.loop = loop
        self._fd = fd
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        # yield_to_due's waiters, oldest first: (when it began waiting, its future)
        self._yielders: deque[tuple[int, asyncio.Future[None]]] = deque()
        # _ran callbacks scheduled and not run yet: sleepers or new work released before
        # them have not all resumed
        self._pending = 0
        self._armed_ns = 0  # deadline the fd is armed at; 0 = disarmed
        self._within_ns, self._at_most_ns = DUE_WINDOW_NS, MAX_DEFER_NS
        self._order = itertools.count()
        self._spec = _Itimerspec()
        loop.add_reader(fd, self._fire)
        # The fd lives as long as its loop: servers have one loop, tests have many.
        weakref.finalize(loop, os.close, fd)

    async def sleep_until(self, deadline_ns: int) -> None:
        if deadline_ns - time.perf_counter_ns() <= COALESCE_NS:
            return
        fut: asyncio.Future[None] = self.loop.create_future()
        heapq.heappush(self._heap, (deadline_ns, next(self._order), fut))
        if not self._armed_ns or deadline_ns < self._armed_ns:
            self._arm(deadline_ns)
        await fut

    async def yield_to_due(
        self, within_ns: int = DUE_WINDOW_NS, at_most_ns: int = MAX_DEFER_NS
    ) -> None:
        """Return at once if no sleeper is due within ``within_ns`` and no other new work
        waits; else after the next wake-up's sleepers have resumed, one waiter per wake-up
        (:meth:`_ran`), or sooner once no sleeper is due within ``within_ns``, or once it has
        waited ``at_most_ns``."""
        heap = self._heap
        now = time.perf_counter_ns()
        if not (self._pending or self._yielders or (heap and heap[0][0] <= now + within_ns)):
            return
        fut: asyncio.Future[None] = self.loop.create_future()
        self._yielders.append((now, fut))
        self._within_ns, self._at_most_ns = within_ns, at_most_ns
        if not self._pending:
            self._wake_yielders_soon()
        await fut

    def _wake_yielders_soon(self) -> None:
        heap = self._heap
        if heap and heap[0][0] <= time.perf_counter_ns() + self._within_ns:
            if not self._armed_ns or heap[0][0] < self._armed_ns:
                self._arm(heap[0][0])
        else:
            self._pending += 1
            self.loop.call_soon(self._ran, False)

    def _arm(self, deadline_ns: int) -> None:
        value = self._spec.it_value
        # Early by the release window: the fire then always finds this deadline due.
        value.tv_sec, value.tv_nsec = divmod(deadline_ns - COALESCE_NS, 1_000_000_000)
        # A deadline already past fires at once, which is what a late arm needs.
        if _LIBC is not None and _LIBC.timerfd_settime(
            self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None
        ):
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")
        self._armed_ns = deadline_ns

    def _fire(self) -> None:
        # Re-armed after it expired but before this callback ran: nothing to consume.
        with contextlib.suppress(BlockingIOError):
            os.read(self._fd, 8)
        self._armed_ns = 0
        due = time.perf_counter_ns() + COALESCE_NS
        heap = self._heap
        released = False
        while heap and heap[0][0] <= due:
            fut = heapq.heappop(heap)[2]
            if not fut.done():  # a cancelled sleeper leaves its entry behind
                fut.set_result(None)
                released = True
        if heap:
            self._arm(heap[0][0])
        if released or self._yielders:
            self._pending += 1
            # Runs after the tasks just released have taken their step (call_soon is FIFO).
            self.loop.call_soon(self._ran, True)

    def _ran(self, woke: bool) -> None:
        """The sleepers released before this have resumed: now one piece of new work, if
        no deadline is due within the window or this follows a wake-up (so dense deadlines
        spread it out, one piece each, instead of starving it), and every piece that has
        waited too long.  The next piece is considered after this one has run."""
        self._pending -= 1
        waiting = self._yielders
        now = time.perf_counter_ns()
        heap = self._heap
        room = not heap or heap[0][0] > now + self._within_ns
        released = False
        while waiting and (
            ((room or woke) and not released) or waiting[0][0] + self._at_most_ns <= now
        ):
            fut = waiting.popleft()[1]
            if not fut.done():
                fut.set_result(None)
                released = True
        if waiting:
            if released:
                self._pending += 1
                self.loop.call_soon(self._ran, False)  # after that piece has run
            else:
                self._wake_yielders_soon()


_TIMERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, FineTimer] = (
    weakref.WeakKeyDictionary()
)


def fine_timer(loop: asyncio.AbstractEventLoop) -> FineTimer | None:
    """The loop's :class:`FineTimer`, created on first use; ``None`` without timerfd."""
    if _LIBC is None:
        return None
    timer = _TIMERS.get(loop)
    if timer is None:
        timer = _TIMERS[loop] = FineTimer(loop)
    return timer


def tolerance_ns(loop: asyncio.AbstractEventLoop) -> int:
    """How early a deadline may be treated as reached on ``loop``."""
    if _LIBC is not None:
        return COALESCE_NS
    if type(loop).__module__.startswith("uvloop"):
        return _COARSE_TOLERANCE_NS
    return 1_000


async def yield_to_due() -> None:
    """Let the running loop's sleepers that are due run before the caller's new work
    (:meth:`FineTimer.yield_to_due`); without timerfd, return at once."""
    if _LIBC is None:
        return
    timer = _TIMERS.get(asyncio.get_running_loop())
    if timer is not None:  # no timer yet: nobody sleeps on it
        await timer.yield_to_due()


async def sleep_until(deadline_ns: int) -> None:
    """Return at ``deadline_ns`` (``perf_counter_ns``), give or take :func:`tolerance_ns`."""
    loop = asyncio.get_running_loop()
    timer = fine_timer(loop)
    if timer is not None:
        await timer.sleep_until(deadline_ns)
        return
    tolerance = tolerance_ns(loop)
    # A millisecond timer can fire early against the fine clock: sleep again for the rest.
    while (delay := deadline_ns - time.perf_counter_ns()) > tolerance:
        await asyncio.sleep(delay / 1e9)
