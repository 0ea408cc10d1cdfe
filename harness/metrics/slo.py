"""SLO attainment and goodput: the pure rules.

Which turn meets the SLO, which rollout is good, and why the interval is Wilson's and none is
given below :data:`MIN_ATTAINMENT_N` records: docs/metrics.md §1.8.  The per-turn values are
the metric table's own expressions (:mod:`harness.metrics.definitions`), compiled once per
threshold set, so the SLO judges exactly the numbers the summary reports.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from harness.metrics import definitions as D
from harness.metrics import stats
from harness.metrics.results_model import Goodput, Summary, as_summary
from harness.workload.records import OK_TURN_STATUSES, RolloutRecord, TurnRecord
from harness.workload.slo import ROLLOUT_SLO_FIELDS, TURN_SLO_FIELDS

#: fewest records (rollouts or turns) an attainment's confidence interval is given for
MIN_ATTAINMENT_N = 10
#: the normal quantile of a two-sided 95 % interval
Z95 = 1.959963984540054


def wilson(good: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson's score interval of ``good`` successes in ``n`` trials; None when ``n`` is 0."""
    if n <= 0:
        return None
    if not 0 <= good <= n:
        raise ValueError(f"wilson: expected 0 <= good <= n, got good={good}, n={n}")
    p = good / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    # at the ends the bound is exact (0 or 1) where floats give 0.9999999999999999
    lo = 0.0 if good == 0 else max(0.0, centre - half)
    hi = 1.0 if good == n else min(1.0, centre + half)
    return lo, hi


def ci_reason(n: int) -> str | None:
    """Why an attainment of ``n`` records has no interval; None when it has one."""
    return stats.ci_reason(n, MIN_ATTAINMENT_N)


def _expr_check(
    kind: D.RecordKind, fields: tuple[str, ...], thresholds: Mapping[str, float]
) -> str:
    parts = []
    for field, limit_ms in thresholds.items():
        if field not in fields:
            continue
        m = D.get(field)  # a threshold is named as the metric it bounds
        assert m.record == kind
        when = D._on_record(m, m.when)
        value = D._on_record(m, m.value)
        parts.append(f"({when}) and ({value}) <= {round(limit_ms * 1e6)}")
    return " and ".join(parts) or "True"


def _compile_check(
    kind: D.RecordKind, fields: tuple[str, ...], thresholds: Mapping[str, float]
) -> Callable[[Any], bool]:
    statuses = OK_TURN_STATUSES if kind == "turn" else D.ROLLOUT_OK
    ok = " or ".join(f"rec.status == {s!r}" for s in statuses)
    expr = f"({ok}) and {_expr_check(kind, fields, thresholds)}"
    check: Callable[[Any], bool] = eval(
        compile(f"lambda rec: bool({expr})", f"<slo: {kind}>", "eval"), {}
    )
    return check


def compile_turn_check(thresholds: Mapping[str, float]) -> Callable[[TurnRecord], bool]:
    """``check(turn) -> bool``: the turn succeeded and meets every per-turn threshold."""
    return _compile_check("turn", TURN_SLO_FIELDS, thresholds)


def compile_rollout_check(thresholds: Mapping[str, float]) -> Callable[[RolloutRecord], bool]:
    """``check(rollout) -> bool``: the rollout succeeded and is within ``rollout_ms`` (its
    turns are judged apart, by :func:`compile_turn_check`)."""
    return _compile_check("rollout", ROLLOUT_SLO_FIELDS, thresholds)


def _ratio(good: int, n: int) -> float | None:
    return round(good / n, 6) if n else None


def _ci(good: int, n: int) -> list[float | None]:
    if ci_reason(n) is not None:
        return [None, None]
    bounds = wilson(good, n)
    assert bounds is not None
    return [round(bounds[0], 6), round(bounds[1], 6)]


def attainment_group(
    rollouts: int, good_rollouts: int, turns: int, good_turns: int, thresholds: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``slo`` group of one transport's summary."""
    return {
        "rollout_attainment": _ratio(good_rollouts, rollouts),
        "turn_attainment": _ratio(good_turns, turns),
        "rollouts": rollouts,
        "good_rollouts": good_rollouts,
        "rollout_attainment_ci95": _ci(good_rollouts, rollouts),
        "turns": turns,
        "good_turns": good_turns,
        "turn_attainment_ci95": _ci(good_turns, turns),
        "ci_reason": ci_reason(rollouts),
        "thresholds": dict(thresholds),
    }


def goodput_group(good_rollouts: int, good_tokens: int, span_ns: int) -> dict[str, Any]:
    """The ``goodput`` group: good rollouts and their output tokens per second of the span
    from the first rollout's (intended) start to the last one's end."""
    span_s = span_ns / 1e9
    return {
        "goodput_tps": round(good_tokens / span_s, 3) if span_s > 0 else None,
        "good_rollouts_per_s": round(good_rollouts / span_s, 4) if span_s > 0 else None,
        "good_output_tokens": good_tokens,
        "span_s": round(span_s, 3) if span_s > 0 else None,
    }


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.1f} %"


def line(doc: Summary | Mapping[str, Any]) -> str:
    """One line of the SLO and goodput per transport, for the console and the report:
    ``SLO ttft ≤ 500 ms: ws 98.0 % of rollouts (95 % CI 93.0–99.4 %, 98/100), turns 99.6 %,
    12.50 good rollouts/s, goodput 3,210 tok/s; http …``; '' when no transport has one."""
    summary = as_summary(doc) or Summary()
    parts = []
    thresholds: Mapping[str, Any] = {}
    for name, t in summary.transports.items():
        group = t.slo
        if group is None or not group.rollouts:
            continue
        thresholds = group.thresholds
        lo, hi = (group.rollout_attainment_ci95 or [None, None])[:2]
        ci = (
            f"95 % CI {lo * 100:.1f}–{hi * 100:.1f} %"
            if lo is not None and hi is not None
            else (group.ci_reason or "no CI")
        )
        good = t.goodput or Goodput()
        rate, tps = good.good_rollouts_per_s, good.goodput_tps
        parts.append(
            f"{name} {_pct(group.rollout_attainment)} of rollouts ({ci}, "
            f"{group.good_rollouts}/{group.rollouts}), turns "
            f"{_pct(group.turn_attainment)}"
            + (f", {rate:.2f} good rollouts/s" if rate is not None else "")
            + (f", goodput {tps:,.0f} tok/s" if tps is not None else "")
        )
    if not parts:
        return ""
    rule = (
        ", ".join(f"{k.removesuffix('_ms')} ≤ {v:g} ms" for k, v in thresholds.items())
        or "none set (good = succeeded)"
    )
    return f"SLO {rule}: " + "; ".join(parts)
