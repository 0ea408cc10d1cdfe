"""Self-benchmark figures: values, targets, verdicts, the table and the JSON document (pure)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

FORMAT_VERSION = 1

Check = Callable[[float], bool]


@dataclass(frozen=True, slots=True)
class Target:
    """A bound a figure must meet: ``text`` for people, ``check`` for the verdict."""

    text: str
    check: Check


def at_least(bound: float, text: str) -> Target:
    return Target(text, lambda v: v >= bound)


def at_most(bound: float, text: str) -> Target:
    return Target(text, lambda v: v <= bound)


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured number; ``passed`` is ``None`` for informational figures."""

    key: str
    label: str
    value: float | None
    unit: str
    target: str = ""
    passed: bool | None = None
    note: str = ""
    #: why a targeted figure got no verdict (the machine was busy: bench/selfbench/busy.py); "" if judged
    not_judged: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "value": self.value,
            "unit": self.unit,
            "target": self.target or None,
            "passed": self.passed,
            "note": self.note or None,
            "not_judged": self.not_judged or None,
        }


def set_aside(figures: Sequence[Figure], why: str) -> list[Figure]:
    """The figures of a step the machine was too busy to judge: no verdict, ``why`` noted."""
    return [
        replace(f, passed=None, not_judged=why, note=why)
        if f.target
        else replace(f, note=f.note or why)
        for f in figures
    ]


def unjudged(figures: Sequence[Figure]) -> list[Figure]:
    """The targeted figures left without a verdict."""
    return [f for f in figures if f.not_judged]


def figure(
    key: str,
    label: str,
    value: float | None,
    unit: str,
    target: Target | None = None,
    note: str = "",
    digits: int = 3,
) -> Figure:
    """A figure with its verdict; a missing or non-finite value fails its target."""
    clean = None if value is None or not math.isfinite(value) else round(float(value), digits)
    if target is None:
        return Figure(key, label, clean, unit, "", None, note)
    passed = clean is not None and target.check(clean)
    return Figure(key, label, clean, unit, target.text, passed, note)


def verdict(figures: Sequence[Figure]) -> bool:
    """True when every figure with a target passed."""
    return all(f.passed for f in figures if f.passed is not None)


def document(
    figures: Sequence[Figure], meta: Mapping[str, Any], details: Mapping[str, Any]
) -> dict[str, Any]:
    """The ``selfbench.json`` document."""
    return {
        "format_version": FORMAT_VERSION,
        **meta,
        "passed": verdict(figures),
        "not_judged": len(unjudged(figures)),
        "figures": [f.as_dict() for f in figures],
        "details": dict(details),
    }


def _value(f: Figure) -> str:
    if f.value is None:
        return "—"
    v = f.value
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.1f}"
    return f"{v:.3g}" if abs(v) < 1 else f"{v:.2f}"


def render_table(figures: Sequence[Figure]) -> str:
    """A Markdown table: figure, value, target, verdict (``info`` when there is no target)."""
    rows = [("figure", "value", "target", "result")]
    for f in figures:
        if f.not_judged:
            result = "not judged"
        else:
            result = "info" if f.passed is None else ("PASS" if f.passed else "FAIL")
        value = _value(f) + (f" {f.unit}" if f.unit and f.value is not None else "")
        rows.append((f.label, value, f.target or "", result))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for n, row in enumerate(rows):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
        if n == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    notes = list(dict.fromkeys(f.note for f in figures if f.note))
    lines.extend(f"\nnote: {n}" for n in notes)
    return "\n".join(lines)
