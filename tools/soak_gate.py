"""The soak's verdict: memory slopes, what accounts for them, faults against recorded errors.

Pure: a soak document (``soak.json``) in, rows and problems out.  So the gate is tested on
synthetic series, and a stored soak is judged again by ``python -m tools.soak --judge
soak.json`` (docs/reliability.md, *Soak*).

* **Slopes.** Each side's RSS slope after the warm-up must stay within
  ``max_slope_mib_h`` (16 MiB/h).
* **Accounted for.** Of the server's slope, what its bounded caches and the store explain
  is subtracted; the rest, *unaccounted*, must be at most a quarter of the slope, or of
  :data:`NOISE_MIB_H`, whichever is larger: a slope of a few MiB/h is within what the
  allocator and the sampling move (below it a quarter of it is noise).  A negative rest is
  not "all accounted": the named rows explain more than grew (memory freed inside arenas
  already resident moves from in use to "freed but held" without growing RSS), so it is
  said in words (:func:`over_explained`), and past that same allowance the share is not
  judged (:func:`not_judged`).
* **Too short.** Both server rules apply after the server's warm-up (until its prefix cache
  is at its bound, :func:`server_warmup_s`).  A soak whose load ends before that (``make
  soak``'s 4 minutes) measures only the caches filling: its server memory is reported, not
  judged, and the verdict says so (:func:`cache_filling`).
* **Faults = errors.** Each fault kind the server injected (``/health``) must equal the
  errors of that kind its clients recorded: the harness's turns and the side mix's
  answers.  A WebSocket cut, a latency spike and a cache eviction are recovered from or
  only slow a turn down by design; they are listed, not equated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reference_server.core.faults import ERROR_STATUSES
from reference_server.core.messages import api_error

#: SQLite's default page cache (``PRAGMA cache_size = -2000``: 2,000 KiB per connection),
#: the most of a file-backed store the server's memory holds
SQLITE_CACHE_BYTES = 2000 * 1024
#: bytes one entry of the engine's LRU prefix cache holds (an OrderedDict entry and two ints:
#: 65,536 entries measured at 9.7 MiB with tracemalloc)
PREFIX_CACHE_ENTRY_BYTES = 155
#: bytes one entry's two ints (its prefix hash and token count) take beside the cache's table,
#: which ``/health`` gives (``table_bytes``, its list nodes included): 36 and 28 B asked for
#: (tracemalloc: 67.5 B), 48 and 32 B in pymalloc's size classes, which is what stays resident
#: (``sys._debugmallocstats`` at 65,536 entries: 110 B an entry with its 32 B node)
PREFIX_ENTRY_OBJECT_BYTES = 80
#: the largest slope (MiB/h) a quarter of which still counts as noise for "unaccounted"
NOISE_MIB_H = 8.0
#: bytes the harness keeps per completed rollout: its latency, for the paired speedup
#: (``Accumulator.rollout_latency_ns``: a (round, id) key, an int, a dict slot; 100,000
#: entries measured with tracemalloc)
ROLLOUT_LATENCY_BYTES = 176
#: error kinds that stand for a cut stream / a stalled one in the harness's records
CUT_KINDS = ("connection",)
STALL_KINDS = ("timeout",)
#: errors a WebSocket cut causes once its reconnects are exhausted (harness/client/recovery.py)
RECOVERY_KINDS = ("recovery_exhausted",)
#: side-mix answers that are no status: a cut connection or a timeout (exception names)
SIDE_TIMEOUTS = ("TimeoutError", "timeout")


#: the gate of issue 39: each side's RSS slope after the warm-up, MiB per hour
MAX_SLOPE_MIB_H = 16.0
#: the most of the server's slope that may be unaccounted for
MAX_UNACCOUNTED_SHARE = 0.25


@dataclass(frozen=True, slots=True)
class Limits:
    max_slope_mib_h: float = MAX_SLOPE_MIB_H
    max_unaccounted_share: float = MAX_UNACCOUNTED_SHARE


def slope_per_h(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of ``(t_s, value)`` points, per hour (None below 6 points)."""
    if len(points) < 6:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return None
    cov = sum((t - mt) * (v - mv) for t, v in points)
    return cov / var * 3600


def server_warmup_s(doc: Mapping[str, Any]) -> float:
    """The server's warm-up: a quarter of the load (``warmup_s``), or until its bounded
    prefix cache is at its bound if that is later: first full, and its table at its largest
    size under load (where the samples have it).  A long-running server runs with that cache
    full and churning; while it fills it grows for minutes, and ~250 s after it is full its
    evictions make CPython reallocate its table one size up (5.5 to 9 MiB at 65,536 entries),
    once: no leak.  A table still growing late in the load is a problem of its own
    (:func:`problems`)."""
    start = float(doc.get("warmup_s") or 0)
    top = doc.get("prefix_cache_max_entries")
    duration = float(doc.get("duration_s") or 0)
    samples = [x for x in doc.get("rss_samples", []) if x[0] <= duration]
    full = [float(x[0]) for x in samples if top and x[4] is not None and x[4] >= top]
    if not full:
        return start
    tables = [(float(x[0]), x[7]) for x in samples if len(x) > 7 and x[7] is not None]
    biggest = max((b for _, b in tables), default=None)
    at_bound = min((t for t, b in tables if b == biggest), default=full[0])
    return max(start, full[0], at_bound)


def prefix_cache_bytes(entries: int | None, table_bytes: int | None) -> float | None:
    """The engine's prefix cache in bytes: its table as the server measured it and its
    entries' ints; entries x :data:`PREFIX_CACHE_ENTRY_BYTES` where the table is not known
    (a soak.json from before /health gave it, which misses the table's step up once the full
    cache churns: 5.5 to 9 MiB)."""
    if entries is None:
        return None
    if table_bytes is None:
        return float(entries * PREFIX_CACHE_ENTRY_BYTES)
    return float(entries * PREFIX_ENTRY_OBJECT_BYTES + table_bytes)


def _column(samples: Sequence[Sequence[Any]], i: int) -> list[tuple[float, float]]:
    """``(t_s, MiB)`` of column ``i`` of ``rss_samples`` (bytes) where a sample has it: a
    soak.json from before the server reported its malloc has five columns."""
    return [(x[0], x[i] / 2**20) for x in samples if len(x) > i and x[i] is not None]


def _rate(points: Sequence[tuple[float, float]]) -> float | None:
    slope = slope_per_h(points)
    return None if slope is None else round(slope, 1)


def server_fit(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The server's slope after its warm-up and what accounts for it (None without samples):
    the prefix cache (entries x their size), the store (at most SQLite's page cache),
    memory malloc holds freed (``mallinfo2``'s ``fordblks``: fragmentation, resident once
    touched), memory Python's arenas hold beyond their blocks in use, and file pages (code paged in, the store's ``-shm``).  These are disjoint: the
    caches are live blocks, then free ones, then pages no allocator owns.  Malloc's
    bytes in use are given beside them, not subtracted: they include the caches."""
    samples = doc.get("rss_samples")
    if not samples:
        return None
    start, end = server_warmup_s(doc), float(doc.get("duration_s") or 0)
    fit = [x for x in samples if start <= x[0] <= end and x[1]]
    slope = _rate([(x[0], x[1] / 1024) for x in fit])
    sizes = [(x[0], prefix_cache_bytes(x[4], x[7] if len(x) > 7 else None)) for x in fit]
    prefix = _rate([(t, b / 2**20) for t, b in sizes if b is not None])
    page = _rate([(x[0], min(x[3], SQLITE_CACHE_BYTES) / 2**20) for x in fit if x[3] is not None])
    held = _rate(_column(fit, 5))
    files = _rate(_column(fit, 8))
    python_held = _rate(_column(fit, 9))
    named = sum(x or 0.0 for x in (prefix, page, held, files, python_held))
    return {
        "from_s": start,
        "slope_mib_per_h": slope,
        "prefix_cache_mib_per_h": prefix,
        "page_cache_mib_per_h": page,
        "malloc_free_held_mib_per_h": held,
        "malloc_in_use_mib_per_h": _rate(_column(fit, 6)),
        "file_pages_mib_per_h": files,
        "pymalloc_free_held_mib_per_h": python_held,
        "unaccounted_mib_per_h": None if slope is None else round(slope - named, 1),
    }


#: the rows of :func:`server_fit` that name what grew, as the soak's table words them
NAMED_ROWS = (
    ("prefix_cache_mib_per_h", "the engine's prefix cache"),
    ("page_cache_mib_per_h", "SQLite's page cache"),
    ("malloc_free_held_mib_per_h", "malloc's freed but held"),
    ("pymalloc_free_held_mib_per_h", "Python's arenas' freed but held"),
    ("file_pages_mib_per_h", "file pages"),
)


def over_explained(fit: Mapping[str, Any]) -> str | None:
    """A negative remainder in words (None when it is not negative): by how much the named
    rows explain more than the slope grew, and which row reads the most."""
    rest, slope = fit.get("unaccounted_mib_per_h"), fit.get("slope_mib_per_h")
    if rest is None or slope is None or rest >= 0:
        return None
    value, name = max((float(fit.get(key) or 0.0), name) for key, name in NAMED_ROWS)
    alone = " alone" if value > slope else ""
    return (
        f"not all accounted: the named rows explain {-rest:g} MiB/h more than the {slope:g} "
        f"MiB/h that grew ({name}{alone} reads {value:g} MiB/h)"
    )


def error_kinds(status: int) -> frozenset[str]:
    """The error kinds a client records for an injected ``status``: the code of the
    Responses and Chat answers, the type of the Messages API's (503 is its 529)."""
    code = ERROR_STATUSES[status][1]
    _, body = api_error(status, "")
    return frozenset({code, str(body["error"]["type"])})


def unaccounted_limit(slope: float, limits: Limits) -> float:
    return limits.max_unaccounted_share * max(slope, NOISE_MIB_H)


def _sum(counts: Mapping[str, int], kinds: Iterable[str]) -> int:
    return sum(int(counts.get(k, 0)) for k in kinds)


def fault_rows(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per fault kind: injected, recorded by the harness and by the side mix, and
    whether the two must be equal (``judged``)."""
    injected: dict[str, int] = {k: int(v) for k, v in doc.get("faults_injected", {}).items()}
    harness: dict[str, int] = {}
    for t in doc.get("transports", {}).values():
        for kind, n in t.get("errors_by_kind", {}).items():
            harness[kind] = harness.get(kind, 0) + int(n)
    side: dict[str, int] = {}
    for counts in doc.get("side_mix", {}).values():
        for answer, n in counts.items():
            side[answer] = side.get(answer, 0) + int(n)
    side_injected = doc.get("side_mix_injected")
    rows = []
    for group in _status_groups(injected):
        keys = [f"error_{status}" for status in group]
        kinds = frozenset().union(*(error_kinds(status) for status in group))
        by_side = sum(
            int(side_injected.get(key, 0)) if side_injected is not None else side.get(key[6:], 0)
            for key in keys
        )
        rows.append(_row("+".join(keys), _sum(injected, keys), _sum(harness, kinds), by_side))
    stalls = injected.get("stall", 0) + injected.get("stall_websocket", 0)
    rows.append(_row("stall", stalls, _sum(harness, STALL_KINDS), _sum(side, SIDE_TIMEOUTS)))
    cuts = _sum(side, (k for k in side if not k.isdigit() and k not in SIDE_TIMEOUTS))
    rows.append(_row("disconnect", injected.get("disconnect", 0), _sum(harness, CUT_KINDS), cuts))
    recovered = sum(int(n) for n in doc.get("recoveries", {}).values())
    for kind, note in (
        (
            "disconnect_websocket",
            f"reconnected and resent: among the {recovered} recoveries (with evictions and "
            f"lifetime closes); {_sum(harness, RECOVERY_KINDS)} recovery_exhausted errors",
        ),
        ("spike", "a later first token, no error"),
        ("evict", "a resend or the store, no error"),
    ):
        if kind in injected:
            rows.append({"fault": kind, "injected": injected[kind], "judged": False, "note": note})
    return rows


def _status_groups(injected: Mapping[str, int]) -> list[list[int]]:
    """The injected error statuses, those a client cannot tell apart in one group: the
    Messages API calls 500, 502 and 504 all ``api_error``."""
    groups: list[list[int]] = []
    for status in sorted(int(k[6:]) for k in injected if k.startswith("error_")):
        for group in groups:
            if any(error_kinds(status) & error_kinds(other) for other in group):
                group.append(status)
                break
        else:
            groups.append([status])
    return groups


def _row(fault: str, injected: int, by_harness: int, by_side: int) -> dict[str, Any]:
    return {
        "fault": fault,
        "injected": injected,
        "harness": by_harness,
        "side_mix": by_side,
        "recorded": by_harness + by_side,
        "judged": True,
    }


def unexplained_errors(doc: Mapping[str, Any]) -> dict[str, int]:
    """Harness error kinds no injected fault explains (a server bug, a harness defect)."""
    explained = set(CUT_KINDS) | set(STALL_KINDS) | set(RECOVERY_KINDS)
    for group in _status_groups(doc.get("faults_injected", {})):
        for status in group:
            explained |= error_kinds(status)
    out: dict[str, int] = {}
    for t in doc.get("transports", {}).values():
        for kind, n in t.get("errors_by_kind", {}).items():
            if kind not in explained:
                out[kind] = out.get(kind, 0) + int(n)
    return out


def harness_account(doc: Mapping[str, Any]) -> dict[str, Any]:
    """What the harness keeps that grows with the run: one latency per completed rollout."""
    rollouts = int(doc.get("rollouts_completed") or 0)
    duration_h = float(doc.get("duration_s") or 0) / 3600
    rate = rollouts * ROLLOUT_LATENCY_BYTES / 2**20 / duration_h if duration_h else None
    slope = doc["rss"]["harness"].get("slope_mib_per_h")
    return {
        "rollouts": rollouts,
        "rollout_latencies_mib_per_h": None if rate is None else round(rate, 2),
        "unaccounted_mib_per_h": (
            None if slope is None or rate is None else round(slope - rate, 1)
        ),
    }


#: while the prefix cache fills, a remainder over this many times the slope limit is a leak
FILLING_LEAK_FACTOR = 3


def cache_filling(doc: Mapping[str, Any]) -> str | None:
    """Why the server's memory is not judged, or None: its bounded prefix cache was still
    filling when the load ended (a short soak: ``make soak`` fills it for all of its 4
    minutes), so the server's warm-up never ended: its slope is the caches filling, and the
    allocator's growth beside them (Python's objects around the cache's, not broken down)
    is no share of a steady state either.  None also when the bound is unknown (a soak.json
    from before it was kept)."""
    top = doc.get("prefix_cache_max_entries")
    duration = float(doc.get("duration_s") or 0)
    entries = [s[4] for s in doc.get("rss_samples", []) if s[0] <= duration and s[4] is not None]
    if not top or not entries or entries[-1] >= top:
        return None
    return (
        f"server memory not judged: this soak is too short for its rules (the slope and the "
        f"unaccounted share apply after the server's warm-up, until its prefix cache is full), "
        f"the cache was still filling when the load ended ({entries[-1]:,} of {top:,} entries); "
        "judge a server by make soak SOAK_S=1800"
    )


def not_judged(doc: Mapping[str, Any], limits: Limits) -> list[str]:
    """What the gate could not judge and why (each also keeps its rule from failing)."""
    filling = cache_filling(doc)
    if filling is not None:
        return [filling]
    fit = server_fit(doc)
    if fit is None or fit["slope_mib_per_h"] is None:
        return []
    words = over_explained(fit)
    over = -float(fit["unaccounted_mib_per_h"])
    if words is None or over <= unaccounted_limit(fit["slope_mib_per_h"], limits):
        return []
    return [f"server's unaccounted share not judged: {words}; its slope is judged"]


def problems(doc: Mapping[str, Any], limits: Limits) -> list[str]:
    """Why the soak fails its gate (empty: it passes)."""
    out: list[str] = []
    if doc.get("server_alive_at_end") is False:
        out.append("the server died during the soak")
    if doc.get("harness_exit") not in (0, None):
        out.append(f"the harness exited with {doc['harness_exit']}")
    fit = server_fit(doc)
    warm, duration = server_warmup_s(doc), float(doc.get("duration_s") or 0)
    if cache_filling(doc) is None and duration and warm > 0.75 * duration:
        out.append(
            f"the server's prefix cache reached its size in memory only at {warm:.0f} s of "
            f"{duration:.0f}: too late to judge its slope (its table still growing?)"
        )
    server_slope = doc["rss"]["server"].get("slope_mib_per_h")
    unaccounted = doc.get("store", {}).get("unaccounted_mib_per_h")
    if fit is not None:
        server_slope, unaccounted = fit["slope_mib_per_h"], fit["unaccounted_mib_per_h"]
    slopes = {"server": server_slope, "harness": doc["rss"]["harness"].get("slope_mib_per_h")}
    for side, slope in slopes.items():
        if side == "server" and cache_filling(doc) is not None:
            continue  # too short: not judged (not_judged says so)
        if slope is not None and slope > limits.max_slope_mib_h:
            out.append(
                f"{side} RSS grew {slope} MiB/h after the warm-up "
                f"(limit {limits.max_slope_mib_h:g} MiB/h)"
            )
    slope = server_slope
    if unaccounted is not None and cache_filling(doc) is not None:
        # While the cache fills its growth and the allocator's around it blur the
        # remainder (make soak's 240 s: 23 MiB/h named by nothing, 1.5 MiB), so only a
        # leak far past the slope limit is told apart; the fine rules wait for a long soak
        gross = FILLING_LEAK_FACTOR * limits.max_slope_mib_h
        if unaccounted > gross:
            out.append(
                f"server RSS grew {unaccounted} MiB/h beyond what its filling prefix cache "
                f"accounts for (limit while it fills: {gross:g} MiB/h, "
                f"{FILLING_LEAK_FACTOR}x the slope limit)"
            )
    if slope is not None and unaccounted is not None and cache_filling(doc) is None:
        allowed = unaccounted_limit(slope, limits)
        if unaccounted > allowed:
            out.append(
                f"server RSS: {unaccounted} MiB/h of its {slope} MiB/h slope is not accounted "
                f"for (limit {allowed:.1f}: {limits.max_unaccounted_share:.0%} of the slope, "
                f"or of {NOISE_MIB_H:g} MiB/h)"
            )
    for row in fault_rows(doc):
        if row["judged"] and row["injected"] != row["recorded"]:
            out.append(
                f"fault {row['fault']}: {row['injected']} injected, {row['recorded']} errors "
                f"recorded (harness {row['harness']}, side mix {row['side_mix']})"
            )
    other = unexplained_errors(doc)
    if other:
        kinds = ", ".join(f"{k} x{n}" for k, n in sorted(other.items()))
        out.append(f"errors no injected fault explains: {kinds}")
    return out
