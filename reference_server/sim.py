"""The asyncio adapter between the server app and the pure cost/timing models.

Everything here *waits* modelled time while holding modelled resources (an API
worker slot, an engine stream slot); nothing burns CPU to imitate work.

Clock: ``time.perf_counter_ns``, read fresh at every decision, never ``loop.time()``; decode
is anchored at the first token's *actual* emission.  Why, and why deltas are batched 2 ms
apart by default: docs/model.md §2, "Pacing" and "Delta batching".

Waits end on :mod:`reference_server.timer` (a timerfd on Linux: tens of
microseconds, not uvloop's millisecond ticks).  The API-tier wait and the
engine wait are one timeline: the engine is asked for a slot at the *modelled*
end of the API-tier work, not at whenever that wake-up happened to run, so the
lateness of the first wake-up is absorbed by the prefill wait instead of adding
to TTFT.  The hand-over travels in a context variable because both waits run in
the request's task (or a task created from it), with the app's own work between.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from reference_server.core.api_tier import RequestCost, api_post_ms, api_pre_ms
from reference_server.core.conversation import item_text
from reference_server.core.engine import (
    NS_PER_MS,
    EngineCapacity,
    Pacer,
    PrefixCache,
    Ticket,
    decode_plan,
    first_token_ns,
)
from reference_server.core.profiles import ApiProfile, EngineProfile
from reference_server.timer import sleep_until, tolerance_ns

DEFAULT_MIN_DELTA_INTERVAL_MS = 2.0
#: the parts of a response's modelled time that ``Simulator.modelled_ms`` adds up (``/metrics``)
MODELLED_COMPONENTS = ("api_pre", "api_queue", "engine_queue", "prefill", "decode", "api_post")
# One token per delta with many due at once (an engine far faster than the socket): at most
# this many events per write, so a 20,000-token answer is not one multi-megabyte batch.
MAX_DELTAS_PER_EMIT = 512

# perf_counter_ns at which this request's modelled API-tier work ended; read (once) by
# the engine as the instant the request reached it.
_API_DONE_NS: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "loopbench_api_done_ns", default=None
)
# perf_counter_ns at which the request reached the server (see mark_arrival).
_ARRIVED_NS: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "loopbench_arrived_ns", default=None
)


def mark_arrival(arrived_ns: int | None = None) -> None:
    """Start this request's API-tier clock at ``arrived_ns`` (default: now).

    The modelled API-tier work (validation, tokenization, ...) stands for the
    real reading and parsing the server does, so that work runs inside the
    modelled time instead of before it: TTFT then differs from the model only
    by what the model cannot see (network, the client).  ``arrived_ns`` is when
    the request's bytes reached the server (reference_server/protocols.py); a
    stamp from the future (another clock) is ignored.
    """
    now = _now_ns()
    _ARRIVED_NS.set(arrived_ns if arrived_ns is not None and 0 < arrived_ns <= now else now)


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
        self.capacity = EngineCapacity(
            engine.max_streams,
            engine.aggregate_tps,
            slowdown_per_stream=engine.decode_slowdown_per_stream,
        )
        self._waiters: dict[int, asyncio.Future[None]] = {}
        self._workers: asyncio.Semaphore | None = None
        # Running sums for /metrics (reference_server/metrics.py): a few additions per response.
        self.modelled_ms = dict.fromkeys(MODELLED_COMPONENTS, 0.0)
        self.tokens = {"input": 0, "cached_input": 0, "output": 0}
        self.api_in_tier = 0  # requests holding or waiting for an API worker

    # -- API tier ----------------------------------------------------------------------------

    def _semaphore(self) -> asyncio.Semaphore:
        # Created on first use so the Simulator can be built outside the event loop.
        if self._workers is None:
            self._workers = asyncio.Semaphore(self.api.workers)
        return self._workers

    async def pre_inference(self, cost: RequestCost) -> tuple[dict[str, float], int]:
        """Wait the modelled pre-inference work while holding one API worker; returns its
        ``api_pre`` and ``api_queue`` (ms) and the ``perf_counter_ns`` its clock started at.

        The modelled first token is due at that arrival + ``sim_timing.ttft``: the instant
        a response's ``first_token_late_ms`` is measured from.
        """
        pre = api_pre_ms(self.api, cost).total_ms
        now = _now_ns()
        arrived = _ARRIVED_NS.get()
        _ARRIVED_NS.set(None)
        t_req = arrived if arrived is not None and arrived <= now else now
        workers = self._semaphore()
        # A free worker took the request when it arrived; a busy pool made it queue.
        immediate = not workers.locked()
        self.api_in_tier += 1
        try:
            async with workers:
                t_start = t_req if immediate else _now_ns()
                done = t_start + round(pre * NS_PER_MS)
                if pre > 0:
                    await sleep_until(done)
        finally:
            self.api_in_tier -= 1
        _API_DONE_NS.set(done)
        queue = (t_start - t_req) / NS_PER_MS
        totals = self.modelled_ms
        totals["api_pre"] += pre
        totals["api_queue"] += queue
        return {"api_pre": pre, "api_queue": queue}, t_req

    async def post_inference(self, cost: RequestCost) -> float:
        """Wait the modelled post-inference bookkeeping; returns its milliseconds.

        Bookkeeping runs in an asynchronous pipeline, not on the request
        workers, so it holds no API worker slot.
        """
        post = api_post_ms(self.api, cost)
        self.modelled_ms["api_post"] += post
        if post > 0:
            await sleep_until(_now_ns() + round(post * NS_PER_MS))
        return post

    # -- engine ------------------------------------------------------------------------------

    async def inference(
        self,
        prefix_hashes: Sequence[tuple[int, int]],
        input_tokens: int,
        output_tokens: int,
        rng_seed: int,
        emit: Callable[[Sequence[int]], Awaitable[None]],
        *,
        static_prefix: tuple[int, int] | None = None,
        reasoning_tokens: int = 0,
        insert_hashes: Sequence[tuple[int, int]] | None = None,
    ) -> dict[str, float | int]:
        """Queue for a stream slot, prefill the uncached input, then pace the output.

        ``static_prefix`` is ``(key, tokens)`` of what the prompt renders before
        the items (tool schemas): it is part of every cached prefix, so a
        conversation with unchanged tools re-prefills only its new items.
        ``emit(sizes)`` is awaited with the token counts (each >= 1) of the deltas
        that are due together, one event each, so they can go out in one write.  Returns
        modelled milliseconds ``engine_queue`` (slot wait), ``prefill`` (prefill
        of uncached tokens + base TTFT), ``decode`` (first to last token
        deadline), ``ttft`` (``engine_queue + prefill``) and ``reasoning`` (first
        token to the first visible one, when the first ``reasoning_tokens`` of the
        output are hidden reasoning; to the last token when nothing visible follows),
        and ``cached_tokens``.
        """
        loop = asyncio.get_running_loop()
        now = _now_ns()
        # Consumed once: a later segment of the same task (append mode) starts from now.
        api_done = _API_DONE_NS.get()
        _API_DONE_NS.set(None)
        if api_done is not None and api_done <= now:
            now = api_done
        ticket = self.capacity.request(now, self.engine.sustained_tps)
        try:
            if not ticket.admitted:
                fut: asyncio.Future[None] = loop.create_future()
                self._waiters[ticket.id] = fut
                try:
                    await fut
                finally:
                    self._waiters.pop(ticket.id, None)
            t_admit = ticket.admitted_ns if ticket.admitted_ns is not None else _now_ns()
            hashes = with_static_prefix(prefix_hashes, static_prefix)
            cached = min(self.prefix_cache.lookup(hashes), max(0, input_tokens))
            # Planned while the prefill is waited, not after it: for a long output the
            # plan costs milliseconds that would otherwise delay the first token.  The TTFT
            # spread draws after the plan's three numbers, so plans are unchanged by it.
            rng = random.Random(_mix(self.seed, rng_seed))
            plan = decode_plan(output_tokens, rng, self.engine)
            others = self.capacity.active - 1
            first_ns = first_token_ns(input_tokens - cached, self.engine, others, rng)
            t0 = t_admit + first_ns
            tolerance = tolerance_ns(loop)
            batches = plan.iter_batches(self._min_interval_ns)
            # The first visible token is token `reasoning_tokens` of the plan (none past the end).
            visible_at = min(reasoning_tokens, output_tokens - 1)
            reasoning_ns: int | None = None if reasoning_tokens > 0 else 0
            await sleep_until(t0)
            self.prefix_cache.insert(hashes if insert_hashes is None else insert_hashes)

            t_first = max(t0, _now_ns())
            pacer = Pacer(batches, t_first, tolerance)
            one_per_event = self._min_interval_ns == 0
            while not pacer.done:
                now = _now_ns()
                pacer.set_scale(now, self.capacity.rate_scale(now))
                k = pacer.take_due(now)
                if k and reasoning_ns is None and pacer.emitted_tokens > visible_at:
                    reasoning_ns = pacer.deadline_ns(plan.offset_ns(visible_at)) - t_first
                if k:
                    if one_per_event:
                        # min_delta_interval_ms 0 promises one token per delta, late or not.
                        for start in range(0, k, MAX_DELTAS_PER_EMIT):
                            await emit([1] * min(MAX_DELTAS_PER_EMIT, k - start))
                    else:
                        await emit((k,))
                    continue
                deadline = pacer.next_deadline_ns()
                if deadline is not None:
                    await sleep_until(deadline)
            decode_ns = pacer.last_deadline_ns - t_first
        finally:
            self._release(ticket)
        modelled = {"engine_queue": ticket.queue_ns, "prefill": first_ns, "decode": decode_ns}
        for key, ns in modelled.items():
            self.modelled_ms[key] += ns / NS_PER_MS
        tokens = self.tokens
        tokens["input"] += input_tokens
        tokens["cached_input"] += cached
        tokens["output"] += output_tokens
        return {
            **{key: ns / NS_PER_MS for key, ns in modelled.items()},
            "ttft": (ticket.queue_ns + first_ns) / NS_PER_MS,
            "reasoning": (reasoning_ns or 0) / NS_PER_MS,
            "cached_tokens": cached,
        }

    def remember_prefix(
        self, prefix_hashes: Sequence[tuple[int, int]], static_prefix: tuple[int, int] | None
    ) -> None:
        """Record prefixes the engine computed while decoding (the reasoning it produced)."""
        self.prefix_cache.insert(with_static_prefix(prefix_hashes, static_prefix))

    def _release(self, ticket: Ticket) -> None:
        for woken in self.capacity.release(ticket, _now_ns()):
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


def with_static_prefix(
    prefix_hashes: Sequence[tuple[int, int]], static_prefix: tuple[int, int] | None
) -> list[tuple[int, int]]:
    """Prefix hashes of ``static + items``: the static part first, then every item prefix on it."""
    if static_prefix is None or static_prefix[1] <= 0:
        return list(prefix_hashes)
    key, tokens = static_prefix
    return [(hash((key, 0)), tokens)] + [(hash((key, h)), t + tokens) for h, t in prefix_hashes]


def decode_seed(items: Sequence[Mapping[str, Any]]) -> int:
    """A decode-plan seed from the conversation's content, not from the request counter.

    The last input item (the user prompt, then each turn's tool output) and the
    item count identify a turn of a rollout whatever transport carried it, so
    every transport replays the same bursts and a paired comparison does not
    pay for burst luck.  Call ids, which differ per response, are left out.
    """
    last = items[-1] if items else {}
    key = f"{len(items)}|{last.get('type', 'message')}|{item_text(dict(last))}"
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") >> 1


def _now_ns() -> int:
    return time.perf_counter_ns()


def _mix(seed: int, rng_seed: int) -> int:
    # Server seed and per-response seed both matter; equal pairs give equal plans.
    return (seed & 0xFFFF_FFFF_FFFF_FFFF) << 64 | (rng_seed & 0xFFFF_FFFF_FFFF_FFFF)
