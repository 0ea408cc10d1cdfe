"""Match each request a tool reported to the server's timing-log entry of it (pure).

In order of preference, per request: the response id the tool recorded (the server's
own ``chatcmpl-…``/``resp_…`` id), the ``X-Request-ID`` it sent, the ``lbq-<n>`` tag the
runner put in its prompt, and last the nearest arrival: the server's ``arrived_unix_ns``
closest to the tool's request start (Unix clock), within a tolerance, among the entries no
other request took.  An entry is matched at most once.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bench.peers.readers import Measured
from bench.peers.timing_log import ServerEntry

BY_RESPONSE_ID = "response id"
BY_REQUEST_ID = "X-Request-ID"
BY_TAG = "prompt tag"
BY_ARRIVAL = "arrival time"
METHODS = (BY_RESPONSE_ID, BY_REQUEST_ID, BY_TAG, BY_ARRIVAL)

#: a request started this long before (or after) an arrival is not that arrival
ARRIVAL_TOLERANCE_MS = 25.0


@dataclass(frozen=True, slots=True)
class Pair:
    measured: Measured
    entry: ServerEntry
    method: str


@dataclass(slots=True)
class MatchResult:
    pairs: list[Pair] = field(default_factory=list)
    unmatched: list[Measured] = field(default_factory=list)

    @property
    def by_method(self) -> dict[str, int]:
        counts = Counter(p.method for p in self.pairs)
        return {m: counts[m] for m in METHODS if counts[m]}

    @property
    def method(self) -> str:
        """The methods that matched, most used first ("none" when nothing matched)."""
        counts = self.by_method
        return " + ".join(sorted(counts, key=lambda m: -counts[m])) or "none"


def _index(
    entries: Sequence[ServerEntry], key: Callable[[ServerEntry], str | None]
) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, e in enumerate(entries):
        k = key(e)
        if k is not None:
            out.setdefault(k, []).append(i)
    return out


def match_requests(
    measured: Sequence[Measured],
    entries: Sequence[ServerEntry],
    *,
    api: str | None = None,
    arrival_tolerance_ms: float = ARRIVAL_TOLERANCE_MS,
) -> MatchResult:
    """Pair ``measured`` with ``entries`` (of ``api`` only, when given)."""
    pool = [e for e in entries if api is None or e.api == api]
    used = [False] * len(pool)
    keyed: list[tuple[str, Callable[[Measured], str | None], dict[str, list[int]]]] = [
        (BY_RESPONSE_ID, lambda m: m.response_id, _index(pool, lambda e: e.id)),
        (BY_REQUEST_ID, lambda m: m.request_id, _index(pool, lambda e: e.request_id)),
        (BY_TAG, lambda m: m.tag, _index(pool, lambda e: e.tag)),
    ]
    result = MatchResult()
    left: list[Measured] = []
    for m in measured:
        for method, key, index in keyed:
            k = key(m)
            free = [i for i in index.get(k, ()) if not used[i]] if k is not None else []
            if len(free) == 1 or (free and method == BY_RESPONSE_ID):
                used[free[0]] = True
                result.pairs.append(Pair(m, pool[free[0]], method))
                break
        else:
            left.append(m)
    _match_by_arrival(left, pool, used, arrival_tolerance_ms, result)
    return result


def _match_by_arrival(
    left: list[Measured],
    pool: list[ServerEntry],
    used: list[bool],
    tolerance_ms: float,
    result: MatchResult,
) -> None:
    # Greedy on the closest pairs first: a burst of simultaneous starts is resolved by
    # taking the surest pairs before the ambiguous ones.
    order = sorted((e.arrived_unix_ns, i) for i, e in enumerate(pool) if not used[i])
    times = [t for t, _ in order]
    tol = round(tolerance_ms * 1e6)
    candidates: list[tuple[int, int, int]] = []
    for mi, m in enumerate(left):
        if m.start_unix_ns is None:
            continue
        lo = bisect.bisect_left(times, m.start_unix_ns - tol)
        hi = bisect.bisect_right(times, m.start_unix_ns + tol)
        for t, ei in order[lo:hi]:
            candidates.append((abs(t - m.start_unix_ns), mi, ei))
    candidates.sort()
    taken: set[int] = set()
    for _, mi, ei in candidates:
        if mi in taken or used[ei]:
            continue
        taken.add(mi)
        used[ei] = True
        result.pairs.append(Pair(left[mi], pool[ei], BY_ARRIVAL))
    result.unmatched.extend(m for mi, m in enumerate(left) if mi not in taken)
