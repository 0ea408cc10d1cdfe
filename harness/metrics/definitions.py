"""The metric table: every metric loopbench reports, declared once (docs/metrics.md §1).

What a :class:`Metric` declares, the expression language of its ``when`` and ``value`` and the
three readers of one text (:func:`compile_adder`, :func:`column`, :func:`sample`):
docs/metrics.md §6.  In an expression ``&`` joins conditions; it is never a bitwise and of
numbers.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

from harness.metrics.results_model import Summary, as_summary
from harness.metrics.timeseries import AGGREGATE_BUCKET_NS
from harness.wire.transports import TRANSPORTS
from harness.workload.records import (
    BURST_WINDOW_NS,
    OK_ROLLOUT_STATUSES,
    OK_TURN_STATUSES,
    SIM_BREAKDOWN,
    RolloutRecord,
    TurnRecord,
)

RecordKind = Literal["turn", "rollout"]
Raw = Literal["ns", "tps", "count"]

#: the statuses that give latency samples: the records' own success rule
TURN_OK = OK_TURN_STATUSES
ROLLOUT_OK = OK_ROLLOUT_STATUSES

#: percentile statistics by name; "mean", "peak" are the other statistics a metric may name
PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0}
#: the other statistics: of a histogram (mean, peak, count), of sums (ratio), and the SLO's
#: run-level shares and rate (harness/metrics/slo.py)
RUN_LEVEL_STATS = ("mean", "peak", "count", "ratio", "attainment", "turn attainment", "tok/s")

_FIELDS: dict[RecordKind, frozenset[str]] = {
    "turn": frozenset(f.name for f in fields(TurnRecord)),
    "rollout": frozenset(f.name for f in fields(RolloutRecord)),
}
#: the name a compiled expression calls its record by
_REC = "rec"


@dataclass(frozen=True, slots=True)
class Stat:
    """One number a metric puts in ``summary.json``: ``transports.<t>.<group>.<key>``."""

    key: str
    #: p50, p90, p99, mean, peak, count (records taken), ratio (of two sums) or one of the
    #: SLO's (RUN_LEVEL_STATS): what is computed, how tables name it
    name: str


def stats(*names: str, prefix: str = "") -> tuple[Stat, ...]:
    return tuple(Stat(prefix + n, n) for n in names)


Unit = Literal["ms", "tok/s", "count", "ratio"]


@dataclass(frozen=True, slots=True)
class Metric:
    #: the metric's name: its ``summary.json`` group for a distribution (``ttft_ms``), the
    #: histogram-free name for the others; the gate's rules and ``compare`` use it
    name: str
    label: str
    unit: Unit
    #: True: lower is better; False: higher is better; None: neither (a signed error)
    lower_is_better: bool | None
    #: ``summary.json`` key under ``transports.<t>`` holding ``stats``
    group: str
    stats: tuple[Stat, ...]
    #: per-record metrics: which record, the two expressions, the unit of ``value``
    record: RecordKind | None = None
    when: str = ""
    value: str = ""
    raw: Raw = "ns"
    #: ``value`` is a list of samples (every inter-token gap); not in the row files
    many: bool = False
    #: failed records give samples too (they loaded the engine / were scheduled)
    failed_too: bool = False
    #: the histogram's name in ``histograms/<transport>.<name>.hlog``
    histogram: str = ""
    #: signed values: kept as two histograms, ``<histogram>_pos`` and ``<histogram>_neg``
    signed: bool = False
    #: column name in :mod:`harness.report.analysis` tables (None: not in the row files)
    column: str | None = None
    #: paired across transports by (round, rollout_id) for the summary's speedup
    paired: bool = False
    # -- where it is shown -------------------------------------------------------------------
    compare: tuple[str, ...] = ()
    report: tuple[tuple[str, int], ...] = ()
    report_table: Literal["latency", "throughput"] = "latency"
    cli: tuple[str, ...] = ()
    #: the gate's regression and speedup rules may name it when > 0; the gate lists its
    #: metrics by this rank, from the whole rollout down to the token (rule errors, docs)
    gate: int = 0
    #: keys besides its statistics a run-level metric writes into its group: why a statistic
    #: is null, how many records it left out
    notes: tuple[str, ...] = ()
    #: shown in the report's and the console's tables only when the run reasoned
    #: (:func:`has_reasoning`): without reasoning it repeats another column (TTFOT is TTFT)
    reasoning: bool = False
    #: shown in the tables only when some transport measured it (a TLS handshake exists only
    #: over https/wss, a compaction only when the rollout compacts): otherwise an empty column
    measured_only: bool = False

    @property
    def per_record(self) -> bool:
        return self.record is not None

    @property
    def scale(self) -> float:
        """Divisor from ``raw`` to ``unit``."""
        return 1e6 if self.raw == "ns" else 1.0

    def stat(self, key: str) -> Stat:
        for s in self.stats:
            if s.key == key:
                return s
        raise KeyError(f"{self.name}: no statistic {key!r}")

    def title(self, key: str, *, with_unit: bool = False) -> str:
        """How a table heads this metric's statistic ``key``: "TTFT p50" (+ " ms")."""
        name = self.stat(key).name
        text = f"{self.label} {name}"
        # a count of records is no duration, whatever the metric's unit
        return (
            f"{text} {self.unit}" if with_unit and self.unit == "ms" and name != "count" else text
        )


def _latency(name: str, label: str, **kw: Any) -> Metric:
    kw.setdefault("stats", stats("p50", "p90", "p99", "mean"))
    kw.setdefault("column", name)
    return Metric(name, label, "ms", True, name, **kw)


def _rate(
    name: str, label: str, unit: Unit, group: str, stat: tuple[Stat, ...], **kw: Any
) -> Metric:
    """A figure where higher is better, in the report's throughput table."""
    return Metric(name, label, unit, False, group, stat, report_table="throughput", **kw)


_TTFT_WHEN = "(first_token_ns > 0) & (sent_ns > 0)"


def _signed(name: str, label: str, when: str, value: str, **kw: Any) -> Metric:
    """A signed per-turn TTFT difference (ms, neither way better): ``when`` adds to TTFT's."""
    group, stat = f"{name}_ms", stats("p50", "p99")
    kw.update(histogram=name, signed=True)
    return Metric(group, label, "ms", None, group, stat, "turn", _TTFT_WHEN + when, value, **kw)


#: where the visible output starts: the first visible delta; a row written before
#: ``first_output_ns`` existed (0) starts at its first token, as it was measured then
VISIBLE_START = "(first_output_ns + (first_output_ns == 0) * first_token_ns)"
#: the visible output's tokens: reasoning is output the engine decoded before it, not streamed
#: as it, so a decode rate over the visible deltas counts the visible tokens only
VISIBLE_TOKENS = "(output_tokens - reasoning_tokens)"

#: the fewest arrivals of visible output (``output_arrivals``: deltas read together are one) a
#: turn needs to give ITL, TPOT and decode-TPS samples; rows written before the count existed
#: (0) keep theirs.  Why 4: docs/metrics.md §1.2, "Late or whole output".
MIN_OUTPUT_ARRIVALS = 4
#: the fewest visible tokens of a turn the summary's warning counts when its output came in fewer
#: than MIN_OUTPUT_ARRIVALS pieces (why 16: docs/metrics.md §1.2, ``WHOLE_OUTPUT_MIN_TOKENS``)
WHOLE_OUTPUT_MIN_TOKENS = 16
#: the turn's output was paced: enough arrivals, or a row from before they were counted
PACED_OUTPUT = f"(output_arrivals >= {MIN_OUTPUT_ARRIVALS}) + (output_arrivals == 0)"
#: output that came whole or nearly (fewer than MIN_OUTPUT_ARRIVALS arrivals)
WHOLE_OUTPUT = f"(output_arrivals > 0) & (output_arrivals < {MIN_OUTPUT_ARRIVALS})"
#: the fewest visible tokens the first arrival of a turn's output (``first_arrival_tokens``)
#: carries when the output was withheld and then released at once; only the first delta is
#: counted, so paced deltas a late client read together never add up to it.  Why 16:
#: docs/metrics.md §1.2, "Released after a hold".
RELEASED_BURST_MIN_TOKENS = 16
#: a tool call the endpoint held back and then released: announced by its name alone (0
#: tokens) or with a burst of what it had; it gives no decode rate.  Why tool calls only:
#: docs/metrics.md §1.2, "Released after a hold".
RELEASED_CALL = (
    "((function_calls > 0) & ((first_arrival_tokens == 0) "
    f"+ (first_arrival_tokens >= {RELEASED_BURST_MIN_TOKENS}) > 0))"
)
_RELEASED_CALL_CODE = compile(RELEASED_CALL, "<RELEASED_CALL>", "eval")


def released_call(function_calls: int, first_arrival_tokens: int) -> bool:
    """:data:`RELEASED_CALL` of one turn (the summary's count, tools/real_engine's judge)."""
    fields = {"function_calls": function_calls, "first_arrival_tokens": first_arrival_tokens}
    return bool(eval(_RELEASED_CALL_CODE, fields))


#: the transports whose first event follows the engine's first token, so that first event →
#: release is a time the endpoint held output back; not the Responses API, whose first event
#: comes on the request's arrival (docs/metrics.md §1.2, "Late or whole output").
FIRST_EVENT_AT_FIRST_TOKEN = (
    "("
    + " + ".join(f"(transport == {t.name!r})" for t in TRANSPORTS if t.api != "responses")
    + " > 0)"
)

#: the shortest first-to-last-token span whose decode rate is a measurement rather than the
#: jitter of two reads (docs/metrics.md §1.2, "A valid decode rate")
MIN_DECODE_SPAN_NS = 20_000_000
#: a turn with a valid decode rate: every condition holds.  The one predicate of decode TPS,
#: TPOT and the burst peak's per-turn part; a check that flags a rate extends this tuple.
VALID_DECODE_CONDITIONS: tuple[str, ...] = (
    f"{VISIBLE_TOKENS} >= 2",
    "first_token_ns > 0",
    f"last_token_ns - {VISIBLE_START} >= {MIN_DECODE_SPAN_NS}",
    # a turn whose usage failed the output-token check (docs/metrics.md §1.5)
    "decode_implausible == 0",
    # output that arrived whole (a withheld tool call, a front end writing late): no pacing
    PACED_OUTPUT,
    # a call held back, then released (its name alone, or a burst) and streamed: tokens took
    # time before the first visible output, which the span from it leaves out (~18 % fast)
    f"{RELEASED_CALL} == 0",
)
_DECODE_WHEN = " & ".join(f"({c})" for c in VALID_DECODE_CONDITIONS)

#: why ``burst_peak`` is null when no response lasted a whole burst window
BURST_NA_REASON = f"no response long enough to fill a {BURST_WINDOW_NS / 1e6:g} ms window"


def aggregate_na_reason(span_ns: int) -> str:
    """Why ``aggregate_peak`` is null: no whole aggregate bucket inside the active span."""
    return (
        f"no whole {AGGREGATE_BUCKET_NS / 1e9:g} s bucket inside the {span_ns / 1e9:.2f} s of "
        "output"
    )


def fills_burst_window(first_output_ns: Any, last_token_ns: Any, window_ns: int) -> Any:
    """A response whose windowed token count is a rate, not a lower bound: its visible output
    (first visible to last delta, :data:`VISIBLE_START`) covers the whole window (a window
    starts at a delta, docs/metrics.md §1.2).  Scalars give a bool, pandas columns a boolean
    column."""
    return (first_output_ns > 0) & (last_token_ns - first_output_ns >= window_ns)


def visible_start(first_token_ns: Any, first_output_ns: Any) -> Any:
    """:data:`VISIBLE_START` of a record's two stamps (scalars or pandas columns)."""
    return first_output_ns + (first_output_ns == 0) * first_token_ns


def has_reasoning(summary: Summary | Mapping[str, Any] | None) -> bool:
    """Whether any transport of a summary reasoned (a turn with reasoning tokens): the tables
    show the ``reasoning`` metrics only then."""
    return measured(summary, "reasoning_tokens")


#: every metric, in ``summary.json`` order
METRICS: list[Metric] = [
    # the first token the client can act on: for a tool call an engine withheld until it
    # parsed, the time it was released, not the engine's first token (that is near the first
    # event, ttfb_ms; the difference is held_back_ms)
    _latency(
        "ttft_ms",
        "TTFT",
        record="turn",
        when=_TTFT_WHEN,
        value="first_token_ns - sent_ns",
        histogram="ttft",
        compare=("p50", "p99"),
        report=(("p50", 1), ("p90", 1), ("p99", 1)),
        cli=("p50", "p99"),
        gate=3,
    ),
    # TTFT by output kind: engines treat tool calls apart (a forced call is decoded under a
    # grammar and may be withheld until it parses), so a mixed run's TTFT mixes two things
    *(
        _latency(
            f"ttft_{kind}_ms",
            f"TTFT {label}",
            stats=stats("p50", "p99"),
            record="turn",
            when=f"{_TTFT_WHEN} & (function_calls {calls})",
            value="first_token_ns - sent_ns",
            histogram=f"ttft_{kind}",
            column=None,
            **shown,
        )
        for kind, label, calls, shown in (
            ("text", "text", "== 0", {}),
            ("tool", "tool call", "> 0", {"report": (("p50", 1),), "measured_only": True}),
        )
    ),
    # how long the endpoint held back a tool call that came whole or was released after a hold
    # (docs/metrics.md §1.2, "held back"); none over the Responses API
    _latency(
        "held_back_ms",
        "held back",
        record="turn",
        # (a sum of conditions is their "or"; "> 0" keeps "&" an and of truth values)
        when=f"(function_calls > 0) & (({WHOLE_OUTPUT}) + {RELEASED_CALL} > 0) "
        f"& {FIRST_EVENT_AT_FIRST_TOKEN} & (first_event_ns > 0) "
        "& (first_output_ns >= first_event_ns)",
        value="first_output_ns - first_event_ns",
        stats=stats("count", "p50", "p99"),
        histogram="held_back",
        column=None,
        report=(("count", 0), ("p50", 1)),
        cli=("p50",),
        measured_only=True,
    ),
    # the first visible output (text or tool-call arguments) after a model's reasoning; without
    # reasoning the same stamp as TTFT's (docs/metrics.md §1.2)
    _latency(
        "ttfot_ms",
        "TTFOT",
        record="turn",
        when="(first_output_ns > 0) & (sent_ns > 0)",
        value="first_output_ns - sent_ns",
        histogram="ttfot",
        compare=("p50", "p99"),
        report=(("p50", 1), ("p99", 1)),
        cli=("p50",),
        gate=4,
        reasoning=True,
    ),
    Metric(
        "reasoning_tokens",
        "reasoning tok",
        "count",
        None,
        "reasoning_tokens",
        stats("p50", "p99", "mean"),
        record="turn",
        # per turn that reasoned: a run without reasoning has none (null), not a column of 0s
        when="reasoning_tokens > 0",
        value="reasoning_tokens",
        raw="count",
        histogram="reasoning_tokens",
        # the row files hold the field itself
        column=None,
        compare=("mean",),
        report=(("mean", 0), ("p99", 0)),
        report_table="throughput",
        cli=("mean",),
        reasoning=True,
    ),
    _latency(
        "ttfb_ms",
        "TTFB",
        record="turn",
        when="(first_event_ns > 0) & (sent_ns > 0)",
        value="first_event_ns - sent_ns",
        histogram="ttfb",
        compare=("p50",),
        report=(("p50", 1),),
        gate=5,
    ),
    # a new connection's setup, timed apart by the asyncio edges (docs/metrics.md §1.2): the
    # TCP connect, and the TLS handshake over it (https/wss only); reused connections give none.
    # In summary.json only: most runs reuse connections, so a table column would be mostly empty.
    _latency(
        "connect_ms",
        "TCP connect",
        record="turn",
        when="(tcp_connected_ns > 0) & (connect_start_ns > 0)",
        value="tcp_connected_ns - connect_start_ns",
        failed_too=True,
        histogram="connect",
    ),
    _latency(
        "tls_ms",
        "TLS",
        record="turn",
        when="(tls_done_ns > 0) & (tcp_connected_ns > 0)",
        value="tls_done_ns - tcp_connected_ns",
        failed_too=True,
        histogram="tls",
        report=(("p50", 1), ("p99", 1)),
        cli=("p50",),
        measured_only=True,
    ),
    # a compaction (rollout.compact_at_tokens): one POST /responses/compact, recorded as a turn
    # row with compaction=True; its count and latency, apart from the turns that sample output
    _latency(
        "compaction_ms",
        "compaction",
        record="turn",
        when="compaction & (sent_ns > 0) & (done_ns > 0)",
        value="done_ns - sent_ns",
        stats=stats("count", "p50", "p99", "mean"),
        column=None,
        histogram="compaction",
        report=(("count", 0), ("p50", 1)),
        cli=("count", "p50"),
        measured_only=True,
    ),
    _latency(
        "itl_ms",
        "ITL",
        record="turn",
        # (the row files hold no gaps, so no row from before the count is read here)
        when=f"output_arrivals >= {MIN_OUTPUT_ARRIVALS}",
        value="itl_ns",
        many=True,
        column=None,
        histogram="itl",
        compare=("p50",),
        report=(("p50", 2), ("p99", 2)),
    ),
    _latency(
        "turn_ms",
        "turn",
        record="turn",
        when="(done_ns > 0) & (sent_ns > 0)",
        value="done_ns - sent_ns",
        histogram="turn",
        compare=("p50", "p99"),
        report=(("p50", 1), ("p99", 1)),
        cli=("p50",),
        gate=2,
    ),
    _latency(
        "rollout_ms",
        "rollout",
        record="rollout",
        when="end_ns > 0",
        # from the intended start; a rollout with none (0) is measured from its actual start
        value="end_ns - intended_start_ns - (intended_start_ns == 0) * start_ns",
        histogram="rollout",
        column="latency_ms",
        paired=True,
        compare=("p50", "p99"),
        report=(("p50", 1), ("p99", 1)),
        cli=("p50", "p99"),
        gate=1,
    ),
    _latency(
        "rollout_uncorrected_ms",
        "uncorrected rollout",
        record="rollout",
        when="(end_ns > 0) & (start_ns > 0)",
        value="end_ns - start_ns",
        histogram="rollout_uncorrected",
        column="uncorrected_ms",
    ),
    _latency(
        "tpot_ms",
        "TPOT",
        record="turn",
        when=_DECODE_WHEN,
        value=f"(last_token_ns - {VISIBLE_START}) // ({VISIBLE_TOKENS} - 1)",
        histogram="tpot",
        report=(("p50", 3),),
        gate=6,
    ),
    _rate(
        "decode_tps",
        "decode TPS",
        "tok/s",
        "tps",
        stats("p50", "mean", prefix="decode_"),
        record="turn",
        when=_DECODE_WHEN,
        value=f"({VISIBLE_TOKENS} - 1) * 1e9 / (last_token_ns - {VISIBLE_START})",
        raw="tps",
        histogram="decode_tps",
        column="decode_tps",
        compare=("decode_p50",),
        report=(("decode_p50", 0), ("decode_mean", 0)),
        cli=("decode_p50",),
    ),
    # the fastest one stream was seen decoding, at least every valid per-turn decode rate so no
    # decode TPS column exceeds it (docs/metrics.md §1.2, "Burst TPS peak")
    _rate(
        "burst_tps",
        "burst TPS",
        "tok/s",
        "tps",
        stats("peak", prefix="burst_"),
        # decode_excluded: turns with output whose decode rate is not valid, computed here
        # because the peak reads the decode histogram too
        notes=("burst_peak_reason", "decode_excluded"),
        compare=("burst_peak",),
        report=(("burst_peak", 0),),
        cli=("burst_peak",),
    ),
    # all streams' output tokens per second: the fullest AGGREGATE_BUCKET_NS bucket inside the
    # active span (peak; the report's plot draws the same buckets; null with a reason when the
    # span holds no whole bucket), over the active span (mean)
    _rate(
        "aggregate_tps",
        "aggregate TPS",
        "tok/s",
        "tps",
        stats("mean", "peak", prefix="aggregate_"),
        notes=("aggregate_peak_reason",),
        compare=("aggregate_mean",),
        report=(("aggregate_mean", 0), ("aggregate_peak", 0)),
    ),
    # mean ms per turn by component (BREAKDOWN); the report shows it as its own table
    Metric("breakdown_ms", "latency breakdown", "ms", True, "breakdown_ms", ()),
    _latency(
        "schedule_lag_ms",
        "schedule lag",
        stats=stats("p50", "p99"),
        record="rollout",
        when="(start_ns > 0) & (intended_start_ns > 0)",
        value="(start_ns - intended_start_ns) * (start_ns > intended_start_ns)",
        failed_too=True,
        histogram="schedule_lag",
        report=(("p50", 2), ("p99", 2)),
        report_table="throughput",
    ),
    Metric("errors_by_kind", "errors", "count", True, "errors_by_kind", ()),
    # cached / input tokens as the server reported them, over the turns that reported input
    # (harness/metrics/cache.py), with the sums and the same ratio by turn index: how much of
    # each turn's prefix the server's cache served as the conversation grows
    _rate(
        "cached_ratio",
        "cached",
        "ratio",
        "cache",
        stats("ratio", prefix="cached_"),
        notes=("input_tokens", "cached_tokens", "by_turn"),
        report=(("cached_ratio", 2),),
        cli=("cached_ratio",),
    ),
    _signed(
        "measurement_error",
        "TTFT measured−modelled",
        when=" & (sim_ttft_ms >= 0)",
        value="first_token_ns - sent_ns - round(sim_ttft_ms * 1e6)",
        column="measurement_error_ms",
        report=(("p50", 2), ("p99", 2)),
        report_table="throughput",
    ),
    # how late the server wrote the first token (sim_timing.first_token_late_ms): the part of
    # measurement_error_ms that is the server's, on the same cores, not the client's
    # the record's own server_late_ms is the row files' column
    _signed(
        "server_late", "server late", " & known(server_late_ms)", "round(server_late_ms * 1e6)"
    ),
    # measurement_error_ms without the server's lateness and, on one host, without the time the
    # request waited before the server read it: what the client itself adds (stamping late,
    # its own event loop, the loopback hop) to the TTFT it measures
    _signed(
        "client_error",
        "TTFT client error",
        " & (sim_ttft_ms >= 0) & known(server_late_ms) & known(server_read_ms)",
        "first_token_ns - sent_ns - round(sim_ttft_ms * 1e6) - round(server_late_ms * 1e6)"
        " - round(server_read_ms * 1e6)",
        column="client_error_ms",
        report=(("p50", 2), ("p99", 2)),
        report_table="throughput",
        measured_only=True,
    ),
    # the share of rollouts (and of turns) that meet the scenario's slo: section
    # (harness/metrics/slo.py, docs/metrics.md §1.8); the gate reads ws.slo.rollout_attainment
    _rate(
        "slo_attainment",
        "SLO",
        "ratio",
        "slo",
        (Stat("rollout_attainment", "attainment"), Stat("turn_attainment", "turn attainment")),
        notes=(
            "rollouts",
            "good_rollouts",
            "rollout_attainment_ci95",
            "turns",
            "good_turns",
            "turn_attainment_ci95",
            "ci_reason",
            "thresholds",
        ),
        report=(("rollout_attainment", 3), ("turn_attainment", 3)),
        cli=("rollout_attainment",),
    ),
    # output tokens of good rollouts per second of the run's span (first rollout's intended
    # start to the last one's end), and good rollouts per second in the same group
    _rate(
        "goodput_tps",
        "goodput",
        "tok/s",
        "goodput",
        (Stat("goodput_tps", "tok/s"),),
        notes=("good_rollouts_per_s", "good_output_tokens", "span_s"),
        report=(("goodput_tps", 0),),
        cli=("goodput_tps",),
    ),
]

#: server-modelled parts of a turn (``sim_timing``, mean over turns that reported it), in
#: critical-path order: (``breakdown_ms`` key, TurnRecord field)
SERVER_BREAKDOWN = SIM_BREAKDOWN
#: client-side parts of a rollout, per turn: (``breakdown_ms`` key, RolloutRecord field)
CLIENT_BREAKDOWN = (("tool", "tool_ns"), ("client", "client_ns"), ("recovery", "recovery_ns"))


def get(name: str) -> Metric:
    for m in METRICS:
        if m.name == name:
            return m
    raise KeyError(f"no metric {name!r}; known: {', '.join(m.name for m in METRICS)}")


def per_record(kind: RecordKind | None = None) -> list[Metric]:
    return [m for m in METRICS if m.record is not None and (kind is None or m.record == kind)]


def gate_metrics() -> tuple[str, ...]:
    """Metrics the gate's regression and speedup rules may name (per-record samples)."""
    return tuple(m.name for m in sorted((m for m in METRICS if m.gate), key=lambda m: m.gate))


def compare_rows() -> Iterator[tuple[Metric, Stat]]:
    for m in METRICS:
        for key in m.compare:
            yield m, m.stat(key)


def measured(summary: Summary | Mapping[str, Any] | None, group: str) -> bool:
    """Whether any transport of a summary (its model or its document) has a value above 0 in
    ``group``."""
    blocks = (t.group(group) for t in (as_summary(summary) or Summary()).transports.values())
    values = (v for b in blocks if b is not None for v in b.to_json().values())
    return any(isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in values)


def shown(m: Metric, summary: Any, reasoned: bool) -> bool:
    """Whether the tables show metric ``m`` for ``summary`` (see ``reasoning``, ``measured_only``)."""
    if m.reasoning and not reasoned:
        return False
    return not m.measured_only or measured(summary, m.group)


def report_columns(table: str, summary: Any = None) -> Iterator[tuple[Metric, Stat, int]]:
    """The report table's columns; the ``reasoning`` metrics only when ``summary`` reasoned,
    the ``measured_only`` ones only when it measured them."""
    reasoned = has_reasoning(summary)
    for m in METRICS:
        if m.report_table == table and shown(m, summary, reasoned):
            for key, digits in m.report:
                yield m, m.stat(key), digits


def cli_columns(summary: Any = None) -> Iterator[tuple[Metric, Stat]]:
    """The console table's columns, chosen as :func:`report_columns` chooses them."""
    reasoned = has_reasoning(summary)
    for m in METRICS:
        if shown(m, summary, reasoned):
            for key in m.cli:
                yield m, m.stat(key)


# -- expressions ---------------------------------------------------------------------------------


class _OnRecord(ast.NodeTransformer):
    """Rewrite the record's field names ``x`` into ``rec.x`` (or, for the generated hot path,
    into a local ``f_x`` loaded once, with ``&`` between truth values made a short-circuit
    ``and``).  The one call allowed is round(): a record's ``round`` field is a name."""

    def __init__(self, kind: RecordKind, where: str, *, local: bool = False) -> None:
        self.kind = kind
        self.where = where
        self.local = local
        self.used: list[str] = []

    def visit_Call(self, node: ast.Call) -> ast.AST:
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name == KNOWN:
            if len(node.args) != 1 or not isinstance(node.args[0], ast.Name) or node.keywords:
                raise ValueError(f"{self.where}: known() takes one record field")
            arg = self.visit(node.args[0])
            if self.local:
                # The hot path: no call; NaN (a row read back from a table) is unknown too.
                test = (
                    f"({ast.unparse(arg)} is not None and {ast.unparse(arg)} == {ast.unparse(arg)})"
                )
                return ast.copy_location(ast.parse(test, mode="eval").body, node)
            node.args = [arg]
            return node
        if name != "round" or node.keywords:
            raise ValueError(f"{self.where}: the only calls allowed are round(x) and known(field)")
        node.args = [self.visit(a) for a in node.args]
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if self.local and isinstance(node.op, ast.BitAnd):
            return ast.copy_location(ast.BoolOp(ast.And(), [node.left, node.right]), node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id not in _FIELDS[self.kind]:
            raise ValueError(f"{self.where}: {node.id!r} is not a {self.kind} record field")
        if node.id not in self.used:
            self.used.append(node.id)
        if self.local:
            return ast.copy_location(ast.Name("f_" + node.id, ast.Load()), node)
        return ast.copy_location(
            ast.Attribute(ast.Name(_REC, ast.Load()), node.id, ast.Load()), node
        )


def _rewrite(m: Metric, expr: str, *, local: bool = False) -> tuple[str, list[str]]:
    assert m.record is not None
    on = _OnRecord(m.record, f"metric {m.name}", local=local)
    return ast.unparse(on.visit(ast.parse(expr, mode="eval"))), on.used


def _on_record(m: Metric, expr: str) -> str:
    return _rewrite(m, expr)[0]


_CODE: dict[tuple[str, str | None, str], Any] = {}


def _code(m: Metric, expr: str) -> Any:
    key = (m.name, m.record, expr)
    code = _CODE.get(key)
    if code is None:
        code = _CODE[key] = compile(_on_record(m, expr), f"<metric {m.name}>", "eval")
    return code


KNOWN = "known"


def _known(value: Any) -> Any:
    """``known(field)`` on one record (a bool) or on a table's column (a boolean Series)."""
    notna = getattr(value, "notna", None)
    if notna is not None:
        return notna()
    return value is not None and value == value


class _Columns:
    """A results table seen as one record whose fields are columns."""

    __slots__ = ("_df",)

    def __init__(self, df: Any) -> None:
        self._df = df

    def __getattr__(self, name: str) -> Any:
        return self._df[name]


def sample(m: Metric, rec: TurnRecord | RolloutRecord, *, failed_too: bool = False) -> Any:
    """The metric's value for one record, in ``m.unit``; None when it gives no sample.

    ``failed_too``: a failed record gives a value too (how long it ran before failing),
    for statistics that count failures with their times (Locust's).  A few µs a call
    (evaluates the expressions): once per record at most; the accumulator uses
    :func:`compile_adder`.
    """
    ok = TURN_OK if m.record == "turn" else ROLLOUT_OK
    if not (failed_too or m.failed_too or rec.status in ok) or not eval(
        _code(m, m.when), {_REC: rec, KNOWN: _known}
    ):
        return None
    value = eval(_code(m, m.value), {_REC: rec, KNOWN: _known})
    return [v / m.scale for v in value] if m.many else value / m.scale


def column(m: Metric, df: Any) -> Any:
    """The metric per row of a results table (pandas): a float column, NaN where no sample."""
    import pandas as pd  # heavy: only for the tables

    if m.many or m.record is None:
        raise ValueError(f"metric {m.name}: not computable from the row files")
    ok = TURN_OK if m.record == "turn" else ROLLOUT_OK
    mask = eval(_code(m, m.when), {_REC: _Columns(df), KNOWN: _known})
    if not m.failed_too:
        mask = mask & df["status"].isin(ok)
    rows = df[mask]
    out = pd.Series(float("nan"), index=df.index, dtype="float64")
    if len(rows):
        out[rows.index] = (
            eval(_code(m, m.value), {_REC: _Columns(rows), KNOWN: _known}).astype("float64")
            / m.scale
        )
    return out


# -- the accumulator's hot path ------------------------------------------------------------------


def recorder(m: Metric) -> str:
    """The :class:`~harness.metrics.hdr.Histogram` method that records one ``value``."""
    if m.many:
        return "record_many_ns"
    return "record_ns" if m.raw == "ns" else "record"


def compile_adder(
    metrics: Sequence[Metric], kind: RecordKind, means: Sequence[str] = ()
) -> Callable[..., bool]:
    """One function ``add(rec, hists, paired, sums=None, counts=None) -> ok`` recording
    ``metrics`` (all of ``kind``).

    ``hists[i]`` is the histogram of ``metrics[i]``; ``paired`` receives the value of
    the ``paired`` metric by (round, rollout_id).  Metrics that count failed records
    must come first: the function records them, then returns False for a failed
    record, else records the rest, adds each field of ``means`` that is >= 0 (the
    server's ``sim_timing``; -1: not reported) to ``sums[j]`` / ``counts[j]``, and
    returns True.  Generated once per table: a straight line of ``if`` statements,
    each field read once, no call or lookup per metric.
    """
    ok = TURN_OK if kind == "turn" else ROLLOUT_OK
    failed = [
        f"    if {' and '.join(f'{_REC}.status != {s!r}' for s in ok)}:",
        "        return False",
    ]
    body: list[str] = []
    used: list[str] = []
    last_when = None
    checked = False
    for i, m in enumerate(metrics):
        if m.record != kind:
            raise ValueError(f"metric {m.name}: a {m.record} metric, not {kind}")
        if not m.failed_too and not checked:
            body += failed
            checked = True
            last_when = None
        elif m.failed_too and checked:
            raise ValueError(f"metric {m.name}: metrics with failed_too must come first")
        when, w_used = _rewrite(m, m.when, local=True)
        value, v_used = _rewrite(m, m.value, local=True)
        for f in (*w_used, *v_used):
            if f not in used:
                used.append(f)
        # metrics under the same condition share one test (TPOT and decode TPS)
        if when != last_when:
            body.append(f"    if {when}:")
            last_when = when
        body.append(f"        v = {value}")
        body.append(f"        h[{i}].{recorder(m)}(v)")
        if m.paired:
            body.append(f"        paired[({_REC}.round, {_REC}.rollout_id)] = v")
    if not checked:
        body += failed
    for j, name in enumerate(means):
        if name not in _FIELDS[kind]:
            raise ValueError(f"mean of {name!r}: not a {kind} record field")
        body.append(f"    v = {_REC}.{name}")
        body.append("    if v >= 0:")
        body.append(f"        sums[{j}] += v")
        body.append(f"        counts[{j}] += 1")
    lines = [
        f"def add({_REC}, h, paired, sums=None, counts=None):",
        *(f"    f_{f} = {_REC}.{f}" for f in used),
        *body,
        "    return True",
    ]
    namespace: dict[str, Any] = {}
    exec(compile("\n".join(lines), f"<metrics: {kind}>", "exec"), namespace)
    add: Callable[..., bool] = namespace["add"]
    return add


def validate(metrics: Sequence[Metric] | None = None) -> None:
    """Reject a table the readers could not use (called by the tests and on import)."""
    seen: set[str] = set()
    for m in METRICS if metrics is None else metrics:
        if m.name in seen:
            raise ValueError(f"metric {m.name}: declared twice")
        seen.add(m.name)
        keys = {s.key for s in m.stats}
        for key in (*m.compare, *(k for k, _ in m.report), *m.cli):
            if key not in keys:
                raise ValueError(f"metric {m.name}: shows {key!r}, not one of its stats")
        for s in m.stats:
            if s.name not in PERCENTILES and s.name not in RUN_LEVEL_STATS:
                raise ValueError(f"metric {m.name}: unknown statistic {s.name!r}")
        if m.record is not None:
            _on_record(m, m.when)
            _on_record(m, m.value)
            if not m.histogram:
                raise ValueError(f"metric {m.name}: a per-record metric needs a histogram name")
        if m.gate and (m.column is None or m.lower_is_better is not True):
            raise ValueError(
                f"metric {m.name}: the gate needs per-record samples in the row files where "
                "lower is better"
            )


validate()
