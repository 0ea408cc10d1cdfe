"""The asyncio adapter between the server app and the pure cost/timing models.

Everything here *waits* modelled time while holding modelled resources (an API
worker slot, an engine stream slot); nothing burns CPU to imitate work.  Times
come from ``loop.time()`` so the waits and the deadlines share one clock.

Default delta interval: 2 ms.  At 1,000 TPS that is 2 tokens per delta, 500
events/s per stream (one token per delta would be 1,000/s per stream and, at a
few dozen concurrent streams, more SSE/WS frames than a 2-core box serves
without the event loop falling behind); at 4,000 TPS bursts it is 8 tokens per
delta.  Because each batch carries the due time of its last token, batching
never makes a token early, and a 100 ms burst window can gain at most one batch
(8 tokens, 2 %) and never lose any: a 2 ms granularity is 50x finer than the
window, so the burst peak is measured, not smeared.  ``min_delta_interval_ms=0``
restores one token per delta.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from reference_server.api_tier import RequestCost, api_post_ms, api_pre_ms
from reference_server.engine import (
    NS_PER_MS,
    NS_PER_S,
    EngineCapacity,
    Pacer,
    PrefixCache,
    Ticket,
    decode_plan,
    first_token_ns,
)
from reference_server.profiles import ApiProfile, EngineProfile

DEFAULT_MIN_DELTA_INTERVAL_MS = 2.0


class Simulator:
    """Modelled API tier and engine for one server process."""

    def __init__(
        self,
        api: ApiProfile,
        engine: EngineProfile,
        seed: int = 0,
        min_delta_interval_ms: float | None = None,
    ) -> None:
        if min_delta_interval_ms is None:
            min_delta_interval_ms = DEFAULT_MIN_DELTA_INTERVAL_MS
        if min_delta_interval_ms < 0:
            raise ValueError(
                f"min_delta_interval_ms: expected a number >= 0, got {min_delta_interval_ms}"
            )
        self.api = api
        self.engine = engine
        self.seed = seed
        self.min_delta_interval_ms = float(min_delta_interval_ms)
        self._min_interval_ns = round(self.min_delta_interval_ms * NS_PER_MS)
        self.prefix_cache = PrefixCache(engine.prefix_cache_entries)
        self.capacity = EngineCapacity(engine.max_streams, engine.aggregate_tps)
        self._waiters: dict[int, asyncio.Future[None]] = {}
        self._workers: asyncio.Semaphore | None = None

    # -- API tier ----------------------------------------------------------------------------

    def _semaphore(self) -> asyncio.Semaphore:
        # Created on first use so the Simulator can be built outside the event loop.
        if self._workers is None:
            self._workers = asyncio.Semaphore(self.api.workers)
        return self._workers

    async def pre_inference(self, cost: RequestCost) -> dict[str, float]:
        """Wait the modelled pre-inference work while holding one API worker."""
        loop = asyncio.get_running_loop()
        pre = api_pre_ms(self.api, cost).total_ms
        t_req = loop.time()
        async with self._semaphore():
            t_start = loop.time()
            if pre > 0:
                await asyncio.sleep(pre / 1000.0)
        return {"api_pre": pre, "api_queue": (t_start - t_req) * 1000.0}

    async def post_inference(self, cost: RequestCost) -> float:
        """Wait the modelled post-inference bookkeeping; returns its milliseconds.

        Bookkeeping runs in an asynchronous pipeline, not on the request
        workers, so it holds no API worker slot.
        """
        post = api_post_ms(self.api, cost)
        if post > 0:
            await asyncio.sleep(post / 1000.0)
        return post

    # -- engine ------------------------------------------------------------------------------

    async def inference(
        self,
        prefix_hashes: Sequence[tuple[int, int]],
        input_tokens: int,
        output_tokens: int,
        rng_seed: int,
        emit: Callable[[int], Awaitable[None]],
    ) -> dict[str, float | int]:
        """Queue for a stream slot, prefill the uncached input, then pace the output.

        ``emit(k)`` is awaited once per delta with ``k >= 1`` tokens.  Returns
        modelled milliseconds ``engine_queue`` (slot wait), ``prefill`` (prefill
        of uncached tokens + base TTFT), ``decode`` (first to last token
        deadline) and ``ttft`` (``engine_queue + prefill``), and ``cached_tokens``.
        """
        loop = asyncio.get_running_loop()
        now = _now_ns(loop)
        ticket = self.capacity.request(now, self.engine.sustained_tps)
        try:
            if not ticket.admitted:
                fut: asyncio.Future[None] = loop.create_future()
                self._waiters[ticket.id] = fut
                try:
                    await fut
                finally:
                    self._waiters.pop(ticket.id, None)
            t_admit = ticket.admitted_ns if ticket.admitted_ns is not None else _now_ns(loop)
            cached = min(self.prefix_cache.lookup(prefix_hashes), max(0, input_tokens))
            first_ns = first_token_ns(input_tokens - cached, self.engine)
            t0 = t_admit + first_ns
            await _sleep_until(loop, t0)
            self.prefix_cache.insert(prefix_hashes)

            plan = decode_plan(output_tokens, random.Random(_mix(self.seed, rng_seed)), self.engine)
            pacer = Pacer(plan.batches(self._min_interval_ns), t0, _tolerance_ns(loop))
            while not pacer.done:
                now = _now_ns(loop)
                pacer.set_scale(now, self.capacity.rate_scale(now))
                k = pacer.take_due(now)
                if k:
                    await emit(k)
                    continue
                deadline = pacer.next_deadline_ns()
                if deadline is not None:
                    await _sleep_until(loop, deadline)
            decode_ns = pacer.last_deadline_ns - t0
        finally:
            self._release(ticket, loop)
        return {
            "engine_queue": ticket.queue_ns / NS_PER_MS,
            "prefill": first_ns / NS_PER_MS,
            "decode": decode_ns / NS_PER_MS,
            "ttft": (ticket.queue_ns + first_ns) / NS_PER_MS,
            "cached_tokens": cached,
        }

    def _release(self, ticket: Ticket, loop: asyncio.AbstractEventLoop) -> None:
        for woken in self.capacity.release(ticket, _now_ns(loop)):
            fut = self._waiters.get(woken.id)
            if fut is not None and not fut.done():
                fut.set_result(None)

    def describe(self) -> dict[str, Any]:
        """Profiles and settings, for the run manifest and ``/health``."""
        return {
            "api": self.api.model_dump(),
            "engine": self.engine.model_dump(),
            "seed": self.seed,
            "min_delta_interval_ms": self.min_delta_interval_ms,
        }


def _now_ns(loop: asyncio.AbstractEventLoop) -> int:
    return round(loop.time() * NS_PER_S)


def _tolerance_ns(loop: asyncio.AbstractEventLoop) -> int:
    # uvloop's clock and timers tick in whole milliseconds: a timer can fire up to
    # half a tick before a fractional deadline, and waiting out the remainder would
    # spin on zero-delay timers.  Half a tick of earliness is below what the clock
    # can resolve.  asyncio's own loop fires timers within its 1 ns clock resolution.
    if type(loop).__module__.startswith("uvloop"):
        return 500_000
    return 1_000


async def _sleep_until(loop: asyncio.AbstractEventLoop, deadline_ns: int) -> None:
    delay = deadline_ns - _now_ns(loop)
    if delay > 0:
        await asyncio.sleep(delay / NS_PER_S)


def _mix(seed: int, rng_seed: int) -> int:
    # Server seed and per-response seed both matter; equal pairs give equal plans.
    return (seed & 0xFFFF_FFFF_FFFF_FFFF) << 64 | (rng_seed & 0xFFFF_FFFF_FFFF_FFFF)
