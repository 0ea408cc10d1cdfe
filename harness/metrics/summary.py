"""Incremental run summary: records in, ``summary.json`` (docs/metrics.md §3) out.

What is measured, and where it goes in the summary, is the metric table
(:mod:`harness.metrics.definitions`); this module keeps the state and folds records in.

An :class:`Accumulator` sees every record once and keeps only what the summary
needs — histograms, counters, per-second token buckets and, for the paired
speedup, one integer per completed rollout — so memory does not grow with the
number of turns.  Accumulators of several processes merge (:meth:`Accumulator.merge`,
or :meth:`Accumulator.to_state` / :meth:`Accumulator.from_state` over the wire).

The choices the definitions leave open (failed turns, aggregate-TPS buckets, rollout latency
from the intended start, pairing by ``(round, rollout_id)``) are docs/metrics.md §1.2, *Choices*.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from harness.metrics import cache, honesty, subagents, token_counts
from harness.metrics import definitions as D
from harness.metrics import slo as _slo
from harness.metrics.hdr import Histogram, SignedHistogram
from harness.metrics.results_model import FORMAT_VERSION
from harness.metrics.sample_size import TOO_FEW_KEY, too_few_for
from harness.metrics.stats import paired_speedup
from harness.metrics.timeseries import AGGREGATE_BUCKET_NS
from harness.wire.transports import comparison_pairs
from harness.workload.records import BURST_WINDOW_NS, RolloutRecord, TurnRecord

#: the aggregate-TPS bucket (one constant with the report's plot)
_BUCKET_NS = AGGREGATE_BUCKET_NS


class _Layout:
    """The metric table as an accumulator uses it, fixed when the accumulator is made.

    ``metrics`` are the per-record metrics, one histogram each in this order; the
    two adders (turn, rollout) are :func:`~harness.metrics.definitions.compile_adder`
    functions over that kind's metrics, ``parts[kind]`` the histogram indexes they
    record into, in their order.
    """

    def __init__(self, table: tuple[D.Metric, ...]) -> None:
        self.table = table
        self.metrics = tuple(m for m in table if m.per_record)
        self.index = {m.name: i for i, m in enumerate(self.metrics)}
        self.parts: dict[str, list[int]] = {}
        self.adders: dict[str, Any] = {}
        for kind in ("turn", "rollout"):
            # failed_too metrics first: the adder records them before it checks the status
            idx = sorted(
                (i for i, m in enumerate(self.metrics) if m.record == kind),
                key=lambda i: not self.metrics[i].failed_too,
            )
            self.parts[kind] = idx
            means = [f for _, f in D.SERVER_BREAKDOWN] if kind == "turn" else []
            self.adders[kind] = D.compile_adder([self.metrics[i] for i in idx], kind, means)
        paired = [m for m in self.metrics if m.paired]
        if len(paired) != 1 or paired[0].record != "rollout":
            raise ValueError("metric table: expected exactly one paired rollout metric")

    def new_histograms(self) -> list[Any]:
        return [
            SignedHistogram() if m.signed else Histogram("us" if m.raw == "ns" else "tps")
            for m in self.metrics
        ]


#: one layout per table (a test may swap the table), shared by that table's accumulators
_layout = functools.cache(_Layout)


_N_SIM = len(D.SERVER_BREAKDOWN)
_new_honesty, _new_token_counts = honesty.new_counts, token_counts.new_counts
_new_subagents = subagents.new_counts


@dataclass(slots=True, eq=False)
class _TransportStats:
    """Everything kept for one transport."""

    layout: _Layout
    #: one histogram per metric of ``layout``; ``turn_h``/``rollout_h``: the adders' views
    hists: list[Any] = field(init=False)
    turns: int = 0
    turn_errors: int = 0
    rollouts: int = 0
    rollout_errors: int = 0
    turn_h: list[Any] = field(init=False)
    rollout_h: list[Any] = field(init=False)
    #: the most tokens in a burst window, over responses that fill the window
    burst_tokens_max: int = 0
    #: successful turns with >= 2 output tokens: the decode TPS candidates
    decode_candidates: int = 0
    agg_buckets: dict[int, float] = field(default_factory=dict)
    agg_tokens: int = 0
    agg_first_ns: int | None = None
    agg_last_ns: int | None = None
    sim_sum: list[float] = field(default_factory=lambda: [0.0] * _N_SIM)
    sim_n: list[int] = field(default_factory=lambda: [0] * _N_SIM)
    tool_ns: int = 0
    client_ns: int = 0
    recovery_ns: int = 0
    rollout_turns: int = 0
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    rollout_latency_ns: dict[tuple[int, int], int] = field(default_factory=dict)
    honesty: dict[str, int] = field(default_factory=_new_honesty)
    #: per turn index: [turns that reported input, input tokens, cached tokens]
    cache_by_turn: list[list[int]] = field(default_factory=list)
    #: every output token the turns reported, failed turns included (the live export's)
    output_tokens: int = 0
    token_counts: dict[str, int] = field(default_factory=_new_token_counts)
    subagents: dict[str, Any] = field(default_factory=_new_subagents)
    # SLO attainment and goodput (harness/metrics/slo.py), per rollout (round, id) ->
    # [a turn missed (0/1), output tokens, the rollout record's verdict: -1 not seen yet,
    # 0 failed or too slow, 1 within]; judged when the summary is made, so a rollout's
    # turns and record may reach different accumulators that merge later
    slo_rollouts: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    #: rollouts judged when their record arrived (``fold_rollouts``): [rollouts within
    #: the SLO, their output tokens]
    slo_folded: list[int] = field(default_factory=lambda: [0, 0])
    slo_turns: int = 0
    slo_good_turns: int = 0
    slo_first_ns: int | None = None
    slo_last_ns: int | None = None

    def __post_init__(self) -> None:
        self.set_histograms(self.layout.new_histograms())

    def set_histograms(self, hists: list[Any]) -> None:
        self.hists = hists
        parts = self.layout.parts
        self.turn_h = [hists[i] for i in parts["turn"]]
        self.rollout_h = [hists[i] for i in parts["rollout"]]

    def hist(self, name: str) -> Any:
        return self.hists[self.layout.index[name]]

    def histograms(self) -> dict[str, Histogram]:
        out: dict[str, Histogram] = {}
        for m, h in zip(self.layout.metrics, self.hists, strict=True):
            if m.signed:
                out[m.histogram + "_pos"] = h.pos
                out[m.histogram + "_neg"] = h.neg
            else:
                out[m.histogram] = h
        return out

    def to_state(self) -> dict[str, Any]:
        """Every field but the histograms' views, in JSON (tuple keys as ``[round, id, value]``
        rows); the histograms encoded."""
        out: dict[str, Any] = {"histograms": {m: h.encode() for m, h in self.histograms().items()}}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in _ROLLOUT_KEYED:
                value = [[r, i, v] for (r, i), v in value.items()]
            elif f.name == "agg_buckets":
                value = list(value.items())
            if f.name not in _VIEWS:
                out[f.name] = value
        return out

    def load_state(self, d: Mapping[str, Any]) -> None:
        """The fields of :meth:`to_state` (of this version of loopbench) back."""
        self.set_histograms(self.layout.new_histograms())
        for name, h in self.histograms().items():
            h.merge(Histogram.decode(d["histograms"][name]))
        for name, value in d.items():
            if name in _ROLLOUT_KEYED:
                value = {(r, i): v for r, i, v in value}
            elif name == "agg_buckets":
                value = {int(k): float(v) for k, v in value}
            if name != "histograms":
                setattr(self, name, value)

    def merge(self, o: _TransportStats) -> None:
        for name in _SUMMED:
            setattr(self, name, getattr(self, name) + getattr(o, name))
        for h, oh in zip(self.hists, o.hists, strict=True):
            h.merge(oh)
        self.burst_tokens_max = max(self.burst_tokens_max, o.burst_tokens_max)
        for sec, tokens in o.agg_buckets.items():
            self.agg_buckets[sec] = self.agg_buckets.get(sec, 0.0) + tokens
        self.agg_first_ns = _opt(min, self.agg_first_ns, o.agg_first_ns)
        self.agg_last_ns = _opt(max, self.agg_last_ns, o.agg_last_ns)
        for i in range(_N_SIM):
            self.sim_sum[i] += o.sim_sum[i]
            self.sim_n[i] += o.sim_n[i]
        for kind, n in o.errors_by_kind.items():
            self.errors_by_kind[kind] = self.errors_by_kind.get(kind, 0) + n
        for counts, theirs in ((self.honesty, o.honesty), (self.token_counts, o.token_counts)):
            for counter in counts:
                counts[counter] += theirs.get(counter, 0)
        cache.merge(self.cache_by_turn, o.cache_by_turn)
        subagents.merge(self.subagents, o.subagents)
        self.slo_first_ns = _opt(min, self.slo_first_ns, o.slo_first_ns)
        self.slo_last_ns = _opt(max, self.slo_last_ns, o.slo_last_ns)
        self.slo_folded = [a + b for a, b in zip(self.slo_folded, o.slo_folded, strict=True)]
        for key, (missed, tokens, verdict) in o.slo_rollouts.items():
            mine = self.slo_rollouts.setdefault(key, [0, 0, -1])
            mine[0] |= missed
            mine[1] += tokens
            mine[2] = max(mine[2], verdict)
        clash = self.rollout_latency_ns.keys() & o.rollout_latency_ns.keys()
        if clash:
            rnd, rid = min(clash)
            raise ValueError(
                f"accumulator merge: rollout {rid} (round {rnd}) was measured by both accumulators"
            )
        self.rollout_latency_ns.update(o.rollout_latency_ns)


#: fields of _TransportStats keyed by (round, rollout_id)
_ROLLOUT_KEYED = ("rollout_latency_ns", "slo_rollouts")
#: fields of _TransportStats that are the histograms or views of them (not in the state as such)
_VIEWS = ("layout", "hists", "turn_h", "rollout_h")

#: the counters of _TransportStats that merge by adding
_SUMMED = (
    "turns",
    "turn_errors",
    "rollouts",
    "rollout_errors",
    "decode_candidates",
    "agg_tokens",
    "tool_ns",
    "client_ns",
    "recovery_ns",
    "rollout_turns",
    "output_tokens",
    "slo_turns",
    "slo_good_turns",
)


class Accumulator:
    """Folds turn and rollout records into histograms and counters, per transport.

    ``warmup_rollouts``: records of rollouts with ``rollout_id`` below it are
    ignored.  ``burst_window_s``: the sliding window the transport used for
    ``TurnRecord.burst_tokens_max``.  ``t0_ns``: origin of the per-second
    aggregate-TPS buckets (the run's start on the records' clock), so buckets of
    processes with different monotonic clocks line up when merged.  ``slo``: the
    thresholds of the scenario's ``slo:`` section (field -> ms, the ones set), which
    the summary's attainment and goodput judge records by.  ``fold_rollouts``: every
    turn of a rollout reaches this accumulator before the rollout's record (one process
    runs whole rollouts), so a rollout's SLO verdict is folded into two counters when
    its record arrives instead of kept per rollout until the summary (~250 bytes a
    rollout, which grew a long run's memory without bound: docs/reliability.md, *Soak*).
    """

    def __init__(
        self,
        *,
        warmup_rollouts: int = 0,
        burst_window_s: float = BURST_WINDOW_NS / 1e9,
        t0_ns: int = 0,
        slo: Mapping[str, float] | None = None,
        fold_rollouts: bool = False,
    ) -> None:
        if burst_window_s <= 0:
            raise ValueError(f"burst_window_s: expected a positive number, got {burst_window_s}")
        self.warmup_rollouts = warmup_rollouts
        self.burst_window_s = burst_window_s
        self._burst_window_ns = round(burst_window_s * 1e9)
        self.t0_ns = t0_ns
        self._by_transport: dict[str, _TransportStats] = {}
        self._layout = layout = _layout(tuple(D.METRICS))
        self._add_turn = layout.adders["turn"]
        self._add_rollout = layout.adders["rollout"]
        self.slo = dict(slo or {})
        self.fold_rollouts = fold_rollouts
        self._turn_meets = _slo.compile_turn_check(self.slo)
        self._rollout_meets = _slo.compile_rollout_check(self.slo)

    def _stats(self, transport: str) -> _TransportStats:
        stats = self._by_transport.get(transport)
        if stats is None:
            stats = self._by_transport[transport] = _TransportStats(self._layout)
        return stats

    @property
    def transports(self) -> list[str]:
        return list(self._by_transport)

    # -- records -----------------------------------------------------------------------------

    def add_turn(self, rec: TurnRecord) -> None:
        if rec.rollout_id < self.warmup_rollouts:
            return
        t = self._stats(rec.transport)
        t.turns += 1
        first = rec.first_token_ns
        last = rec.last_token_ns
        n_out = rec.output_tokens
        t.output_tokens += n_out
        if rec.input_tokens > 0 and not rec.compaction:
            cache.add(t.cache_by_turn, rec.turn_index, rec.input_tokens, rec.cached_tokens)
        if n_out > 0 and first:
            self._spread_tokens(t, first - self.t0_ns, max(first, last) - self.t0_ns, n_out)
        # a response shorter than the window cannot fill it: its count is no rate; a turn whose
        # usage failed the output-token check (docs/metrics.md §1.5) sets no peak either; the
        # window is filled by the visible output, which the burst counts (not the reasoning)
        if (
            rec.burst_tokens_max > t.burst_tokens_max
            and not rec.decode_implausible
            and D.fills_burst_window(
                D.visible_start(first, rec.first_output_ns), last, self._burst_window_ns
            )
        ):
            t.burst_tokens_max = rec.burst_tokens_max
        # a compaction is judged by the rollout's latency, not as a turn of the model
        met = rec.status in D.TURN_OK
        if not rec.compaction:
            met = self._turn_meets(rec)
            t.slo_turns += 1
            t.slo_good_turns += met
        pending = t.slo_rollouts.setdefault((rec.round, rec.rollout_id), [0, 0, -1])
        if not met:
            pending[0] = 1
        pending[1] += n_out
        if not self._add_turn(rec, t.turn_h, t.rollout_latency_ns, t.sim_sum, t.sim_n):
            t.turn_errors += 1
            kind = rec.error_kind or rec.status
            t.errors_by_kind[kind] = t.errors_by_kind.get(kind, 0) + 1
        else:
            honesty.add(t.honesty, rec)
            token_counts.add(t.token_counts, rec)
            if n_out - rec.reasoning_tokens >= 2:
                t.decode_candidates += 1

    def _spread_tokens(self, t: _TransportStats, a: int, b: int, n: int) -> None:
        """Add ``n`` tokens emitted uniformly over [a, b] ns to the aggregate-TPS buckets."""
        buckets = t.agg_buckets
        t.agg_tokens += n
        t.agg_first_ns = _opt(min, t.agg_first_ns, a)
        t.agg_last_ns = _opt(max, t.agg_last_ns, b)
        s = a // _BUCKET_NS
        e = b // _BUCKET_NS
        if s == e:
            buckets[s] = buckets.get(s, 0.0) + n
            return
        per_ns = n / (b - a)
        for k in range(s, e + 1):
            lo = max(a, k * _BUCKET_NS)
            hi = min(b, (k + 1) * _BUCKET_NS)
            if hi > lo:
                buckets[k] = buckets.get(k, 0.0) + per_ns * (hi - lo)

    def add_rollout(self, rec: RolloutRecord) -> None:
        if rec.rollout_id < self.warmup_rollouts:
            return
        t = self._stats(rec.transport)
        t.rollouts += 1
        t.tool_ns += rec.tool_ns
        t.client_ns += rec.client_ns
        t.recovery_ns += rec.recovery_ns
        t.rollout_turns += rec.turns
        subagents.add(t.subagents, rec)
        judged = t.slo_rollouts.setdefault((rec.round, rec.rollout_id), [0, 0, -1])
        judged[2] = int(self._rollout_meets(rec))
        if self.fold_rollouts:
            missed, tokens, verdict = t.slo_rollouts.pop((rec.round, rec.rollout_id))
            if verdict == 1 and not missed:
                t.slo_folded[0] += 1
                t.slo_folded[1] += tokens
        start = rec.intended_start_ns or rec.start_ns
        if start > 0:
            t.slo_first_ns = _opt(min, t.slo_first_ns, start)
        if rec.end_ns > 0:
            t.slo_last_ns = _opt(max, t.slo_last_ns, rec.end_ns)
        if not self._add_rollout(rec, t.rollout_h, t.rollout_latency_ns):
            t.rollout_errors += 1
            if not rec.errors:
                kind = "rollout:" + (rec.error_kind or rec.status)
                t.errors_by_kind[kind] = t.errors_by_kind.get(kind, 0) + 1

    # -- combining ---------------------------------------------------------------------------

    def merge(self, other: Accumulator) -> Accumulator:
        """Fold ``other`` (e.g. another process's accumulator) into this one; returns self."""
        for key in ("warmup_rollouts", "burst_window_s"):
            mine, theirs = getattr(self, key), getattr(other, key)
            if theirs != mine:
                raise ValueError(f"accumulator merge: expected {key}={mine}, got {theirs}")
        if other.slo != self.slo:
            raise ValueError(
                f"accumulator merge: expected the SLO thresholds {self.slo}, got {other.slo}"
            )
        if other._layout is not self._layout:
            raise ValueError("accumulator merge: the two accumulators use different metric tables")
        for name, stats in other._by_transport.items():
            self._stats(name).merge(stats)
        return self

    def histograms(self) -> dict[tuple[str, str], Histogram]:
        """``(transport, histogram) -> Histogram`` for every per-record metric of the table
        (µs or tokens/s); a signed metric gives ``<name>_pos`` and ``<name>_neg``."""
        return {
            (name, metric): hist
            for name, stats in self._by_transport.items()
            for metric, hist in stats.histograms().items()
        }

    def live(self, metrics: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
        """Per transport, the counters the live export shows and a copy of the bucket counts
        of the per-record ``metrics`` (names of the table) as ``(unit, counts)``.

        Safe to call from another thread while the run adds records (CPython): every copy
        is one list copy done in C with the GIL held, so a counter may be a record ahead of
        another but no value is torn.  Costs the caller, not the run: a copy of about
        22,000 integers per histogram.
        """
        out: dict[str, dict[str, Any]] = {}
        for name, t in list(self._by_transport.items()):
            input_tokens, cached_tokens = cache.totals(list(t.cache_by_turn))
            out[name] = {
                "turns": t.turns,
                "turn_errors": t.turn_errors,
                "rollouts": t.rollouts,
                "rollout_errors": t.rollout_errors,
                "errors_by_kind": dict(t.errors_by_kind),
                "input_tokens": input_tokens,
                "cached_tokens": cached_tokens,
                "output_tokens": t.output_tokens,
                "histograms": {m: t.hist(m).snapshot() for m in metrics},
            }
        return out

    # -- wire form ---------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot, for shipping an accumulator between processes."""
        return {
            "format_version": FORMAT_VERSION,
            "warmup_rollouts": self.warmup_rollouts,
            "burst_window_s": self.burst_window_s,
            "t0_ns": self.t0_ns,
            "slo": self.slo,
            "transports": {name: t.to_state() for name, t in self._by_transport.items()},
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Accumulator:
        if state.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"accumulator state: format_version: expected {FORMAT_VERSION}, "
                f"got {state.get('format_version')!r}"
            )
        acc = cls(
            warmup_rollouts=int(state["warmup_rollouts"]),
            burst_window_s=float(state["burst_window_s"]),
            t0_ns=int(state["t0_ns"]),
            slo={str(k): float(v) for k, v in (state.get("slo") or {}).items()},
        )
        for name, d in state["transports"].items():
            acc._stats(name).load_state(d)
        return acc

    # -- summary -----------------------------------------------------------------------------

    def summary(
        self,
        run_id: str,
        valid: bool = True,
        invalid_reasons: Sequence[str] = (),
        comparisons: Sequence[tuple[str, str]] | None = None,
        *,
        n_boot: int = 2000,
        seed: int = 0,
        hints: bool = False,
    ) -> dict[str, Any]:
        """The ``summary.json`` document (docs/metrics.md §3); missing values are ``None``.

        ``hints``: the run sent loopbench's ``loopbench.*`` metadata hints (the manifest's
        ``client_options.hints``), so outputs far beyond the plan mean the endpoint ignored them.

        ``comparisons``: ``(baseline, candidate)`` pairs; ``None`` compares the
        baseline of :func:`harness.wire.transports.comparison_pairs`
        with every other one.  Pairs where either side has no data are skipped.
        """
        if comparisons is None:
            comparisons = comparison_pairs(self.transports)
        tokens = {
            name: token_counts.summary(t.token_counts) for name, t in self._by_transport.items()
        }
        out = {
            "format_version": FORMAT_VERSION,
            "run_id": run_id,
            "valid": bool(valid),
            "invalid_reasons": list(invalid_reasons),
            "transports": {
                name: self._transport_summary(t) for name, t in self._by_transport.items()
            },
            "comparisons": [
                c
                for base, cand in comparisons
                if (c := self._comparison(base, cand, n_boot=n_boot, seed=seed)) is not None
            ],
            # protocol honesty checks (docs/metrics.md §1.5): reported, not a reason for invalidity
            "honesty": {name: dict(t.honesty) for name, t in self._by_transport.items()},
            # planned vs server-reported tokens (docs/metrics.md; added in place, no format
            # bump: readers .get() it)
            "tokens": tokens,
            "hint_ignored": token_counts.hint_ignored(tokens, hints=hints),
            "warnings": [
                line
                for name, t in self._by_transport.items()
                for line in honesty.warnings(name, t.honesty)
            ],
        }
        # rollouts with sub-agents (docs/metrics.md §1.7): only in runs that had some,
        # added in place like "tokens" (readers .get() it)
        forked = {
            name: figures
            for name, t in self._by_transport.items()
            if (figures := subagents.summary(t.subagents)) is not None
        }
        if forked:
            out["subagents"] = forked
        return out

    def _transport_summary(self, t: _TransportStats) -> dict[str, Any]:
        out: dict[str, Any] = {
            "turns": {"count": t.turns, "errors": t.turn_errors},
            "rollouts": {"count": t.rollouts, "errors": t.rollout_errors},
        }
        too_few: dict[str, int] = {}
        for m in self._layout.table:
            group = out.setdefault(m.group, {})
            if m.per_record:
                hist = t.hist(m.name)
                for s in m.stats:
                    if s.name == "count":
                        # how many records the metric took (compactions): an integer, no rate
                        group[s.key] = hist.count
                        continue
                    group[s.key] = _r(_statistic(hist, m, s.name))
                    if hist.count and too_few_for(s.name, hist.count):
                        too_few[f"{m.group}.{s.key}"] = hist.count
            else:
                group.update(self._run_level(m, t))
        # statistic path -> its sample count, for each statistic computed from fewer samples
        # than it needs (docs/metrics.md §1.4); renderers mark those values
        out[TOO_FEW_KEY] = too_few
        return out

    def _run_level(self, m: D.Metric, t: _TransportStats) -> dict[str, Any]:
        """The values of a run-level metric of the table (computed from the stats' state)."""
        if m.name == "burst_tps":
            # no decode TPS column may exceed the peak: it covers every valid per-turn rate
            # (the histogram's max, the same values its p50 and mean come from)
            decode = t.hist("decode_tps")
            if not t.burst_tokens_max:
                peak, reason = None, D.BURST_NA_REASON
            else:
                peak = t.burst_tokens_max / self.burst_window_s
                if decode.count:
                    peak = max(peak, decode.max)
                reason = None
            return {
                "burst_peak": _r(peak) if peak is not None else None,
                "burst_peak_reason": reason,
                # turns with output whose rate is not valid (too short, or flagged)
                "decode_excluded": t.decode_candidates - decode.count,
            }
        if m.name == "aggregate_tps":
            # no stamp: no token, so no bucket either
            first, last = t.agg_first_ns or 0, t.agg_last_ns or 0
            span_ns = last - first
            # a bucket the active span only partly covers is diluted by the idle rest (a 0.4 s
            # run would peak below its own mean): the peak is over whole buckets only
            whole = [
                tokens / (_BUCKET_NS / 1e9)
                for k, tokens in t.agg_buckets.items()
                if k * _BUCKET_NS >= first and (k + 1) * _BUCKET_NS <= last
            ]
            return {
                "aggregate_mean": _r(t.agg_tokens * 1e9 / span_ns) if span_ns > 0 else None,
                "aggregate_peak": _r(max(whole)) if whole else None,
                "aggregate_peak_reason": None
                if whole or not t.agg_buckets
                else D.aggregate_na_reason(span_ns),
            }
        if m.name == "breakdown_ms":
            breakdown: dict[str, float | None] = {
                key: _r(t.sim_sum[i] / t.sim_n[i]) if t.sim_n[i] else None
                for i, (key, _) in enumerate(D.SERVER_BREAKDOWN)
            }
            per_turn = t.rollout_turns
            for key, total in zip(
                (k for k, _ in D.CLIENT_BREAKDOWN),
                (t.tool_ns, t.client_ns, t.recovery_ns),
                strict=True,
            ):
                breakdown[key] = _r(total / per_turn / 1e6) if per_turn else None
            return breakdown
        if m.name == "errors_by_kind":
            return dict(sorted(t.errors_by_kind.items()))
        if m.name == "cached_ratio":
            return cache.group(t.cache_by_turn)
        if m.name == "slo_attainment":
            good = t.slo_folded[0] + sum(
                1 for missed, _, v in t.slo_rollouts.values() if v == 1 and not missed
            )
            return _slo.attainment_group(t.rollouts, good, t.slo_turns, t.slo_good_turns, self.slo)
        if m.name == "goodput_tps":
            span = (
                t.slo_last_ns - t.slo_first_ns
                if t.slo_first_ns is not None and t.slo_last_ns is not None
                else 0
            )
            tokens = [n for missed, n, v in t.slo_rollouts.values() if v == 1 and not missed]
            good, good_tokens = t.slo_folded
            return _slo.goodput_group(good + len(tokens), good_tokens + sum(tokens), span)
        raise ValueError(f"metric {m.name}: run-level, but the accumulator does not compute it")

    def _comparison(self, base: str, cand: str, *, n_boot: int, seed: int) -> dict[str, Any] | None:
        b = self._by_transport.get(base)
        c = self._by_transport.get(cand)
        if b is None or c is None:
            return None
        has_rollouts = bool(b.rollout_latency_ns) and bool(c.rollout_latency_ns)
        b_ttft, c_ttft = b.hist("ttft_ms"), c.hist("ttft_ms")
        has_ttft = b_ttft.count > 0 and c_ttft.count > 0
        if not (has_rollouts or has_ttft):
            return None
        out: dict[str, Any] = {
            "baseline": base,
            "candidate": cand,
            "rollout_speedup": None,
            "rollout_speedup_ci95": [None, None],
            "rollout_latency_reduction_pct": None,
            "ttft_p50_reduction_pct": None,
            "paired": False,
            # added in place, no format bump: readers of older summaries .get() them
            "rollout_pairs": 0,
            "rollout_speedup_ci_reason": None,
        }
        if has_rollouts:
            paired = b.rollout_latency_ns.keys() == c.rollout_latency_ns.keys()
            # paired: both sides in one order of the rollouts; else each side as it came
            b_keys = sorted(b.rollout_latency_ns) if paired else list(b.rollout_latency_ns)
            c_keys = b_keys if paired else list(c.rollout_latency_ns)
            res = paired_speedup(
                [b.rollout_latency_ns[k] / 1e6 for k in b_keys],
                [c.rollout_latency_ns[k] / 1e6 for k in c_keys],
                paired=paired,
                n_boot=n_boot,
                seed=seed,
            )
            out["rollout_speedup"] = _r(res.median_ratio, 4)
            if res.ci95 is not None:
                out["rollout_speedup_ci95"] = [_r(res.ci95[0], 4), _r(res.ci95[1], 4)]
            out["rollout_latency_reduction_pct"] = _r(res.reduction_pct)
            out["paired"] = res.paired
            out["rollout_pairs"] = res.n
            out["rollout_speedup_ci_reason"] = res.ci_reason
        if has_ttft:
            b50 = b_ttft.percentile(50)
            c50 = c_ttft.percentile(50)
            if b50 > 0:
                out["ttft_p50_reduction_pct"] = _r((1.0 - c50 / b50) * 100.0)
        return out


def _opt(pick: Any, a: int | None, b: int | None) -> int | None:
    """``pick(a, b)`` of two optional stamps (min or max), the one given when only one is."""
    if a is None:
        return b
    return a if b is None else pick(a, b)


def _r(x: float, ndigits: int = 3) -> float | None:
    """Round for the JSON document (ms to the µs); NaN/inf become None."""
    if x is None or not math.isfinite(x):
        return None
    return round(float(x), ndigits)


def _statistic(hist: Any, m: D.Metric, name: str) -> float:
    """Statistic ``name`` of a per-record metric's histogram, in the metric's unit."""
    if m.signed:
        return float(hist.percentile_ms(D.PERCENTILES[name]))
    # histograms keep ns metrics in µs: 1000 of them to the ms
    div = 1000.0 if m.raw == "ns" else 1.0
    if name == "mean":
        return float(hist.mean / div)
    if name == "peak":
        return float(hist.max / div)
    return float(hist.percentile(D.PERCENTILES[name]) / div)
