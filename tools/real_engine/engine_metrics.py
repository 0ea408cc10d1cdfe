"""vLLM's own figures over a window: two scrapes of its ``/metrics``, subtracted (pure).

Histograms keep their buckets here (``harness.metrics.server_series`` drops them for the
run's file); a quantile is read from the window's bucket counts by linear interpolation
inside the bucket that holds the rank, as Prometheus' ``histogram_quantile`` does, and the
width of that bucket is reported with it: the figure is known to that resolution, no better.
The mean (``_sum`` over ``_count``) is exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
TPOT = "vllm:request_time_per_output_token_seconds"
#: the engine core's share of a TTFT: queued -> scheduled, scheduled -> first token (its clock)
QUEUE = "vllm:request_queue_time_seconds"
PREFILL = "vllm:request_prefill_time_seconds"
HISTOGRAMS = (TTFT, ITL, TPOT, QUEUE, PREFILL)
PROMPT_TOKENS = "vllm:prompt_tokens_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
CACHED_TOKENS = "vllm:prompt_tokens_cached_total"
REQUESTS = "vllm:request_success_total"
COUNTERS = (PROMPT_TOKENS, GENERATION_TOKENS, CACHED_TOKENS, REQUESTS)


def geometric_edges(low_s: float, high_s: float, step: float) -> list[float]:
    """Bucket upper bounds from ``low_s`` to ``high_s``, each ``1 + step`` times the last,
    rounded to 1 ns (vLLM takes them as ``--custom-histogram-buckets``)."""
    out: list[float] = []
    edge = low_s
    while edge < high_s * (1 + step):
        value = round(edge, 9)
        if not out or value > out[-1]:
            out.append(value)
        edge *= 1 + step
    return out


#: the buckets `make real-engine` gives vLLM: 2 % steps for TTFT (1 ms .. 30 s), 1 % for the
#: token-interval family (ITL and TPOT, 0.2 ms .. 2 s), 5 % for the request-latency family
#: (queue, prefill, e2e: 0.1 ms .. 60 s; vLLM's own start at 300 ms)
BUCKETS = {
    "time_to_first_token": geometric_edges(0.001, 30.0, 0.02),
    "inter_token_latency": geometric_edges(0.0002, 2.0, 0.01),
    "request_latency": geometric_edges(0.0001, 60.0, 0.05),
}


@dataclass
class Histogram:
    """Cumulative bucket counts by upper bound (seconds), ``_sum`` and ``_count``."""

    buckets: dict[float, float] = field(default_factory=dict)
    total: float = 0.0
    count: float = 0.0

    def minus(self, before: Histogram) -> Histogram:
        return Histogram(
            {le: n - before.buckets.get(le, 0.0) for le, n in self.buckets.items()},
            self.total - before.total,
            self.count - before.count,
        )

    def plus(self, other: Histogram) -> Histogram:
        return Histogram(
            {
                le: self.buckets.get(le, 0.0) + other.buckets.get(le, 0.0)
                for le in self.buckets | other.buckets
            },
            self.total + other.total,
            self.count + other.count,
        )

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count > 0 else None

    def quantile(self, q: float) -> tuple[float, float] | None:
        """(value, bucket width) at quantile ``q``, both in seconds; None without samples or
        when the rank falls in the open top bucket."""
        if self.count <= 0:
            return None
        rank = q * self.count
        lower, below = 0.0, 0.0
        for le in sorted(self.buckets):
            cum = self.buckets[le]
            if cum >= rank and cum > below:
                if math.isinf(le):
                    return None
                return lower + (le - lower) * (rank - below) / (cum - below), le - lower
            lower, below = le, cum
        return None


@dataclass
class Snapshot:
    histograms: dict[str, Histogram] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)

    def minus(self, before: Snapshot) -> Snapshot:
        return Snapshot(
            {
                name: h.minus(before.histograms.get(name, Histogram()))
                for name, h in self.histograms.items()
            },
            {name: v - before.counters.get(name, 0.0) for name, v in self.counters.items()},
        )

    def plus(self, other: Snapshot) -> Snapshot:
        """Two windows' counts together (two scrape differences of one engine)."""
        names = self.histograms | other.histograms
        return Snapshot(
            {
                n: self.histograms.get(n, Histogram()).plus(other.histograms.get(n, Histogram()))
                for n in names
            },
            {
                n: self.counters.get(n, 0.0) + other.counters.get(n, 0.0)
                for n in self.counters | other.counters
            },
        )


def parse_snapshot(text: str, model: str | None = None) -> Snapshot:
    """The histograms and counters of :data:`HISTOGRAMS` and :data:`COUNTERS` in one scrape,
    summed over label sets (engines, finish reasons) of ``model`` (every model when None)."""
    snap = Snapshot()
    wanted_counters = {c.removesuffix("_total") for c in COUNTERS}
    for family in text_string_to_metric_families(text):
        if family.name in HISTOGRAMS:
            hist = snap.histograms.setdefault(family.name, Histogram())
            for s in family.samples:
                if model is not None and s.labels.get("model_name", model) != model:
                    continue
                if s.name.endswith("_bucket"):
                    le = float(s.labels["le"])
                    hist.buckets[le] = hist.buckets.get(le, 0.0) + s.value
                elif s.name.endswith("_sum"):
                    hist.total += s.value
                elif s.name.endswith("_count"):
                    hist.count += s.value
        elif family.name in wanted_counters:
            for s in family.samples:
                if model is not None and s.labels.get("model_name", model) != model:
                    continue
                if s.name.endswith("_total"):
                    snap.counters[s.name] = snap.counters.get(s.name, 0.0) + s.value
    return snap
