"""Fit the simulation model to measurements of any endpoint (pure: rows in, parameters out).

``loopbench calibrate RUN_DIR...`` fits the TTFT regression, the decode rates, the
post-inference work and (from several runs) the interference of docs/model.md §10, which
says what each parameter is read from and what a client cannot separate: the intercept
holds the fixed API work, the hops and the engine's base latency, and capacity is copied
from the base profiles.
"""

from __future__ import annotations

import math
import statistics
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from harness.metrics import definitions as D
from harness.metrics.validity import finite
from harness.wire.errors import LoopbenchError
from harness.wire.plural import counted
from harness.wire.transports import TRANSPORTS
from harness.workload.records import BURST_WINDOW_NS, TurnRecord

if TYPE_CHECKING:
    from numpy.typing import NDArray

# The transports a fit can use, grouped by what their requests cost (registry capabilities),
# plainest first (no chain, then no store): the first one a run holds supplies the intercept.
# The append prototype is left out: its later turns are appends, with no per-request API work.
_PLAIN_FIRST = sorted((t for t in TRANSPORTS if not t.append), key=lambda t: (t.chained, t.store))
#: requests over HTTP, each resolved from scratch
HTTP_LIKE = tuple(t.name for t in _PLAIN_FIRST if not t.websocket)
#: requests on a WebSocket, resolved once per connection
WS_LIKE = tuple(t.name for t in _PLAIN_FIRST if t.websocket)
#: later turns send only what is new
CHAINED = frozenset(t.name for t in TRANSPORTS if t.chained)
#: the chain is re-loaded from the store on every request (no connection cache holds it)
REHYDRATING = frozenset(t.name for t in TRANSPORTS if t.chained and not t.websocket)
#: a response whose decode rate exceeds the sustained rate by this factor had a burst
BURST_FACTOR = 1.05
BURST_WINDOW_S = BURST_WINDOW_NS / 1e9
_TTFT = D.get("ttft_ms")
_DECODE_TPS = D.get("decode_tps")


class CalibrationError(LoopbenchError):
    """The run does not hold what a fit needs (too few turns, no token counts, …)."""


@dataclass(frozen=True, slots=True)
class Turn:
    """What the fit needs of one turn (ms and tokens); built from a row by :func:`turns_from_rows`."""

    transport: str
    ttft_ms: float
    processed: int
    uncached: int
    rehydrated: int
    new_connection: bool
    output_tokens: int
    decode_tps: float | None
    tail_ms: float | None  # last token -> terminal event
    model_ttft_ms: float | None = None  # the endpoint's own sim_timing.ttft, if it reports one
    #: usage.output_tokens failed the output-token check: no decode rate (docs/metrics.md §1.5)
    decode_implausible: bool = False
    #: the run the turn came from (``loopbench calibrate RUN_DIR...``: its position)
    run: int = 0
    #: other requests of the same run in flight when this one was sent
    others_at_send: int = 0
    #: other requests of the same run in flight during this one's decode, overlap-weighted
    others_decoding: float = 0.0
    #: other requests of the same run sent after this one and before its first token (they
    #: arrive while it waits: an engine that was idle at the send is not idle for it)
    others_joining: int = 0


@dataclass(frozen=True, slots=True)
class Fit:
    """Fitted parameters (``None`` = not identifiable from this run) and fit quality."""

    per_token_us: float
    prefill_tps: float | None
    rehydrate_us: float | None
    intercept_http_ms: float | None
    intercept_ws_ms: float | None
    #: median measured − modelled TTFT per class, when the endpoint reports sim_timing
    overhead_http_ms: float | None
    overhead_ws_ms: float | None
    connect_ms: float | None
    #: what a new connection adds to the harness overhead (accept, handshake on loopback)
    overhead_connect_ms: float | None
    #: every HTTP request opened a connection (``--no-keepalive``): the http intercept holds
    #: the connection cost, which this run cannot tell apart from the fixed API work
    connect_in_intercept: bool
    post_ms: float | None
    sustained_tps: float | None
    burst_tps: float | None
    burst_probability: float | None
    burst_max_tokens: int | None
    #: what each other active request adds to a first token (ms), and to the time per
    #: output token (a fraction); None: not identifiable (one run, one concurrency)
    ttft_per_active_ms: float | None
    decode_slowdown_per_stream: float | None
    #: what a request sent with no other in flight pays on top (the engine waking up, ms);
    #: None: not identifiable (no run with requests alone and no two busier levels)
    idle_wake_ms: float | None
    turns: int
    r2: float
    residual_p50_ms: float
    #: what a request sent beside others pays on top, once (ms): the step at "alone" the
    #: other way round, an engine that admits a newcomer slowest when it is busy; 0 where the
    #: step went the idle way, None where the step is not identifiable (as ``idle_wake_ms``)
    busy_admit_ms: float | None = None
    #: the TTFT spread around the fitted line (docs/model.md §2, "TTFT spread"): the scale of a
    #: mean-0 exponential draw with no other request in flight (ms), and what each other adds
    #: to it; None: not identifiable (one run, or too few turns a run for its p99)
    ttft_spread_ms: float | None = None
    ttft_spread_per_active_ms: float | None = None
    notes: list[str] = field(default_factory=list)


def turns_from_rows(rows: Iterable[Mapping[str, Any]]) -> list[Turn]:
    """Successful turns with a first token, in conversation order, with the tokens each processed.

    Chained transports send only what is new; how much that is comes from the
    usage the endpoint reported: ``input(t) - input(t-1) - output(t-1)``.
    """
    by_conv: dict[tuple[int, str, int, int], list[Mapping[str, Any]]] = {}
    by_run: dict[int, list[Mapping[str, Any]]] = {}
    for row in rows:
        run = int(row.get("run", 0) or 0)
        by_run.setdefault(run, []).append(row)
        key = (run, str(row["transport"]), int(row.get("round", 0)), int(row["rollout_id"]))
        by_conv.setdefault(key, []).append(row)
    activity = {run: _Activity(rs) for run, rs in by_run.items()}
    out: list[Turn] = []
    for (run, transport, _, _), conv in sorted(by_conv.items()):
        conv.sort(key=lambda r: int(r["turn_index"]))
        prev: Mapping[str, Any] | None = None
        for row in conv:
            rec = _timing(transport, row)
            ttft = D.sample(_TTFT, rec)
            inp, cached = int(row["input_tokens"]), int(row["cached_tokens"])
            if ttft is not None and inp > 0:
                rehydrated = 0
                processed = inp
                if prev is not None and transport in CHAINED:
                    before = int(prev["input_tokens"]) + int(prev["output_tokens"])
                    processed = max(0, inp - before)
                    rehydrated = before if transport in REHYDRATING else 0
                last, done = rec.last_token_ns, rec.done_ns
                act = activity[run]
                out.append(
                    Turn(
                        transport=transport,
                        ttft_ms=ttft,
                        processed=processed,
                        uncached=max(0, inp - cached),
                        rehydrated=rehydrated,
                        new_connection=_truthy(row.get("new_connection")),
                        output_tokens=rec.output_tokens,
                        decode_tps=D.sample(_DECODE_TPS, rec),
                        tail_ms=(done - last) / 1e6 if done and last else None,
                        model_ttft_ms=_model_ttft(row.get("sim_ttft_ms")),
                        decode_implausible=rec.decode_implausible,
                        run=run,
                        others_at_send=max(0, act.at(rec.sent_ns) - 1),
                        others_decoding=act.others_over(rec.first_token_ns, last),
                        others_joining=act.sent_within(rec.sent_ns, rec.first_token_ns),
                    )
                )
            # A failed turn breaks the chain: the next one's "new" tokens are unknown.
            prev = row if rec.ok else None
    return out


class _Activity:
    """How many requests of one run were in flight (sent, last token not yet read) at an
    instant, and integrated over a span: a sweep over the sorted ends, O(log n) a query."""

    def __init__(self, rows: Iterable[Mapping[str, Any]]) -> None:
        spans = []
        for r in rows:
            start = int(r.get("sent_ns", 0) or 0)
            end = int(r.get("last_token_ns", 0) or 0) or int(r.get("done_ns", 0) or 0)
            if start > 0 and end > start:
                spans.append((start, end))
        self._starts = sorted(s for s, _ in spans)
        self._ends = sorted(e for _, e in spans)
        # the step function N(t) at each change, and its integral up to there
        changes = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
        self._t: list[int] = []
        self._n: list[int] = []
        self._area: list[float] = []
        n, area, prev = 0, 0.0, None
        for t, step in changes:
            if prev is not None:
                area += n * (t - prev)
            n += step
            prev = t
            self._t.append(t)
            self._n.append(n)
            self._area.append(area)

    def at(self, t: int) -> int:
        """Requests in flight at ``t`` (sent at or before it, last token after it)."""
        return bisect_right(self._starts, t) - bisect_right(self._ends, t)

    def sent_within(self, start: int, end: int) -> int:
        """Requests sent after ``start`` and at or before ``end``."""
        return max(0, bisect_right(self._starts, end) - bisect_right(self._starts, start))

    def _integral(self, t: int) -> float:
        i = bisect_right(self._t, t) - 1
        if i < 0:
            return 0.0
        return self._area[i] + self._n[i] * (t - self._t[i])

    def others_over(self, start: int, end: int) -> float:
        """Mean number of *other* requests in flight over ``[start, end]`` (the turn's own
        span counted once and taken out); 0 for an empty span."""
        if end <= start:
            return 0.0
        return max(0.0, (self._integral(end) - self._integral(start)) / (end - start) - 1.0)


def _timing(transport: str, row: Mapping[str, Any]) -> TurnRecord:
    """The row's status and timing as a turn record, for the metric table to read."""
    return TurnRecord(
        transport,
        int(row["rollout_id"]),
        int(row["turn_index"]),
        status=str(row.get("status")),
        sent_ns=int(row["sent_ns"]),
        first_token_ns=int(row["first_token_ns"]),
        first_output_ns=int(row.get("first_output_ns", 0) or 0),
        first_event_ns=int(row.get("first_event_ns", 0) or 0),
        last_token_ns=int(row["last_token_ns"]),
        done_ns=int(row["done_ns"]),
        output_tokens=int(row["output_tokens"]),
        reasoning_tokens=int(row.get("reasoning_tokens", 0) or 0),
        # output read whole (a front end that held it) gives no decode rate: the table's rule
        delta_events=int(row.get("delta_events", 0) or 0),
        output_arrivals=int(row.get("output_arrivals", 0) or 0),
        # a tool call released after a hold gives no decode rate either (RELEASED_CALL); a row
        # from before the count reads -1 and keeps its rate
        function_calls=int(row.get("function_calls", 0) or 0),
        first_arrival_tokens=_int_or(row.get("first_arrival_tokens"), -1),
        # a turn whose usage failed the output-token check gives no decode rate (the table's rule)
        decode_implausible=_truthy(row.get("decode_implausible")),
    )


def _int_or(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):  # missing, or NaN in a column older rows lack
        return default


def _model_ttft(value: Any) -> float | None:
    v = finite(value)
    return v if v is not None and v >= 0 else None


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def fit(turns: Sequence[Turn], *, burst_window_s: float = BURST_WINDOW_S) -> Fit:
    """Least-squares TTFT model plus decode statistics; raises :class:`CalibrationError`."""
    usable = [t for t in turns if t.transport in HTTP_LIKE or t.transport in WS_LIKE]
    if len(usable) < 8:
        raise CalibrationError(
            f"calibrate: expected at least 8 successful turns over http/ws transports, "
            f"got {len(usable)}"
        )
    notes: list[str] = []
    # Interference only from several runs: within one the concurrency is nearly constant.
    several = len({t.run for t in usable}) > 1
    line = usable
    if several:
        # alone at its send but joined before its first token: neither label fits, so the turn
        # stays out of the TTFT line (docs/model.md §10, "Interference")
        joined = [t for t in usable if not (t.others_at_send == 0 and t.others_joining > 0)]
        line = joined if len(joined) >= 8 else usable
    columns: dict[str, list[float]] = {
        f"a:{name}": [1.0 if t.transport == name else 0.0 for t in line]
        for name in sorted({t.transport for t in line})
    }
    columns |= {
        "p": [float(t.processed) for t in line],
        "q": [float(t.uncached) for t in line],
        "r": [float(t.rehydrated) for t in line],
        "c_http": [1.0 if t.new_connection and t.transport in HTTP_LIKE else 0.0 for t in line],
        "c_ws": [1.0 if t.new_connection and t.transport in WS_LIKE else 0.0 for t in line],
    }
    if several:
        # the slope counts the others in flight at the send, as the reference server charges
        # them (its streams active at admission): a replay must pay what the fit found
        columns["k"] = [float(t.others_at_send) for t in line]
        # An engine that idles wakes up for a request that finds it alone: a step in TTFT
        # between no other request in flight and one, apart from the slope beyond (vLLM on
        # the CPU answers a request faster beside another than alone).
        columns["w"] = [1.0 if t.others_at_send == 0 else 0.0 for t in line]
    # A column with no variation of its own (no chained turns, no new connections) is dropped.
    names = [n for n, col in columns.items() if any(col)]
    # A connection column set on every turn of its class (HTTP without keep-alive: each
    # request opens a connection) is a second intercept: the connection cost cannot be told
    # apart from the fixed work, so the column goes, and the intercept keeps both.
    all_new = {
        cls: [t.new_connection for t in line if t.transport in kinds]
        for cls, kinds in (("c_http", HTTP_LIKE), ("c_ws", WS_LIKE))
    }
    connect_in_intercept = False
    for cls, flags in all_new.items():
        if cls in names and flags and all(flags):
            names.remove(cls)
            connect_in_intercept |= cls == "c_http"
            notes.append(
                f"connection cost not identifiable: every {cls[2:]} request opened a new "
                "connection (--no-keepalive?); its intercept includes the connection cost"
            )
    y = np.array([t.ttft_ms for t in line], dtype=np.float64)
    # Columns the others already span are dropped in this order, each said in a note:
    unseparable = (
        (
            "q",
            "prefill rate not identifiable: uncached tokens do not vary apart from the "
            "processed tokens (run http and ws with varied tool-output sizes)",
        ),
        # every turn processed as many tokens as every other (one prompt size): the per-token
        # work is a constant the intercept holds; a slope would split it by the norm's whim
        (
            "p",
            "per-token API work not identifiable: every turn processed the same tokens; "
            "the intercept holds it (per_token_us 0)",
        ),
        # the requests in flight took two values at most (one level, or 1 and 2): the step
        # at "alone" and the slope are one and the same; the slope stays
        (
            "w",
            "idle wake-up not identifiable: the requests in flight at send took two values "
            "at most (run three concurrencies, e.g. 1, 2 and 4)",
        ),
    )

    def design(cols: Sequence[str]) -> NDArray[np.float64]:
        return np.array([columns[n] for n in cols], dtype=np.float64).T

    for column, note in unseparable:
        # Only a column the others span goes: a rank-deficient matrix alone does not say
        # which one (a dependent w must not take q and p with it).
        rest = [n for n in names if n != column]
        if column in names and np.linalg.matrix_rank(design(rest)) == np.linalg.matrix_rank(
            design(names)
        ):
            names = rest
            notes.append(note)
    x = design(names)
    coef = _robust_lstsq(x, y, np.array([t.run for t in line]))
    got = dict(zip(names, (float(c) for c in coef), strict=True))
    wake = got.get("w")
    busy: float | None = None if wake is None else 0.0
    if wake is not None and wake < 0:
        # A request alone came sooner than the line through the busier levels: the same fit
        # written the other way round, a step paid by a request sent beside others
        # (docs/model.md §2, "Busy admission").
        notes.append(
            f"idle wake-up {wake:.3g} ms is negative: a request beside others pays "
            f"{-wake:.3g} ms once (busy_admit_ms)"
        )
        for name in got:
            if name.startswith("a:"):
                got[name] += wake
        busy, wake = -wake, 0.0
    resid = y - x @ coef
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(resid**2)) / ss_tot if ss_tot > 0 else 1.0

    q = got.get("q")
    prefill_tps = 1000.0 / q if q is not None and q > 0 else None
    if q is not None and q <= 0:
        notes.append(f"prefill slope {q:.3g} ms/token is not positive: prefill rate not fitted")
    http_name = next((n for n in HTTP_LIKE if f"a:{n}" in got), None)
    ws_name = next((n for n in WS_LIKE if f"a:{n}" in got), None)
    a_http = got[f"a:{http_name}"] if http_name else None
    a_ws = got[f"a:{ws_name}"] if ws_name else None
    if http_name in CHAINED:
        notes.append(f"http intercept from {http_name} only: it includes the re-sent prompt")
    # The overhead of the very transport whose intercept is used (http-chained's store I/O
    # is not http's).
    overhead_http = _overhead(usable, frozenset({http_name})) if http_name else None
    overhead_ws = _overhead(usable, frozenset({ws_name})) if ws_name else None
    # A new connection costs the harness more than a reused one (connect, the server's
    # accept); a replay measured by the same harness pays that again, like the overheads.
    new_http = [t for t in usable if t.transport in HTTP_LIKE]
    on_new = _overhead([t for t in new_http if t.new_connection], frozenset(HTTP_LIKE))
    on_reused = _overhead([t for t in new_http if not t.new_connection], frozenset(HTTP_LIKE))
    overhead_connect = on_new - on_reused if on_new is not None and on_reused is not None else None
    connect = got.get("c_http")
    if (
        connect is None
        and not connect_in_intercept
        and "c_ws" in got
        and a_http is not None
        and a_ws is not None
    ):
        # A WebSocket's first request also pays the unresolved fixed work: the difference of
        # the two intercepts, net of the harness overheads they hold (when known).
        fixed_gap = (a_http - (overhead_http or 0.0)) - (a_ws - (overhead_ws or 0.0))
        connect = got["c_ws"] - fixed_gap

    spread = _ttft_spread(line, resid) if several else None
    if spread is not None and spread[1] < 0:
        notes.append(
            f"TTFT spread per other request {spread[1]:.3g} ms is negative: one spread "
            "for every level"
        )
        spread = (_median([s for _, s in _spread_points(line, resid)]), 0.0)
    slowdown = _decode_slowdown(usable) if several else None
    if slowdown is not None and slowdown < 0:
        notes.append(f"decode slowdown per stream {slowdown:.3g} is negative: set to 0")
        slowdown = 0.0

    def alone(t: Turn) -> float | None:
        """The turn's decode rate with the requests beside it taken out (the model's rate)."""
        if t.decode_tps is None:
            return None
        return t.decode_tps * (1.0 + (slowdown or 0.0) * t.others_decoding)

    decode = sorted(r for r in map(alone, usable) if r is not None)
    lied = sum(t.decode_implausible for t in usable)
    if lied:
        notes.append(
            f"{lied} of {counted(len(usable), 'turn')} left out of the decode fit: the endpoint reported "
            "output tokens their stream did not carry, or a rate no engine decodes at"
        )
    sustained = _median(decode) if decode else None
    burst_tps: float | None = None
    burst_p: float | None = None
    burst_max: int | None = None
    if sustained is not None:
        bursting = [t for t in usable if (alone(t) or 0.0) > sustained * BURST_FACTOR]
        if bursting:
            # A response that bursts from its first token to its last decodes at the burst
            # rate, and first-to-last is measured from two timestamps only: robust where a
            # 100 ms window is not (deltas a busy host delivered together can crowd one
            # window).  The token-weighted median of the bursting responses' rates is that
            # rate while most bursts cover their response; weighting by length trusts long
            # spans, whose endpoints' jitter matters least.
            burst_tps = _weighted_median([(alone(t) or 0.0, t.output_tokens) for t in bursting])
            burst_p = len(bursting) / len(decode)
            lengths = [
                _burst_length(t.output_tokens, alone(t) or 0.0, sustained, burst_tps)
                for t in bursting
            ]
            burst_max = max(lengths) if lengths else None
        else:
            # no response burst: the probability is observed (0 of n), the burst rate and
            # length are not; they are marked unidentified rather than written as "= sustained"
            burst_p = 0.0
    tails = {
        cls: [t.tail_ms for t in usable if t.tail_ms is not None and t.transport in kinds]
        for cls, kinds in (("http", HTTP_LIKE), ("ws", WS_LIKE))
    }
    post: float | None = None
    if tails["http"] and tails["ws"]:
        post = max(0.0, _median(sorted(tails["http"])) - _median(sorted(tails["ws"])))
    elif tails["http"]:
        post = _median(sorted(tails["http"]))
        notes.append("post_ms from http alone includes the network tail (no ws turns to subtract)")

    return Fit(
        per_token_us=got.get("p", 0.0) * 1000.0,
        prefill_tps=prefill_tps,
        rehydrate_us=got["r"] * 1000.0 if "r" in got else None,
        intercept_http_ms=a_http,
        intercept_ws_ms=a_ws,
        overhead_http_ms=overhead_http,
        overhead_ws_ms=overhead_ws,
        connect_ms=connect,
        overhead_connect_ms=overhead_connect,
        connect_in_intercept=connect_in_intercept,
        post_ms=post,
        sustained_tps=sustained,
        burst_tps=burst_tps,
        burst_probability=burst_p,
        burst_max_tokens=burst_max,
        ttft_per_active_ms=got.get("k") if several else None,
        decode_slowdown_per_stream=slowdown,
        idle_wake_ms=wake,
        busy_admit_ms=busy,
        ttft_spread_ms=max(0.0, spread[0]) if spread is not None else None,
        ttft_spread_per_active_ms=spread[1] if spread is not None else None,
        turns=len(usable),
        r2=r2,
        residual_p50_ms=_median(sorted(abs(float(v)) for v in resid)),
        notes=notes,
    )


#: turns a run needs for its TTFT p99 to be more than its slowest turn
SPREAD_MIN_TURNS = 20
_LN50 = math.log(50.0)


def _spread_points(turns: Sequence[Turn], resid: NDArray[np.float64]) -> list[tuple[float, float]]:
    """Per run: its median requests in flight at send, and the scale of the mean-0 exponential
    whose p99 − p50 is that of the run's TTFT residuals (``(p99 − p50) / ln 50``): the p99 is
    the figure the spread is for, and a run's median leaves its level's offset from the line
    out."""
    per_run: dict[int, list[tuple[int, float]]] = {}
    for t, r in zip(turns, resid, strict=True):
        per_run.setdefault(t.run, []).append((t.others_at_send, float(r)))
    points = []
    for pairs in per_run.values():
        if len(pairs) >= SPREAD_MIN_TURNS:
            r = np.array([v for _, v in pairs])
            scale = (float(np.percentile(r, 99)) - float(np.median(r))) / _LN50
            points.append((_median(sorted(float(o) for o, _ in pairs)), scale))
    return points


def _ttft_spread(turns: Sequence[Turn], resid: NDArray[np.float64]) -> tuple[float, float] | None:
    """``(ttft_spread_ms, ttft_spread_per_active_ms)``: the line through each run's spread
    over its median requests in flight (as the decode slowdown, a run's figures shrug off a
    turn's); one spread for all when the runs' concurrency hardly differs.  None when no
    run holds :data:`SPREAD_MIN_TURNS` turns."""
    points = _spread_points(turns, resid)
    if not points:
        return None
    return _line(points) or (_median(sorted(s for _, s in points)), 0.0)


def _line(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """Intercept and slope of the least-squares line through per-run ``(others, y)`` points;
    None when fewer than two runs differ by half a request in flight or more."""
    if len(points) < 2 or max(o for o, _ in points) - min(o for o, _ in points) < 0.5:
        return None
    x = np.array([[1.0, o] for o, _ in points], dtype=np.float64)
    y = np.array([v for _, v in points], dtype=np.float64)
    base, slope = (float(c) for c in np.linalg.lstsq(x, y, rcond=None)[0])
    return base, slope


def _decode_slowdown(turns: Sequence[Turn]) -> float | None:
    """``s`` of ``time per token = t1·(1 + s·others)``, fitted to each run's median time per
    token over its median number of requests decoding beside it: a run's median shrugs off
    the turns a busy host stalled, which a per-turn fit would follow.  None when fewer than
    two runs differ in concurrency."""
    per_run: dict[int, list[tuple[float, float]]] = {}
    for t in turns:
        if t.decode_tps and not t.decode_implausible:
            per_run.setdefault(t.run, []).append((t.others_decoding, 1000.0 / t.decode_tps))
    points = [
        (_median(sorted(o for o, _ in pairs)), _median(sorted(ms for _, ms in pairs)))
        for pairs in per_run.values()
        if len(pairs) >= 4
    ]
    line = _line(points)
    if line is None:
        return None
    t1, slope = line
    return slope / t1 if t1 > 0 else None


#: the most of a fit's turns the outlier rounds may leave out
MAX_OUTLIER_SHARE = 0.25


def _robust_lstsq(
    x: NDArray[np.float64],
    y: NDArray[np.float64],
    groups: NDArray[np.int_] | None = None,
    rounds: int = 3,
) -> NDArray[np.float64]:
    """Least squares, refitted without the turns beyond 4 MADs of their own group's (run's)
    residuals: the outlier rounds of docs/model.md §10, and why each rule."""
    keep = np.ones(len(y), dtype=bool)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    full_rank = np.linalg.matrix_rank(x)
    group_of = np.zeros(len(y), dtype=np.int_) if groups is None else groups
    for _ in range(rounds):
        resid = y - x @ coef
        # each run against its own spread, not a pooled one
        off = np.zeros(len(y))
        bound = np.zeros(len(y))
        for g in np.unique(group_of):
            member = group_of == g
            kept = resid[member & keep]
            med = float(np.median(kept)) if kept.size else 0.0
            mad = float(np.median(np.abs(kept - med))) if kept.size else 0.0
            off[member] = np.abs(resid[member] - med)
            bound[member] = 4 * 1.4826 * (mad or 1e-9)
        new_keep = off <= bound
        # turns that alone show a column come back, least far off first, until every one shows
        for i in np.argsort(off):
            if np.linalg.matrix_rank(x[new_keep]) == full_rank:
                break
            new_keep[i] = True
        if new_keep.sum() < x.shape[1] + 2 or bool(np.all(new_keep == keep)):
            break
        # more than MAX_OUTLIER_SHARE far off is the model's misfit, to be averaged, not a tail
        if (~new_keep).sum() > MAX_OUTLIER_SHARE * len(y):
            break
        keep = new_keep
        coef, *_ = np.linalg.lstsq(x[keep], y[keep], rcond=None)
    return np.asarray(coef)


def _overhead(turns: Sequence[Turn], kinds: frozenset[str]) -> float | None:
    errs = sorted(
        t.ttft_ms - t.model_ttft_ms
        for t in turns
        if t.transport in kinds and t.model_ttft_ms is not None
    )
    return _median(errs) if errs else None


def _burst_length(output_tokens: int, decode_tps: float, sustained: float, burst: float) -> int:
    """Gaps decoded at the burst rate that explain this response's shorter decode time."""
    gaps = output_tokens - 1
    duration_s = gaps / decode_tps
    saved_per_gap = 1.0 / sustained - 1.0 / burst
    return max(1, min(gaps, round((gaps / sustained - duration_s) / saved_per_gap)))


def _weighted_median(pairs: Sequence[tuple[float, int]]) -> float:
    ordered = sorted(pairs)
    half = sum(w for _, w in ordered) / 2
    acc = 0
    for value, weight in ordered:
        acc += weight
        if acc >= half:
            return value
    return ordered[-1][0] if ordered else math.nan


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def profiles_from_fit(
    f: Fit,
    base_api: Mapping[str, Any],
    base_engine: Mapping[str, Any],
    name: str,
    *,
    base_ttft_ms: float | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """API and engine profile documents (the YAML schema of reference_server/core/profiles).

    ``base_*`` supply what a run cannot show (capacity, cache size) and any
    parameter the fit left undetermined.  ``base_ttft_ms`` is the engine's
    share of the intercept when known; by default the cheapest path's whole
    intercept.
    """
    # Against the reference server the intercepts also hold the harness's own per-turn
    # overhead (measured − modelled TTFT); a replay measured by the same harness adds it
    # again, so it is taken out.  A foreign endpoint reports no model: nothing to take out.
    a_http = _minus(f.intercept_http_ms, f.overhead_http_ms)
    a_ws = _minus(f.intercept_ws_ms, f.overhead_ws_ms)
    known = [v for v in (a_http, a_ws) if v is not None]
    cheapest = min(known) if known else 0.0
    base = max(0.0, cheapest if base_ttft_ms is None else base_ttft_ms)
    connect = (
        max(0.0, f.connect_ms - (f.overhead_connect_ms or 0.0))
        if f.connect_ms is not None
        else float(base_api["connect_ms"])
    )
    if f.connect_in_intercept and a_http is not None:
        # The http intercept holds a connection on every request: the base profile's connection
        # cost comes out of it, so a replay without keep-alive reproduces the measured TTFTs.
        a_http -= connect
    fixed = max(0.0, (a_http if a_http is not None else cheapest) - base)
    fixed_resolved = min(fixed, max(0.0, (a_ws if a_ws is not None else cheapest) - base))
    per_token = max(0.0, f.per_token_us)
    api: dict[str, Any] = {
        **base_api,
        "name": name,
        "description": f"fitted by loopbench calibrate from {counted(f.turns, 'turn')}",
        "connect_ms": _round(connect),
        "fixed_ms": _round(fixed),
        "fixed_resolved_ms": _round(fixed_resolved),
        "per_token_us": _round(per_token),
        "rehydrate_us": _round(min(per_token, max(0.0, f.rehydrate_us)))
        if f.rehydrate_us is not None
        else min(per_token, float(base_api["rehydrate_us"])),
        "hops": 0,
        "hop_ms": 0.0,
        "post_ms": _round(f.post_ms) if f.post_ms is not None else base_api["post_ms"],
    }
    engine: dict[str, Any] = {**base_engine, "name": name, "base_ttft_ms": _round(base)}
    engine["description"] = f"fitted by loopbench calibrate from {counted(f.turns, 'turn')}"
    # A prefill rate the run could not separate is not copied: its cost is already in the
    # intercept (a constant uncached count) or the per-token slope (uncached = processed), and
    # the base profile's rate would charge it a second time on every replayed turn.
    engine["prefill_tps"] = (
        _round(f.prefill_tps) if f.prefill_tps is not None else FOLDED_PREFILL_TPS
    )
    if f.sustained_tps is not None:
        engine["sustained_tps"] = _round(f.sustained_tps)
        engine["burst_probability"] = _round(f.burst_probability or 0.0)
        if f.burst_tps is not None:
            engine["burst_tps"] = _round(max(f.burst_tps, f.sustained_tps))
            # The shortest burst that fills a whole window, so the peak is reproduced.
            lo = max(1, math.ceil(engine["burst_tps"] * BURST_WINDOW_S))
            engine["burst_min_tokens"] = lo
            engine["burst_max_tokens"] = max(lo, f.burst_max_tokens or lo)
    # the interference terms, each written where identified (never below 0)
    for key in INTERFERENCE:
        if (value := getattr(f, key)) is not None:
            engine[key] = _round(max(0.0, value))
    return api, engine


#: the interference terms: engine profile keys and :class:`Fit` fields (None: not identified)
INTERFERENCE: tuple[str, ...] = ("ttft_per_active_ms", "decode_slowdown_per_stream", "idle_wake_ms")
INTERFERENCE += ("busy_admit_ms", "ttft_spread_ms", "ttft_spread_per_active_ms")


#: the prefill rate a fitted profile names when the run could not separate prefill from the
#: fixed or per-token work that holds its cost: fast enough to add nothing measurable
FOLDED_PREFILL_TPS = 1e9


def folded(f: Fit) -> list[str]:
    """Engine parameters whose cost the run measured inside others (written so a replay
    counts it once, not copied)."""
    return ["prefill_tps"] if f.prefill_tps is None else []


def _minus(value: float | None, overhead: float | None) -> float | None:
    if value is None:
        return None
    return value - overhead if overhead is not None else value


def _round(x: float, digits: int = 4) -> float:
    """``x`` to ``digits`` significant digits: what a fit of a noisy run can claim, no more."""
    return float(f"{float(x):.{digits}g}")


#: what a fit writes of each profile: every other field is capacity or cache size, not
#: observable below saturation, and copied from the base profile
FITTED_API: tuple[str, ...] = ("connect_ms", "fixed_ms", "fixed_resolved_ms", "per_token_us")
FITTED_API += ("rehydrate_us", "hops", "hop_ms", "post_ms")
FITTED_ENGINE: tuple[str, ...] = ("base_ttft_ms", "prefill_tps", "sustained_tps", "burst_tps")
FITTED_ENGINE += ("burst_probability", "burst_min_tokens", "burst_max_tokens")
FITTED_ENGINE += INTERFERENCE


def unidentified(f: Fit) -> tuple[list[str], list[str]]:
    """The API and engine parameters this run could not identify (copied from the base)."""
    maybe = {"connect_ms": f.connect_ms, "rehydrate_us": f.rehydrate_us, "post_ms": f.post_ms}
    api = [key for key, value in maybe.items() if value is None]
    engine: list[str] = []
    if f.sustained_tps is None:
        engine += [k for k in FITTED_ENGINE if k.startswith(("sustained", "burst"))]
    elif f.burst_tps is None:
        engine += ["burst_tps", "burst_min_tokens", "burst_max_tokens"]
    engine += [key for key in INTERFERENCE if getattr(f, key) is None]
    return api, engine


def profile_yaml(
    doc: Mapping[str, Any],
    fitted: Sequence[str],
    missing: Sequence[str],
    base: str,
    header: str,
    folded: Sequence[str] = (),
) -> str:
    """A fitted profile as YAML whose comments say which values were not fitted, and why."""
    copied = [k for k in doc if k not in fitted and k not in ("name", "description")]
    lines = [header]
    if missing:
        lines.append(
            f"# unidentified: {', '.join(missing)}: this run cannot show them; "
            f"copied from the base profile {base!r}"
        )
    lines.append(f"# not observable below saturation, copied from {base!r}: {', '.join(copied)}")
    for line in yaml.safe_dump(dict(doc), sort_keys=False).splitlines():
        key = line.partition(":")[0]
        if key in missing:
            line += f"  # unidentified: copied from {base!r}"
        elif key in folded:
            line += "  # not separable: its cost is in the intercept or per_token_us, not twice"
        lines.append(line)
    return "\n".join(lines) + "\n"


def describe(f: Fit) -> str:
    """A human-readable report of the fit, one parameter a line."""

    def show(v: float | None, unit: str, d: int = 2) -> str:
        return "not identifiable" if v is None else f"{v:,.{d}f} {unit}"

    lines = [
        f"turns fitted: {f.turns}   R²: {f.r2:.4f}   |residual| p50: {f.residual_p50_ms:.2f} ms",
        f"per-token API work:     {show(f.per_token_us, 'µs/token')}",
        f"re-hydration:           {show(f.rehydrate_us, 'µs/token')}",
        f"prefill rate:           {show(f.prefill_tps, 'tokens/s', 0)}",
        f"intercept, http:        {show(f.intercept_http_ms, 'ms')}",
        f"intercept, ws:          {show(f.intercept_ws_ms, 'ms')}",
        f"harness overhead, http: {show(f.overhead_http_ms, 'ms')} (measured − modelled TTFT)",
        f"harness overhead, ws:   {show(f.overhead_ws_ms, 'ms')}",
        f"connection setup:       {show(f.connect_ms, 'ms')}",
        f"harness overhead, new connection: {show(f.overhead_connect_ms, 'ms')}",
        f"post-inference (http):  {show(f.post_ms, 'ms')}",
        f"sustained decode:       {show(f.sustained_tps, 'tokens/s', 1)}",
        f"burst decode:           {show(f.burst_tps, 'tokens/s', 0)}",
        f"burst probability:      {show(f.burst_probability, '', 3)}",
        f"TTFT per active request: {show(f.ttft_per_active_ms, 'ms', 3)}",
        f"decode slowdown per active request: {show(f.decode_slowdown_per_stream, '', 4)}",
        f"idle engine wake-up:    {show(f.idle_wake_ms, 'ms', 3)}",
        f"busy engine admission:  {show(f.busy_admit_ms, 'ms', 3)}",
        f"TTFT spread:            {show(f.ttft_spread_ms, 'ms', 3)}",
        f"TTFT spread per active request: {show(f.ttft_spread_per_active_ms, 'ms', 3)}",
    ]
    lines += [f"note: {n}" for n in f.notes]
    return "\n".join(lines)
