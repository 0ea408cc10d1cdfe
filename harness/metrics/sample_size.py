"""When a sample is too small for a statistic (docs/metrics.md §1.4): one rule, stated once.

A percentile from too few values (the sample's maximum, not the tail) is still written but
listed under ``too_few_samples``; a speedup from fewer than
:data:`~harness.metrics.stats.MIN_CI_PAIRS` pairs carries its point estimate and
``rollout_speedup_ci_reason``.  :func:`sample_size_reasons` turns both into sentences for a
run's validity reasons and the console.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from harness.metrics import definitions as D
from harness.metrics.results_model import Summary, as_summary
from harness.metrics.stats import MIN_CI_PAIRS, ci_reason

#: ``transports.<t>.too_few_samples``: ``{"<group>.<key>": n}`` for every statistic whose
#: sample is smaller than :func:`min_samples` of it
TOO_FEW_KEY = "too_few_samples"

__all__ = [
    "MIN_CI_PAIRS",
    "TOO_FEW_KEY",
    "ci_reason",
    "min_samples",
    "sample_size_reasons",
    "too_few_for",
]


def min_samples(stat: str) -> int:
    """Fewest samples for which statistic ``stat`` (p50, p90, p99, mean, peak) is not just the
    maximum: ``ceil(100 / (100 - p))`` for a percentile (p50 2, p90 10, p99 100), else 1."""
    p = D.PERCENTILES.get(stat)
    if p is None:
        return 1
    return math.ceil(round(100.0 / (100.0 - p), 9))


def too_few_for(stat: str, n: int) -> bool:
    return n < min_samples(stat)


def _stat_name(path: str, reasoned: bool = True) -> tuple[str, str] | None:
    """``"tps.decode_p50"`` -> (metric label, statistic name) via the metric table; None for
    a metric the tables show only when the run reasoned, and it did not."""
    group, _, key = path.partition(".")
    for m in D.METRICS:
        if m.group == group and any(s.key == key for s in m.stats):
            if m.reasoning and not reasoned:
                return None
            return m.label, m.stat(key).name
    return group, key


def sample_size_reasons(doc: Summary | Mapping[str, Any]) -> list[str]:
    """One sentence per transport whose statistics rest on too few samples, and one per
    comparison without a CI; ``[]`` when every number has the sample it needs.

    Pure: reads only the summary (its model, or the ``summary.json`` document).  For example
    ``"ws: too few samples for p90 (need 10): rollout (n=4); p99 (need 100): TTFT, turn (n=60),
    rollout (n=4)"`` and ``"ws vs http rollout speedup: n=2: too few for a CI (need 5)"``.
    """
    summary = as_summary(doc) or Summary()
    out: list[str] = []
    reasoned = D.has_reasoning(summary)
    for name, t in summary.transports.items():
        # statistic -> n -> metric labels: one clause per statistic keeps the sentence short
        by_stat: dict[str, dict[int, list[str]]] = {}
        for path, n in t.too_few_samples.items():
            named = _stat_name(path, reasoned)
            if named is None:
                continue
            label, stat = named
            by_stat.setdefault(stat, {}).setdefault(int(n), []).append(label)
        clauses = [
            f"{stat} (need {min_samples(stat)}): "
            + ", ".join(f"{', '.join(labels)} (n={n})" for n, labels in by_n.items())
            for stat, by_n in sorted(by_stat.items(), key=lambda kv: min_samples(kv[0]))
        ]
        if clauses:
            out.append(f"{name}: too few samples for " + "; ".join(clauses))
    for c in summary.comparisons:
        if c.rollout_speedup is not None and c.rollout_speedup_ci_reason:
            out.append(f"{c.pair} rollout speedup: {c.rollout_speedup_ci_reason}")
    return out
