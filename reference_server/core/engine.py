"""The simulated inference engine: prefill, decode timing, prefix cache, capacity (pure).

Nothing here reads a clock, sleeps or draws from global randomness: times are
integer nanoseconds passed in, random generators are injected, and the asyncio
adapter (:mod:`reference_server.sim`) turns the plans into waits.

Decode model: docs/model.md §2 (one burst run per response with probability
``burst_probability``; offsets from gap counts, so the long-run rate has no drift).
"""

from __future__ import annotations

import contextlib
import random
import sys
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from reference_server.core.profiles import EngineProfile

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000


# -- prefill ---------------------------------------------------------------------------------


def prefill_ns(uncached_tokens: int, profile: EngineProfile) -> int:
    """Time to prefill the tokens the prefix cache did not have."""
    return round(max(0, uncached_tokens) * NS_PER_S / profile.prefill_tps)


def base_ttft_ns(profile: EngineProfile) -> int:
    """Fixed engine latency to the first token (scheduling, first decode step)."""
    return round(profile.base_ttft_ms * NS_PER_MS)


def first_token_ns(
    uncached_tokens: int,
    profile: EngineProfile,
    others: int = 0,
    rng: random.Random | None = None,
) -> int:
    """Engine time from admission to the first output token: prefill + base TTFT, plus
    ``ttft_per_active_ms`` for each of the ``others`` streams active at admission and
    ``busy_admit_ms`` once, or ``idle_wake_ms`` when there is none (the engine wakes up for
    it); plus, with ``rng``, the profile's TTFT spread (:func:`ttft_spread_ns`)."""
    interference = round(max(0, others) * profile.ttft_per_active_ms * NS_PER_MS)
    step = profile.idle_wake_ms if others <= 0 else profile.busy_admit_ms
    wake = round(step * NS_PER_MS)
    fixed = prefill_ns(uncached_tokens, profile) + base_ttft_ns(profile) + interference + wake
    spread = ttft_spread_ns(profile, others, rng) if rng is not None else 0
    return max(0, fixed + spread)


def ttft_spread_ns(profile: EngineProfile, others: int, rng: random.Random) -> int:
    """One request's draw of the TTFT spread: ``scale × (Exp(1) − 1)``, scale
    ``ttft_spread_ms + others × ttft_spread_per_active_ms``.  Mean 0, so every expected
    figure (``tools.model_predict``) stays the fixed part's; as early as ``−scale``, a tail
    as late as the draw (docs/model.md §2, "TTFT spread").  No draw at scale 0: a profile
    without a spread consumes nothing of ``rng``."""
    scale_ms = profile.ttft_spread_ms + max(0, others) * profile.ttft_spread_per_active_ms
    if scale_ms <= 0:
        return 0
    return round(scale_ms * (rng.expovariate(1.0) - 1.0) * NS_PER_MS)


class PrefixCache:
    """Which conversation prefixes have their KV cached; LRU-bounded, shared by all transports.

    A prefix is identified by the rolling hash of input items ``0..i``; the
    element stored with it is the cumulative token count through item ``i``.
    Because every transport sends (or re-hydrates) the same items, the same
    prefixes hit whichever transport carried the previous turn: transport
    differences stay API-tier differences.  ``max_entries`` counts prefixes, not
    conversations; ``0`` disables caching.
    """

    def __init__(self, max_entries: int) -> None:
        if max_entries < 0:
            raise ValueError(f"max_entries: expected an integer >= 0, got {max_entries}")
        self.max_entries = max_entries
        self._entries: OrderedDict[int, int] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, prefix_hash: object) -> bool:
        """Whether a prefix is cached, without counting a lookup or refreshing it."""
        return prefix_hash in self._entries

    def table_bytes(self) -> int:
        """Bytes of the ordered hash table (its keys' and values' ints aside): 5.5 MiB when
        65,536 entries first fill it, 9 MiB once evictions have made CPython reallocate it one
        size up, where it stays (the soak accounts for that step: docs/reliability.md)."""
        return sys.getsizeof(self._entries)

    def lookup(self, prefix_hashes: Sequence[tuple[int, int]]) -> int:
        """Cached token count of the longest cached prefix (0 if none); refreshes its recency."""
        for h, tokens in reversed(prefix_hashes):
            cached = self._entries.get(h)
            if cached is not None:
                self._entries.move_to_end(h)
                self.hits += 1
                # The caller's count is authoritative: equal hashes mean equal items.
                return tokens
        self.misses += 1
        return 0

    def insert(self, prefix_hashes: Sequence[tuple[int, int]]) -> None:
        """Record every prefix of this input as cached (after its prefill)."""
        if self.max_entries == 0:
            return
        for h, tokens in prefix_hashes:
            self._entries[h] = tokens
            self._entries.move_to_end(h)
        while len(self._entries) > self.max_entries:
            # Shorter prefixes were inserted first, so eviction takes a conversation's
            # oldest, least specific prefixes before its newest.
            self._entries.popitem(last=False)


# -- decode ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DecodePlan:
    """When each output token is due, in ns from decode start (token 0 at 0).

    ``burst`` is ``(first_token_index, tokens)`` of the burst run, or ``None``.
    Offsets are computed on demand from the token index (closed form), never
    stored: a 1M-token response plans in constant memory (docs/reliability.md).
    """

    n_tokens: int
    burst: tuple[int, int] | None = None
    sustained_tps: float = 1.0
    burst_tps: float = 1.0

    def offset_ns(self, i: int) -> int:
        """Due offset of token ``i`` (0-based); gap counts, so no float drift accumulates."""
        if i <= 0:
            return 0
        if self.burst is None:
            return round(i * NS_PER_S / self.sustained_tps)
        b0, blen = self.burst
        in_burst = min(max(0, i - b0 + 1), blen)
        return round(NS_PER_S * ((i - in_burst) / self.sustained_tps + in_burst / self.burst_tps))

    def iter_offsets(self) -> Iterator[int]:
        return (self.offset_ns(i) for i in range(self.n_tokens))

    @property
    def duration_ns(self) -> int:
        """First to last token (what decode TPS divides by)."""
        return self.offset_ns(self.n_tokens - 1) if self.n_tokens else 0

    def iter_batches(self, min_interval_ns: int) -> Iterator[tuple[int, int]]:
        """Coalesce tokens into emissions at least ``min_interval_ns`` apart, lazily.

        Each batch is ``(due_offset_ns, tokens)`` and is due when the *last*
        token it contains is due, so no token is emitted early and the first and
        last token timestamps are exact.  A short tail that would land closer
        than the interval to the previous emission is merged into it (emitted at
        the last token's due time), so the final timestamp stays exact too; the
        only emissions closer than the interval are those of a response whose
        whole decode is shorter than it.  One batch is held back so the tail can
        be merged: memory stays constant whatever the response length.
        """
        if not self.n_tokens:
            return
        if min_interval_ns <= 0:
            for off in self.iter_offsets():
                yield (off, 1)
            return
        held: tuple[int, int] | None = None
        emitted = 0
        pending = 0
        last_emit: int | None = None
        for off in self.iter_offsets():
            pending += 1
            if last_emit is None or off - last_emit >= min_interval_ns:
                if held is not None:
                    yield held
                held = (off, pending)
                emitted += 1
                last_emit = off
                pending = 0
        end = self.duration_ns
        if pending and held is not None and emitted > 1:
            held = (end, held[1] + pending)
        elif pending:
            if held is not None:
                yield held
            held = (end, pending)
        if held is not None:
            yield held


def decode_plan(n_tokens: int, rng: random.Random, profile: EngineProfile) -> DecodePlan:
    """Due offsets of ``n_tokens`` output tokens, with at most one seeded burst.

    Always draws the same three numbers from ``rng`` so that plans of equal
    seeds match whatever the outcome.
    """
    roll = rng.random()
    length_draw = rng.randint(profile.burst_min_tokens, profile.burst_max_tokens)
    place = rng.random()
    if n_tokens <= 0:
        return DecodePlan(0, None, profile.sustained_tps, profile.burst_tps)
    gaps = n_tokens - 1
    burst: tuple[int, int] | None = None
    if gaps > 0 and roll < profile.burst_probability and profile.burst_tps > profile.sustained_tps:
        length = min(length_draw, gaps)
        # Gap i separates token i-1 from token i; the run covers gaps start..start+length-1.
        start = 1 + int(place * (gaps - length + 1))
        burst = (start, length)
    return DecodePlan(n_tokens, burst, profile.sustained_tps, profile.burst_tps)


def expected_decode_ms(n_tokens: int, profile: EngineProfile) -> float:
    """Mean decode time (first to last token) over the burst distribution, exact."""
    gaps = max(0, n_tokens - 1)
    plain = gaps / profile.sustained_tps
    if gaps == 0 or profile.burst_tps <= profile.sustained_tps or profile.burst_probability == 0:
        return plain * 1000.0
    lo, hi = profile.burst_min_tokens, profile.burst_max_tokens
    saved_per_token = 1 / profile.sustained_tps - 1 / profile.burst_tps
    mean_len = sum(min(k, gaps) for k in range(lo, hi + 1)) / (hi - lo + 1)
    return (plain - profile.burst_probability * mean_len * saved_per_token) * 1000.0


class Pacer:
    """Releases a plan's batches against absolute deadlines; the clock is passed in.

    Deadlines are ``t0 + offset`` (scaled when the engine is over its aggregate
    budget), never "previous emission + gap", so a late wake-up does not shift
    later tokens: everything due by then goes out in one emission and the
    long-run rate stays exact.

    Rate scaling maps plan time ("virtual", what the unscaled engine would have
    done) to real time: ``virtual = v_anchor + (now - r_anchor) * scale``.  A
    scale change re-anchors at the current instant, so only the remaining tokens
    slow down.
    """

    def __init__(
        self, batches: Iterable[tuple[int, int]], t0_ns: int, tolerance_ns: int = 0
    ) -> None:
        # Pulled one at a time: a lazy plan's batches are never all in memory.
        self._batches = iter(batches)
        self._next: tuple[int, int] | None = next(self._batches, None)
        self._r_anchor = t0_ns
        self._v_anchor = 0
        self._scale = 1.0
        self.tolerance_ns = tolerance_ns
        self.t0_ns = t0_ns
        self.last_deadline_ns = t0_ns
        self.emitted_tokens = 0

    @property
    def done(self) -> bool:
        return self._next is None

    def set_scale(self, now_ns: int, scale: float) -> None:
        if not 0 < scale <= 1:
            raise ValueError(f"scale: expected a number in (0, 1], got {scale}")
        if scale == self._scale:
            return
        # Never re-anchor in the past or before t0: virtual time starts at 0.
        now_ns = max(now_ns, self._r_anchor)
        self._v_anchor = self._virtual(now_ns)
        self._r_anchor = now_ns
        self._scale = scale

    def _virtual(self, now_ns: int) -> int:
        return self._v_anchor + round((now_ns - self._r_anchor) * self._scale)

    def deadline_ns(self, offset_ns: int) -> int:
        """Real time at which plan offset ``offset_ns`` is due under the current scale."""
        if offset_ns <= self._v_anchor:
            return self._r_anchor
        return self._r_anchor + -(
            -(offset_ns - self._v_anchor) * NS_PER_S // round(self._scale * NS_PER_S)
        )

    def next_deadline_ns(self) -> int | None:
        if self._next is None:
            return None
        return self.deadline_ns(self._next[0])

    def take_due(self, now_ns: int) -> int:
        """Tokens of every batch due by ``now_ns`` (0 if none), in one emission."""
        k = 0
        while self._next is not None:
            off, n = self._next
            deadline = self.deadline_ns(off)
            if deadline > now_ns + self.tolerance_ns:
                break
            self.last_deadline_ns = deadline
            k += n
            self._next = next(self._batches, None)
        self.emitted_tokens += k
        return k


# -- capacity --------------------------------------------------------------------------------


@dataclass(slots=True)
class Ticket:
    """One stream's claim on an engine slot."""

    id: int
    demand_tps: float
    requested_ns: int
    admitted_ns: int | None = None
    released: bool = False

    @property
    def admitted(self) -> bool:
        return self.admitted_ns is not None

    @property
    def queue_ns(self) -> int:
        """Time spent waiting for a slot (0 while still queued)."""
        return 0 if self.admitted_ns is None else self.admitted_ns - self.requested_ns


@dataclass(slots=True)
class EngineCapacity:
    """Stream slots with a FIFO queue, and fair sharing of an aggregate token budget.

    ``request`` admits at once when a slot is free and nobody is waiting
    (arrivals never overtake the queue); otherwise the ticket queues.
    ``release`` frees the slot and returns the tickets admitted as a result, in
    FIFO order, so the async layer can wake exactly those waiters.  While the
    active streams' nominal rates add up to more than ``aggregate_tps``, every
    stream runs at ``rate_scale`` of its rate: equal scaling is max-min fair
    among streams of equal nominal rate.
    """

    max_streams: int
    aggregate_tps: float
    _active: dict[int, Ticket] = field(default_factory=dict)
    _queue: deque[Ticket] = field(default_factory=deque)
    _next_id: int = 0
    _demand_tps: float = 0.0
    #: each other active stream adds this fraction to every stream's time per token
    slowdown_per_stream: float = 0.0

    def __post_init__(self) -> None:
        if self.max_streams < 1:
            raise ValueError(f"max_streams: expected an integer >= 1, got {self.max_streams}")
        if self.aggregate_tps <= 0:
            raise ValueError(f"aggregate_tps: expected a number > 0, got {self.aggregate_tps}")

    @property
    def active(self) -> int:
        return len(self._active)

    @property
    def queued(self) -> int:
        return len(self._queue)

    def request(self, now_ns: int, demand_tps: float) -> Ticket:
        ticket = Ticket(self._next_id, demand_tps, now_ns)
        self._next_id += 1
        if not self._queue and len(self._active) < self.max_streams:
            self._admit(ticket, now_ns)
        else:
            self._queue.append(ticket)
        return ticket

    def release(self, ticket: Ticket, now_ns: int) -> list[Ticket]:
        """Free ``ticket``'s slot (or drop it from the queue); returns newly admitted tickets."""
        if ticket.released:
            return []
        ticket.released = True
        if self._active.pop(ticket.id, None) is not None:
            # Re-summing avoids float drift over millions of admissions.
            self._demand_tps = sum(t.demand_tps for t in self._active.values())
        else:
            with contextlib.suppress(ValueError):
                self._queue.remove(ticket)
            return []
        woken: list[Ticket] = []
        while self._queue and len(self._active) < self.max_streams:
            nxt = self._queue.popleft()
            self._admit(nxt, now_ns)
            woken.append(nxt)
        return woken

    def rate_scale(self, now_ns: int) -> float:
        """Fraction of its nominal rate every active stream gets now: 1.0 alone and under
        budget; ``1 / (1 + slowdown_per_stream * (active - 1))`` from batching, times
        ``aggregate_tps / demand`` over budget."""
        batched = 1.0 / (1.0 + self.slowdown_per_stream * max(0, len(self._active) - 1))
        if self._demand_tps <= self.aggregate_tps:
            return batched
        return batched * self.aggregate_tps / self._demand_tps

    def _admit(self, ticket: Ticket, now_ns: int) -> None:
        ticket.admitted_ns = now_ns
        self._active[ticket.id] = ticket
        self._demand_tps += ticket.demand_tps
