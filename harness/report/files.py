"""What every report writes: file names, the number format of a table cell, atomic writes.

Shared by the run report (:mod:`.render`) and the sweep report (:mod:`.sweep`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.metrics.results_model import (
    Comparison,
    Summary,
    TransportSummary,
    as_transport,
)
from harness.metrics.sample_size import min_samples
from harness.report.document import Document, to_html, to_markdown

REPORT_MD = "report.md"
REPORT_HTML = "report.html"
PLOTS_DIR = "plots"
#: after a table value computed from too few samples (docs/metrics.md §1.4)
TOO_FEW_MARK = "*"


#: the first columns of every per-transport table (console and report): what ran, what failed
COUNT_HEADERS = ["transport", "rollouts", "turns", "turn errors", "rollout errors"]


def count_cells(name: str, t: TransportSummary) -> list[str]:
    """The :data:`COUNT_HEADERS` cells of one transport."""
    return [name, *map(str, (t.rollouts.count, t.turns.count, t.turns.errors, t.rollouts.errors))]


@dataclass(frozen=True, slots=True)
class Rendered:
    report_md: Path
    report_html: Path
    plots: list[Path]


def fmt(value: Any, digits: int = 1, suffix: str = "") -> str:
    """A number for a table cell: thousands separators, ``-`` for missing/NaN."""
    if value is None:
        return "-"
    try:
        f = float(value)
    except (TypeError, ValueError):
        return str(value)
    if f != f:
        return "-"
    return f"{f:,.{digits}f}{suffix}"


def fmt_ci(lo: Any, hi: Any, digits: int = 2, reason: str | None = None) -> str:
    """A confidence interval for a table cell: ``[lo, hi]``, or why there is none.

    ``reason`` (a summary's ``rollout_speedup_ci_reason``, "n=2: too few for a CI (need 5)")
    wins over brackets: an interval from too few samples is not shown at all.
    """
    if reason:
        return reason
    if lo is None or hi is None:
        return "-"
    return f"[{fmt(lo, digits)}, {fmt(hi, digits)}]"


#: the first columns of every speedup table (console and report): :func:`speedup_cells`
SPEEDUP_HEADERS = [
    "candidate vs baseline",
    "rollout speedup",
    "95 % CI",
    "rollout latency reduction",
    "TTFT p50 reduction",
]


def speedup_cells(c: Comparison, digits: int, times: str = "×") -> list[str]:
    """The :data:`SPEEDUP_HEADERS` cells of one comparison of the summary."""
    lo, hi = (c.rollout_speedup_ci95 or [None, None])[:2]
    return [
        c.pair,
        fmt(c.rollout_speedup, digits, times),
        fmt_ci(lo, hi, digits, c.rollout_speedup_ci_reason),
        fmt(c.rollout_latency_reduction_pct, 1, " %"),
        fmt(c.ttft_p50_reduction_pct, 1, " %"),
    ]


def stat_cell(
    transport: TransportSummary | Mapping[str, Any],
    group: str,
    key: str,
    digits: int,
    *,
    why: bool = True,
) -> str:
    """Statistic ``<group>.<key>`` for a table cell, followed by :data:`TOO_FEW_MARK` when it
    rests on fewer samples than it needs, or ``n/a`` where the summary says why it is null
    (with the reason in parentheses when ``why``)."""
    t = as_transport(transport)
    reason = na_reason(t, group, key)
    if reason:
        return f"n/a ({reason})" if why else "n/a"
    text = fmt(t.stat(group, key), digits)
    if text != "-" and f"{group}.{key}" in t.too_few_samples:
        text += TOO_FEW_MARK
    return text


def na_reason(t: TransportSummary, group: str, key: str) -> str | None:
    """Why statistic ``<group>.<key>`` is null (``burst_peak_reason``), if the summary says."""
    block = t.group(group)
    if block is None or block.stat(key) is not None:
        return None
    reason = block.get(f"{key}_reason")
    return str(reason) if reason else None


def too_few_note(summary: Summary) -> str | None:
    """The footnote explaining :data:`TOO_FEW_MARK`, when a transport of ``summary`` has one."""
    if not any(t.too_few_samples for t in summary.transports.values()):
        return None
    # short enough for one 80-column line: the summary's too_few_samples has the counts
    return (
        f"{TOO_FEW_MARK} too few samples for this statistic (p50 needs {min_samples('p50')}, "
        f"p90 {min_samples('p90')}, p99 {min_samples('p99')})"
    )


def write_report(
    doc: Document, folder: Path, md: str = REPORT_MD, page: str = REPORT_HTML
) -> tuple[Path, Path]:
    """Write ``doc`` into ``folder`` as Markdown and as self-contained HTML; returns both paths."""
    paths = folder / md, folder / page
    write_text_atomic(paths[0], to_markdown(doc))
    write_text_atomic(paths[1], to_html(doc, folder))
    return paths


def write_text_atomic(path: Path, text: str | bytes) -> None:
    """Write ``text`` (UTF-8) or bytes to ``path`` through a temporary file: a reader never sees
    half of it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    os.replace(tmp, path)
