"""What went wrong in a run, per transport: each error kind once, with its count and one example.

Pure: counts from the summary's ``errors_by_kind``, examples from the run's first failed turn
of each kind; the summary's ``errors`` block and the console's error lines both come from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.metrics.results_model import (
    Counts,
    Summary,
    TransportSummary,
    as_summary,
    as_transport,
)
from harness.wire.plural import counted

#: error kinds named in a validity reason (the rest are in the summary's ``errors`` block)
TOP_KINDS = 3


def error_block(
    transports: Mapping[str, TransportSummary | Mapping[str, Any]],
    examples: Mapping[str, Mapping[str, str]],
) -> dict[str, dict[str, dict[str, Any]]]:
    """``{transport: {kind: {"count": n, "example": message}}}``, most frequent kind first.

    ``transports`` is the summary's ``transports`` block; transports without errors are left out.
    """
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name, t in transports.items():
        kinds = as_transport(t).errors_by_kind
        if not kinds:
            continue
        seen = examples.get(name, {})
        out[name] = {
            kind: {"count": int(n), "example": seen.get(kind)}
            for kind, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
        }
    return out


def kinds_text(kinds: Mapping[str, Mapping[str, Any]], top: int = TOP_KINDS) -> str:
    """``connection x12: <example>; timeout x2`` — the top kinds, the first with its example."""
    parts: list[str] = []
    for i, (kind, entry) in enumerate(list(kinds.items())[:top]):
        example = entry.get("example")
        parts.append(
            f"{kind} x{entry['count']}: {example}"
            if i == 0 and example
            else f"{kind} x{entry['count']}"
        )
    more = len(kinds) - top
    if more > 0:
        parts.append(f"{more} more kind{'s' if more > 1 else ''}")
    return "; ".join(parts)


def error_lines(doc: Summary | Mapping[str, Any]) -> list[str]:
    """The console's error summary: per transport, each kind once with its count and example."""
    summary = as_summary(doc) or Summary()
    lines: list[str] = []
    for name, kinds in summary.errors.items():
        t = summary.transports.get(name)
        turns = t.turns if t is not None else Counts()
        lines.append(f"errors {name}: {turns.errors} of {counted(turns.count, 'turn')} failed")
        for kind, entry in kinds.items():
            example = entry.example
            lines.append(f"  {kind} x{entry.count}" + (f": {example}" if example else ""))
    return lines
