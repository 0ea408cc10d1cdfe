"""Incremental run summary: records in, ``summary.json`` (docs/metrics.md §3) out.

An :class:`Accumulator` sees every record once and keeps only what the summary
needs — histograms, counters, per-second token buckets and, for the paired
speedup, one integer per completed rollout — so memory does not grow with the
number of turns.  Accumulators of several processes merge (:meth:`Accumulator.merge`,
or :meth:`Accumulator.to_state` / :meth:`Accumulator.from_state` over the wire).

Choices the definitions in docs/metrics.md §1 leave open:

* Latency metrics (TTFT, TTFB, turn, ITL, TPOT, decode TPS, breakdown,
  measurement error) come from successful turns (``status`` completed or
  incomplete); failed turns are counted in ``turns.errors`` and
  ``errors_by_kind`` (keyed by ``error_kind``, else ``status``).  Rollout
  failures with no failed turn are counted there too, as ``rollout:<kind>``.
* Aggregate TPS counts every output token received, failed turns included: a
  token that was streamed loaded the engine.  Each turn's tokens are spread
  uniformly over its first..last token interval and added to one-second
  buckets (relative to ``t0_ns``); ``aggregate_peak`` is the fullest bucket,
  ``aggregate_mean`` is total tokens over the active span (first token of the
  run to last token), which unlike a mean of buckets is not diluted by the
  partially filled first and last seconds.
* Rollout latency is measured from the intended start; rollouts with no
  intended start (0) fall back to the actual start.  ``rollout_uncorrected_ms``
  is measured from the actual start (what a coordinated-omission-prone tool
  would report); the gap between the two is the schedule lag.
* Rollouts pair across transports by ``(round, rollout_id)``; a comparison is
  ``paired`` when both transports completed exactly the same set, else it falls
  back to an unpaired ratio of medians.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harness.metrics.hdr import Histogram, SignedHistogram
from harness.metrics.stats import paired_speedup, unpaired_speedup
from harness.metrics.timeseries import buckets_to_series
from harness.wire.transports import TRANSPORT_NAMES
from harness.workload.records import RolloutRecord, TurnRecord

FORMAT_VERSION = 1

#: transports in the order a default comparison picks its baseline: the registry's
TRANSPORT_ORDER = TRANSPORT_NAMES

_NS_PER_S = 1_000_000_000
_SIM_FIELDS = (
    ("api_pre", "sim_api_pre_ms"),
    ("api_queue", "sim_api_queue_ms"),
    ("engine_queue", "sim_engine_queue_ms"),
    ("prefill", "sim_prefill_ms"),
    ("decode", "sim_decode_ms"),
    ("api_post", "sim_api_post_ms"),
)
#: latency histograms (µs) per transport, by the name used in histograms() and file names
LATENCY_METRICS = (
    "ttft",
    "ttfb",
    "itl",
    "turn",
    "rollout",
    "rollout_uncorrected",
    "tpot",
    "schedule_lag",
)


class _TransportStats:
    """Everything kept for one transport."""

    __slots__ = (
        "agg_buckets",
        "agg_first_ns",
        "agg_last_ns",
        "agg_tokens",
        "burst_tokens_max",
        "client_ns",
        "decode_tps",
        "errors_by_kind",
        "itl",
        "measurement_error",
        "recovery_ns",
        "rollout",
        "rollout_errors",
        "rollout_latency_ns",
        "rollout_turns",
        "rollout_uncorrected",
        "rollouts",
        "schedule_lag",
        "sim_n",
        "sim_sum",
        "tool_ns",
        "tpot",
        "ttfb",
        "ttft",
        "turn",
        "turn_errors",
        "turns",
    )

    def __init__(self) -> None:
        self.turns = 0
        self.turn_errors = 0
        self.rollouts = 0
        self.rollout_errors = 0
        self.ttft = Histogram()
        self.ttfb = Histogram()
        self.itl = Histogram()
        self.turn = Histogram()
        self.rollout = Histogram()
        self.rollout_uncorrected = Histogram()
        self.tpot = Histogram()
        self.schedule_lag = Histogram()
        self.decode_tps = Histogram("tps")
        self.measurement_error = SignedHistogram()
        self.burst_tokens_max = 0
        self.agg_buckets: dict[int, float] = {}
        self.agg_tokens = 0
        self.agg_first_ns: int | None = None
        self.agg_last_ns: int | None = None
        self.sim_sum = [0.0] * len(_SIM_FIELDS)
        self.sim_n = [0] * len(_SIM_FIELDS)
        self.tool_ns = 0
        self.client_ns = 0
        self.recovery_ns = 0
        self.rollout_turns = 0
        self.errors_by_kind: dict[str, int] = {}
        self.rollout_latency_ns: dict[tuple[int, int], int] = {}

    def histograms(self) -> dict[str, Histogram]:
        out = {name: getattr(self, name) for name in LATENCY_METRICS}
        out["decode_tps"] = self.decode_tps
        out["measurement_error_pos"] = self.measurement_error.pos
        out["measurement_error_neg"] = self.measurement_error.neg
        return out

    def merge(self, o: _TransportStats) -> None:
        self.turns += o.turns
        self.turn_errors += o.turn_errors
        self.rollouts += o.rollouts
        self.rollout_errors += o.rollout_errors
        for name in LATENCY_METRICS:
            getattr(self, name).merge(getattr(o, name))
        self.decode_tps.merge(o.decode_tps)
        self.measurement_error.merge(o.measurement_error)
        self.burst_tokens_max = max(self.burst_tokens_max, o.burst_tokens_max)
        for sec, tokens in o.agg_buckets.items():
            self.agg_buckets[sec] = self.agg_buckets.get(sec, 0.0) + tokens
        self.agg_tokens += o.agg_tokens
        if o.agg_first_ns is not None:
            self.agg_first_ns = (
                o.agg_first_ns
                if self.agg_first_ns is None
                else min(self.agg_first_ns, o.agg_first_ns)
            )
        if o.agg_last_ns is not None:
            self.agg_last_ns = (
                o.agg_last_ns if self.agg_last_ns is None else max(self.agg_last_ns, o.agg_last_ns)
            )
        for i in range(len(_SIM_FIELDS)):
            self.sim_sum[i] += o.sim_sum[i]
            self.sim_n[i] += o.sim_n[i]
        self.tool_ns += o.tool_ns
        self.client_ns += o.client_ns
        self.recovery_ns += o.recovery_ns
        self.rollout_turns += o.rollout_turns
        for kind, n in o.errors_by_kind.items():
            self.errors_by_kind[kind] = self.errors_by_kind.get(kind, 0) + n
        clash = self.rollout_latency_ns.keys() & o.rollout_latency_ns.keys()
        if clash:
            rnd, rid = min(clash)
            raise ValueError(
                f"accumulator merge: rollout {rid} (round {rnd}) was measured by both accumulators"
            )
        self.rollout_latency_ns.update(o.rollout_latency_ns)


class Accumulator:
    """Folds turn and rollout records into histograms and counters, per transport.

    ``warmup_rollouts``: records of rollouts with ``rollout_id`` below it are
    ignored.  ``burst_window_s``: the sliding window the transport used for
    ``TurnRecord.burst_tokens_max``.  ``t0_ns``: origin of the per-second
    aggregate-TPS buckets (the run's start on the records' clock), so buckets of
    processes with different monotonic clocks line up when merged.
    """

    def __init__(
        self, *, warmup_rollouts: int = 0, burst_window_s: float = 0.1, t0_ns: int = 0
    ) -> None:
        if burst_window_s <= 0:
            raise ValueError(f"burst_window_s: expected a positive number, got {burst_window_s}")
        self.warmup_rollouts = warmup_rollouts
        self.burst_window_s = burst_window_s
        self.t0_ns = t0_ns
        self._by_transport: dict[str, _TransportStats] = {}

    def _stats(self, transport: str) -> _TransportStats:
        stats = self._by_transport.get(transport)
        if stats is None:
            stats = self._by_transport[transport] = _TransportStats()
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
        if n_out > 0 and first:
            self._spread_tokens(t, first - self.t0_ns, max(first, last) - self.t0_ns, n_out)
        if rec.burst_tokens_max > t.burst_tokens_max:
            t.burst_tokens_max = rec.burst_tokens_max
        if rec.status != "completed" and rec.status != "incomplete":
            t.turn_errors += 1
            kind = rec.error_kind or rec.status
            t.errors_by_kind[kind] = t.errors_by_kind.get(kind, 0) + 1
            return

        sent = rec.sent_ns
        if sent:
            if first:
                ttft = first - sent
                t.ttft.record_ns(ttft)
                if rec.sim_ttft_ms >= 0:
                    t.measurement_error.record_ns(ttft - round(rec.sim_ttft_ms * 1e6))
            if rec.first_event_ns:
                t.ttfb.record_ns(rec.first_event_ns - sent)
            if rec.done_ns:
                t.turn.record_ns(rec.done_ns - sent)
        if rec.itl_ns:
            t.itl.record_many_ns(rec.itl_ns)
        if n_out >= 2 and first and last > first:
            span = last - first
            t.tpot.record_ns(span // (n_out - 1))
            t.decode_tps.record((n_out - 1) * 1e9 / span)
        sim_sum = t.sim_sum
        sim_n = t.sim_n
        for i, (_, attr) in enumerate(_SIM_FIELDS):
            value = getattr(rec, attr)
            if value >= 0:
                sim_sum[i] += value
                sim_n[i] += 1

    def _spread_tokens(self, t: _TransportStats, a: int, b: int, n: int) -> None:
        """Add ``n`` tokens emitted uniformly over [a, b] ns to the per-second buckets."""
        buckets = t.agg_buckets
        t.agg_tokens += n
        if t.agg_first_ns is None or a < t.agg_first_ns:
            t.agg_first_ns = a
        if t.agg_last_ns is None or b > t.agg_last_ns:
            t.agg_last_ns = b
        s = a // _NS_PER_S
        e = b // _NS_PER_S
        if s == e:
            buckets[s] = buckets.get(s, 0.0) + n
            return
        per_ns = n / (b - a)
        for sec in range(s, e + 1):
            lo = max(a, sec * _NS_PER_S)
            hi = min(b, (sec + 1) * _NS_PER_S)
            if hi > lo:
                buckets[sec] = buckets.get(sec, 0.0) + per_ns * (hi - lo)

    def add_rollout(self, rec: RolloutRecord) -> None:
        if rec.rollout_id < self.warmup_rollouts:
            return
        t = self._stats(rec.transport)
        t.rollouts += 1
        t.tool_ns += rec.tool_ns
        t.client_ns += rec.client_ns
        t.recovery_ns += rec.recovery_ns
        t.rollout_turns += rec.turns
        if rec.start_ns and rec.intended_start_ns:
            t.schedule_lag.record_ns(rec.schedule_lag_ns)
        if rec.status != "completed":
            t.rollout_errors += 1
            if not rec.errors:
                kind = "rollout:" + (rec.error_kind or rec.status)
                t.errors_by_kind[kind] = t.errors_by_kind.get(kind, 0) + 1
            return
        if not rec.end_ns:
            return
        start = rec.intended_start_ns or rec.start_ns
        latency = rec.end_ns - start
        t.rollout.record_ns(latency)
        if rec.start_ns:
            t.rollout_uncorrected.record_ns(rec.end_ns - rec.start_ns)
        t.rollout_latency_ns[(rec.round, rec.rollout_id)] = latency

    def add_turns(self, recs: Iterable[TurnRecord]) -> None:
        for rec in recs:
            self.add_turn(rec)

    def add_rollouts(self, recs: Iterable[RolloutRecord]) -> None:
        for rec in recs:
            self.add_rollout(rec)

    # -- combining ---------------------------------------------------------------------------

    def merge(self, other: Accumulator) -> Accumulator:
        """Fold ``other`` (e.g. another process's accumulator) into this one; returns self."""
        if other.warmup_rollouts != self.warmup_rollouts:
            raise ValueError(
                f"accumulator merge: expected warmup_rollouts={self.warmup_rollouts}, "
                f"got {other.warmup_rollouts}"
            )
        if other.burst_window_s != self.burst_window_s:
            raise ValueError(
                f"accumulator merge: expected burst_window_s={self.burst_window_s}, "
                f"got {other.burst_window_s}"
            )
        for name, stats in other._by_transport.items():
            self._stats(name).merge(stats)
        return self

    def histograms(self) -> dict[tuple[str, str], Histogram]:
        """``(transport, metric) -> Histogram``; metrics: LATENCY_METRICS (µs), ``decode_tps``,
        ``measurement_error_pos``/``_neg`` (µs, measured − modelled TTFT split by sign)."""
        return {
            (name, metric): hist
            for name, stats in self._by_transport.items()
            for metric, hist in stats.histograms().items()
        }

    def aggregate_tps_series(self, transport: str) -> list[tuple[float, float]]:
        """Aggregate TPS of ``transport`` per one-second bucket: ``[(start_s, tokens/s)]``.

        Seconds are relative to ``t0_ns``; seconds with no output inside the
        active span are 0.  Empty for a transport with no output token.
        """
        stats = self._by_transport.get(transport)
        return buckets_to_series(stats.agg_buckets) if stats is not None else []

    def rollout_latencies_ms(self, transport: str) -> dict[tuple[int, int], float]:
        """Completed rollouts' latencies by ``(round, rollout_id)``."""
        stats = self._by_transport.get(transport)
        if stats is None:
            return {}
        return {k: v / 1e6 for k, v in stats.rollout_latency_ns.items()}

    # -- wire form ---------------------------------------------------------------------------

    def to_state(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot, for shipping an accumulator between processes."""
        transports: dict[str, Any] = {}
        for name, t in self._by_transport.items():
            transports[name] = {
                "counts": [t.turns, t.turn_errors, t.rollouts, t.rollout_errors],
                "histograms": {m: h.encode() for m, h in t.histograms().items()},
                "burst_tokens_max": t.burst_tokens_max,
                "agg_buckets": [[sec, tok] for sec, tok in t.agg_buckets.items()],
                "agg": [t.agg_tokens, t.agg_first_ns, t.agg_last_ns],
                "sim_sum": t.sim_sum,
                "sim_n": t.sim_n,
                "rollout_ns": [t.tool_ns, t.client_ns, t.recovery_ns, t.rollout_turns],
                "errors_by_kind": t.errors_by_kind,
                "rollout_latency_ns": [[r, i, ns] for (r, i), ns in t.rollout_latency_ns.items()],
            }
        return {
            "format_version": FORMAT_VERSION,
            "warmup_rollouts": self.warmup_rollouts,
            "burst_window_s": self.burst_window_s,
            "t0_ns": self.t0_ns,
            "transports": transports,
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
        )
        for name, d in state["transports"].items():
            t = acc._stats(name)
            t.turns, t.turn_errors, t.rollouts, t.rollout_errors = (int(x) for x in d["counts"])
            hists = {m: Histogram.decode(s) for m, s in d["histograms"].items()}
            for metric in LATENCY_METRICS:
                setattr(t, metric, hists[metric])
            t.decode_tps = hists["decode_tps"]
            t.measurement_error.pos = hists["measurement_error_pos"]
            t.measurement_error.neg = hists["measurement_error_neg"]
            t.burst_tokens_max = int(d["burst_tokens_max"])
            t.agg_buckets = {int(sec): float(tok) for sec, tok in d["agg_buckets"]}
            t.agg_tokens, t.agg_first_ns, t.agg_last_ns = d["agg"]
            t.sim_sum = [float(x) for x in d["sim_sum"]]
            t.sim_n = [int(x) for x in d["sim_n"]]
            t.tool_ns, t.client_ns, t.recovery_ns, t.rollout_turns = (
                int(x) for x in d["rollout_ns"]
            )
            t.errors_by_kind = {str(k): int(v) for k, v in d["errors_by_kind"].items()}
            t.rollout_latency_ns = {
                (int(r), int(i)): int(ns) for r, i, ns in d["rollout_latency_ns"]
            }
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
    ) -> dict[str, Any]:
        """The ``summary.json`` document (docs/metrics.md §3); missing values are ``None``.

        ``comparisons``: ``(baseline, candidate)`` pairs; ``None`` compares the
        first transport present in :data:`TRANSPORT_ORDER` (else the first seen)
        with every other one.  Pairs where either side has no data are skipped.
        """
        if comparisons is None:
            comparisons = self._default_comparisons()
        return {
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
        }

    def _default_comparisons(self) -> list[tuple[str, str]]:
        names = self.transports
        if len(names) < 2:
            return []
        known = [n for n in TRANSPORT_ORDER if n in self._by_transport]
        base = known[0] if known else names[0]
        ordered = known + [n for n in names if n not in known]
        return [(base, n) for n in ordered if n != base]

    def _transport_summary(self, t: _TransportStats) -> dict[str, Any]:
        breakdown: dict[str, float | None] = {
            key: _r(t.sim_sum[i] / t.sim_n[i]) if t.sim_n[i] else None
            for i, (key, _) in enumerate(_SIM_FIELDS)
        }
        per_turn = t.rollout_turns
        breakdown["tool"] = _r(t.tool_ns / per_turn / 1e6) if per_turn else None
        breakdown["client"] = _r(t.client_ns / per_turn / 1e6) if per_turn else None
        breakdown["recovery"] = _r(t.recovery_ns / per_turn / 1e6) if per_turn else None

        decode_p50 = t.decode_tps.percentile(50)
        agg_span_ns = (
            t.agg_last_ns - t.agg_first_ns
            if t.agg_first_ns is not None and t.agg_last_ns is not None
            else 0
        )
        lag50, lag99 = t.schedule_lag.percentiles_ms((50, 99))
        me = t.measurement_error
        return {
            "turns": {"count": t.turns, "errors": t.turn_errors},
            "rollouts": {"count": t.rollouts, "errors": t.rollout_errors},
            "ttft_ms": _dist(t.ttft),
            "ttfb_ms": _dist(t.ttfb),
            "itl_ms": _dist(t.itl),
            "turn_ms": _dist(t.turn),
            "rollout_ms": _dist(t.rollout),
            "rollout_uncorrected_ms": _dist(t.rollout_uncorrected),
            "tpot_ms": _dist(t.tpot),
            "tps": {
                "decode_p50": _r(decode_p50),
                "decode_mean": _r(t.decode_tps.mean),
                "burst_peak": (
                    _r(t.burst_tokens_max / self.burst_window_s) if t.burst_tokens_max else None
                ),
                "aggregate_mean": (
                    _r(t.agg_tokens * 1e9 / agg_span_ns) if agg_span_ns > 0 else None
                ),
                "aggregate_peak": _r(max(t.agg_buckets.values())) if t.agg_buckets else None,
            },
            "breakdown_ms": breakdown,
            "schedule_lag_ms": {"p50": _r(lag50), "p99": _r(lag99)},
            "errors_by_kind": dict(sorted(t.errors_by_kind.items())),
            "measurement_error_ms": {
                "p50": _r(me.percentile_ms(50)),
                "p99": _r(me.percentile_ms(99)),
            },
        }

    def _comparison(self, base: str, cand: str, *, n_boot: int, seed: int) -> dict[str, Any] | None:
        b = self._by_transport.get(base)
        c = self._by_transport.get(cand)
        if b is None or c is None:
            return None
        has_rollouts = bool(b.rollout_latency_ns) and bool(c.rollout_latency_ns)
        has_ttft = b.ttft.count > 0 and c.ttft.count > 0
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
        }
        if has_rollouts:
            paired = b.rollout_latency_ns.keys() == c.rollout_latency_ns.keys()
            if paired:
                keys = sorted(b.rollout_latency_ns)
                res = paired_speedup(
                    [b.rollout_latency_ns[k] / 1e6 for k in keys],
                    [c.rollout_latency_ns[k] / 1e6 for k in keys],
                    n_boot=n_boot,
                    seed=seed,
                )
            else:
                res = unpaired_speedup(
                    [v / 1e6 for v in b.rollout_latency_ns.values()],
                    [v / 1e6 for v in c.rollout_latency_ns.values()],
                    n_boot=n_boot,
                    seed=seed,
                )
            out["rollout_speedup"] = _r(res.median_ratio, 4)
            out["rollout_speedup_ci95"] = [_r(res.ci95[0], 4), _r(res.ci95[1], 4)]
            out["rollout_latency_reduction_pct"] = _r(res.reduction_pct)
            out["paired"] = res.paired
        if has_ttft:
            b50 = b.ttft.percentile(50)
            c50 = c.ttft.percentile(50)
            if b50 > 0:
                out["ttft_p50_reduction_pct"] = _r((1.0 - c50 / b50) * 100.0)
        return out


def _r(x: float, ndigits: int = 3) -> float | None:
    """Round for the JSON document (ms to the µs); NaN/inf become None."""
    if x is None or not math.isfinite(x):
        return None
    return round(float(x), ndigits)


def _dist(h: Histogram) -> dict[str, float | None]:
    p50, p90, p99 = h.percentiles_ms((50, 90, 99))
    return {"p50": _r(p50), "p90": _r(p90), "p99": _r(p99), "mean": _r(h.mean_ms)}
