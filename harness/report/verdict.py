"""The one-line verdict every run report opens with: valid?, the headline speedup, the worst error.

Pure: a summary in, one line out; the console, ``report.md`` and ``report.html`` print it
first, so a reader (and a CI log) gets the outcome before any table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.metrics.results_model import Summary, as_summary
from harness.report.files import fmt

#: what the line starts with, so a log search finds it
PREFIX = "verdict: "


def _validity(summary: Summary, reasons_shown: bool) -> str:
    if summary.valid is not False:
        return "valid"
    reasons = [r for r in summary.invalid_reasons if r]
    if not reasons or not reasons_shown:
        return "INVALID"
    more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
    return f"INVALID: {reasons[0]}{more}"


def _speedup(summary: Summary) -> str:
    comps = [c for c in summary.comparisons if c.rollout_speedup is not None]
    if not comps:
        return (
            "no speedup: one transport"
            if len(summary.transports) == 1
            else "no speedup: no two transports completed a rollout each"
        )
    # the headline is the largest speedup (ties: the first listed); the count says it was picked
    c = max(comps, key=lambda x: float(x.rollout_speedup or 0.0))
    text = f"{c.pair} {fmt(c.rollout_speedup, 2)}×"
    lo, hi = (c.rollout_speedup_ci95 or [None, None])[:2]
    if lo is not None and hi is not None:
        text += f" (95 % CI {fmt(lo, 2)}–{fmt(hi, 2)})"
    elif c.rollout_speedup_ci_reason:
        text += f" ({c.rollout_speedup_ci_reason})"
    else:
        text += " (no CI)"
    if len(comps) > 1:
        text += f" (the largest of {len(comps)} comparisons)"
    return text


def worst_error(doc: Summary | Mapping[str, Any]) -> tuple[str, str, int] | None:
    """``(transport, kind, count)`` of the most frequent error kind of the run, or None.

    Ties go to the transport listed first, then to the kind that sorts first, so the
    line is the same on every render.
    """
    summary = as_summary(doc)
    best: tuple[str, str, int] | None = None
    for name, t in (summary.transports if summary is not None else {}).items():
        for kind, n in sorted(t.errors_by_kind.items()):
            if n > 0 and (best is None or n > best[2]):
                best = (name, kind, n)
    return best


def _errors(summary: Summary) -> str:
    worst = worst_error(summary)
    if worst is None:
        return "no errors"
    name, kind, n = worst
    return f"worst error: {kind} x{n:,} on {name}"


def verdict_line(doc: Summary | Mapping[str, Any] | None, *, reasons: bool = True) -> str:
    """``verdict: valid · ws vs http 1.35× (95 % CI 1.30–1.41) · no errors``.

    Validity with the first reason (a bare ``INVALID`` without ``reasons``: the console
    has said them on the line before), the largest rollout speedup of the comparisons with
    its CI (or the summary's reason for having none), the most frequent error kind.
    """
    summary = as_summary(doc) if doc else None
    if summary is None:
        return PREFIX + "no result: the run did not finish (no summary.json)"
    parts = [_validity(summary, reasons), _speedup(summary), _errors(summary)]
    warnings = summary.warnings
    if warnings:
        # an honesty warning can withdraw the headline's meaning (a "chaining speedup" from a
        # server that ignored previous_response_id): it belongs on the line that is read
        parts.append(f"{len(warnings)} warning{'s' if len(warnings) > 1 else ''}: {warnings[0]}")
    return PREFIX + " · ".join(parts)


def verdict_kind(doc: Summary | Mapping[str, Any] | None) -> str:
    """How to colour the line: ``bad`` (invalid or unfinished), ``note`` (errors), ``ok``."""
    summary = as_summary(doc) if doc else None
    if summary is None or summary.valid is False:
        return "bad"
    return "note" if worst_error(summary) is not None or summary.warnings else "ok"
