"""``loopbench compare RUN_A RUN_B``: what changed between two runs, and is it significant.

For every transport both runs measured, each headline metric is shown for A
and B with the absolute and relative delta.  Where the row files hold the
samples behind a metric (per-turn TTFT, TTFB, turn latency and decode rate;
per-rollout latency), the p50 row also carries

* the two-sided Mann–Whitney p-value of "A and B come from one distribution",
* the ratio of medians B/A with a bootstrap 95 % confidence interval
  (resampling each run independently: runs are not paired),

and a verdict: ``better``/``worse`` when p < 0.05 *and* the interval excludes
1, else ``no significant change``.  Percentile tails (p99) and peaks have no
test: a single run holds too few tail samples for one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.metrics import definitions as D
from harness.metrics.stats import bootstrap_ratio_of_medians, mann_whitney_u
from harness.report import analysis as A
from harness.report.document import Document, Heading, Paragraph, Table
from harness.report.files import fmt
from harness.report.results import Run

ALPHA = 0.05


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One row of the comparison: a statistic of a metric of the table."""

    metric: D.Metric
    stat: D.Stat

    @property
    def path(self) -> tuple[str, str]:
        """``summary.json`` path under ``transports.<name>``, e.g. ("ttft_ms", "p50")."""
        return self.metric.group, self.stat.key

    @property
    def label(self) -> str:
        return self.metric.title(self.stat.key)

    @property
    def unit(self) -> str:
        return self.metric.unit

    @property
    def lower_is_better(self) -> bool:
        return self.metric.lower_is_better is not False

    @property
    def samples(self) -> tuple[str, str] | None:
        """(table, column) of the per-sample values tested, if any: the median rows of a
        metric with a column in the row files (a run holds too few tail samples for a test)."""
        m = self.metric
        if m.column is None or m.record is None or self.stat.name != "p50":
            return None
        return ("turns" if m.record == "turn" else "rollouts", m.column)


def metric_specs() -> tuple[MetricSpec, ...]:
    """The rows ``compare`` shows, from the metric table."""
    return tuple(MetricSpec(m, s) for m, s in D.compare_rows())


@dataclass(frozen=True, slots=True)
class Delta:
    transport: str
    metric: str
    unit: str
    a: float | None
    b: float | None
    delta: float | None
    delta_pct: float | None
    #: median(B) / median(A) of the samples and its bootstrap 95 % CI
    ratio: float | None = None
    ratio_ci95: tuple[float, float] | None = None
    p_value: float | None = None
    #: "better", "worse", "no significant change", or "" (no test)
    verdict: str = ""


def _num(x: Any) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if f == f else None


def _samples(run: Run, cache: dict[str, Any], spec: MetricSpec, transport: str) -> np.ndarray:
    assert spec.samples is not None
    table, column = spec.samples
    if table not in cache:
        cache[table] = A.turn_table(run) if table == "turns" else A.rollout_table(run)
    df = cache[table]
    v = df.loc[(df["transport"] == transport) & df["ok"], column].dropna().to_numpy(float)
    return v[v > 0]


def _test(
    spec: MetricSpec, a: np.ndarray, b: np.ndarray, *, n_boot: int, seed: int
) -> dict[str, Any]:
    if len(a) < 2 or len(b) < 2:
        return {}
    _, p = mann_whitney_u(a, b)
    ratio, ci = bootstrap_ratio_of_medians(b, a, n_boot=n_boot, seed=seed)
    verdict = "no significant change"
    if p < ALPHA and not (ci[0] <= 1.0 <= ci[1]):
        improved = (ratio < 1.0) == spec.lower_is_better
        verdict = "better" if improved else "worse"
    return {"ratio": ratio, "ratio_ci95": ci, "p_value": p, "verdict": verdict}


def compare_runs(a: Run, b: Run, *, n_boot: int = 2000, seed: int = 0) -> list[Delta]:
    """Per-transport metric deltas of run ``b`` relative to run ``a`` (both finished)."""
    for run in (a, b):
        if not run.finished:
            raise ValueError(f"{run.path}: summary.json: missing (the run did not finish)")
    ta = (a.summary or {}).get("transports", {})
    tb = (b.summary or {}).get("transports", {})
    common = [t for t in A.ordered_transports(ta) if t in tb]
    cache_a: dict[str, Any] = {}
    cache_b: dict[str, Any] = {}
    out: list[Delta] = []
    for name in common:
        for spec in metric_specs():
            group, key = spec.path
            va = _num((ta[name].get(group) or {}).get(key))
            vb = _num((tb[name].get(group) or {}).get(key))
            delta = vb - va if va is not None and vb is not None else None
            pct = delta / va * 100.0 if delta is not None and va else None
            extra: dict[str, Any] = {}
            if spec.samples is not None:
                extra = _test(
                    spec,
                    _samples(a, cache_a, spec, name),
                    _samples(b, cache_b, spec, name),
                    n_boot=n_boot,
                    seed=seed,
                )
            out.append(Delta(name, spec.label, spec.unit, va, vb, delta, pct, **extra))
    return out


def speedup_changes(a: Run, b: Run) -> list[tuple[str, Any, Any]]:
    """``(pair, speedup in A, speedup in B)`` for transport pairs both runs compared."""

    def by_pair(run: Run) -> dict[str, dict[str, Any]]:
        return {
            f"{c['candidate']} vs {c['baseline']}": c
            for c in (run.summary or {}).get("comparisons", [])
        }

    pa, pb = by_pair(a), by_pair(b)
    return [(k, pa[k], pb[k]) for k in pa if k in pb]


def delta_rows(deltas: Sequence[Delta]) -> list[list[str]]:
    rows = []
    for d in deltas:
        digits = 0 if d.unit == "tok/s" else 2 if (d.a or 0) < 10 else 1
        ci = (
            f"{d.ratio:.3f} [{d.ratio_ci95[0]:.3f}, {d.ratio_ci95[1]:.3f}]"
            if d.ratio is not None and d.ratio_ci95 is not None
            else "-"
        )
        rows.append(
            [
                d.transport,
                f"{d.metric} ({d.unit})",
                fmt(d.a, digits),
                fmt(d.b, digits),
                fmt(d.delta, digits)
                if d.delta is None or d.delta < 0
                else "+" + fmt(d.delta, digits),
                "-" if d.delta_pct is None else f"{d.delta_pct:+.1f} %",
                ci,
                "-" if d.p_value is None else f"{d.p_value:.3g}",
                d.verdict or "-",
            ]
        )
    return rows


DELTA_HEADERS = [
    "transport",
    "metric",
    "A",
    "B",
    "Δ (B−A)",
    "Δ %",
    "median B/A [95 % CI]",
    "p (Mann–Whitney)",
    "verdict",
]


def compare_document(a: Run, b: Run, deltas: Sequence[Delta]) -> Document:
    doc = Document(f"loopbench compare — {a.run_id} (A) vs {b.run_id} (B)")
    doc.add(
        Paragraph(
            f"A: {a.path} · B: {b.path}. Verdicts need p < {ALPHA} and a 95 % CI of the median "
            "ratio that excludes 1; rows without samples (tails, peaks) have no test."
        )
    )
    doc.add(Heading("Metrics"), Table(DELTA_HEADERS, delta_rows(deltas), align="llrrrrrrl"))
    changes = speedup_changes(a, b)
    if changes:
        rows = [
            [
                pair,
                fmt(ca.get("rollout_speedup"), 3, "×"),
                fmt(cb.get("rollout_speedup"), 3, "×"),
                fmt(ca.get("rollout_latency_reduction_pct"), 1, " %"),
                fmt(cb.get("rollout_latency_reduction_pct"), 1, " %"),
            ]
            for pair, ca, cb in changes
        ]
        doc.add(
            Heading("Speedup between transports"),
            Table(["pair", "speedup A", "speedup B", "reduction A", "reduction B"], rows),
        )
    return doc
