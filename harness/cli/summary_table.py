"""The end-of-run table every measuring command prints (``run``, ``run --procs``, ``locust``).

The console's width decides the layout: one row per transport when every column fits
(headers may wrap over two lines), else transposed (one row per figure, one column per
transport), in as many stacked tables as the transports need.  No cell is ever cut
(``103…``): a number that does not fit moves the table to the narrow layout instead.
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from harness.metrics import definitions as D
from harness.metrics import slo, token_counts
from harness.metrics.results_model import Summary, TransportSummary, as_summary
from harness.report.files import (
    COUNT_HEADERS,
    SPEEDUP_HEADERS,
    TOO_FEW_MARK,
    count_cells,
    na_reason,
    speedup_cells,
    stat_cell,
    too_few_note,
)
from harness.report.verdict import verdict_kind, verdict_line
from harness.run.progress import schedule_table, titled_table

#: the width of piped output (CI logs, files) when COLUMNS does not say
PIPED_WIDTH = 160
_STYLE = {"bad": "bold red", "note": "bold yellow", "ok": "bold green"}


def make_console() -> Console:
    """The console of the end-of-run output: a terminal's width (rich reads COLUMNS too);
    piped output gets COLUMNS or a fixed wide layout instead of rich's 80-column default."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console()
    return Console(width=PIPED_WIDTH)


def _stat_cell(t: TransportSummary, m: D.Metric, key: str) -> str:
    if m.unit == "ratio":
        digits = 2  # 0.83: one digit would put every warm cache at 0.8 or 0.9
    else:
        digits = 0 if m.unit in ("tok/s", "count") or m.stat(key).name == "count" else 1
    return stat_cell(t, m.group, key, digits, why=False)


def summary_rows(doc: Summary | Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Headers and one row per transport of the end-of-run table."""
    summary = as_summary(doc) or Summary()
    headers = [
        *COUNT_HEADERS,
        *(m.title(stat.key, with_unit=True) for m, stat in D.cli_columns(summary)),
    ]
    rows = [
        [*count_cells(name, t), *(_stat_cell(t, m, stat.key) for m, stat in D.cli_columns(summary))]
        for name, t in summary.transports.items()
    ]
    return headers, rows


def na_notes(doc: Summary | Mapping[str, Any]) -> list[str]:
    """One line per statistic shown as n/a: why, and for which transports."""
    summary = as_summary(doc) or Summary()
    by_reason: dict[tuple[str, str], list[str]] = {}
    for name, t in summary.transports.items():
        for m, stat in D.cli_columns(summary):
            reason = na_reason(t, m.group, stat.key)
            if reason:
                by_reason.setdefault((m.title(stat.key), reason), []).append(name)
    return [
        f"{title} n/a ({reason}): {', '.join(names)}"
        for (title, reason), names in by_reason.items()
    ]


# -- layout ---------------------------------------------------------------------------------


def _min_header_width(text: str, lines: int = 2) -> int:
    """The narrowest column that shows ``text`` in at most ``lines`` lines, wrapped at spaces."""
    shortest = max((len(w) for w in text.split()), default=1)
    fits = (
        width
        for width in range(shortest, len(text) + 1)
        if len(textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)) <= lines
    )
    return next(fits, len(text))


def _column_widths(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, header_lines: int
) -> list[int]:
    """Per column: its longest cell, kept on one line, and room for the header in
    ``header_lines`` lines (wrapped at spaces)."""
    return [
        max(max((len(r[i]) for r in rows), default=0), _min_header_width(h, header_lines))
        for i, h in enumerate(headers)
    ]


def _width(widths: Sequence[int]) -> int:
    """Width of a rich table with the default box and padding (1 + per column: cell + 3)."""
    return 1 + sum(w + 3 for w in widths)


def _table(title: str, headers: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> Table:
    """The table with its column widths set here: rich, left to fit a width on its own,
    squeezes a column below its widest cell and wraps "[1.07, 1.08]" at its space."""
    table = titled_table(title, headers[0], *headers[1:])
    widths = _column_widths(headers, rows, header_lines=1)
    if _width(widths) > width:
        widths = _column_widths(headers, rows, header_lines=2)
    fixed = _width(widths) <= width
    for col, w in zip(table.columns, widths, strict=True):
        if fixed:
            col.width = w
        # narrower than every layout: a cell folds rather than turn into "103…"
        col.overflow = "fold"
    for row in rows:
        table.add_row(*row)
    # a title wider than its narrow table would wrap mid-phrase; let the table take its width
    table.min_width = min(len(title), width)
    return table


def fit_tables(
    title: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    width: int,
    *,
    corner: str = "",
) -> list[Table]:
    """``rows`` (first cell names the row) as one table if it fits ``width``, else transposed:
    one row per column of ``rows``, one column per row, stacked in as many tables as needed."""
    if not rows or _width(_column_widths(headers, rows, header_lines=2)) <= width:
        return [_table(title, headers, rows, width)]
    names = [r[0] for r in rows]
    labels = list(headers[1:])
    label_w = max(len(corner), *(len(h) for h in labels)) + 3 + 1
    per_col = [max(len(r[0]), *(len(c) for c in r[1:])) + 3 for r in rows]
    tables: list[Table] = []
    start = 0
    while start < len(rows):
        stop, used = start, label_w
        while stop < len(rows) and (stop == start or used + per_col[stop] <= width):
            used += per_col[stop]
            stop += 1
        span = f"{start + 1}" if stop - start == 1 else f"{start + 1}–{stop}"
        part = f" ({span} of {len(rows)})" if stop - start < len(rows) else ""
        cols = [
            [label, *(rows[j][i + 1] for j in range(start, stop))] for i, label in enumerate(labels)
        ]
        tables.append(_table(title + part, [corner, *names[start:stop]], cols, width))
        start = stop
    return tables


def _relayout(table: Table | None, width: int) -> list[Table]:
    """A rich table built elsewhere (the load generator's), fitted the same way."""
    if table is None:
        return []
    headers = [str(c.header) for c in table.columns]
    cells = [[str(x) for x in c.cells] for c in table.columns]
    rows = [list(r) for r in zip(*cells, strict=True)] if cells else []
    title = str(table.title or "")
    return fit_tables(title, headers, rows, width, corner=headers[0] if headers else "")


def comparison_rows(doc: Summary | Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    summary = as_summary(doc) or Summary()
    return SPEEDUP_HEADERS, [speedup_cells(c, 2, "x") for c in summary.comparisons]


def print_summary(
    doc: Summary | Mapping[str, Any],
    run_dir: Path,
    console: Console | None = None,
    *,
    reasons_said: bool = False,
) -> None:
    """The run's console summary; ``reasons_said``: the caller's first line gave the reasons
    the run is invalid, so they are not repeated (once is read, three times is noise)."""
    summary = as_summary(doc) or Summary()
    # the readers not converted to the model yet (schedule, tokens, slo lines) take the document
    document = summary.to_json()
    console = console or make_console()
    width = console.width
    console.print(
        Text(verdict_line(summary, reasons=not reasons_said), style=_STYLE[verdict_kind(summary)])
    )
    # right under the verdict: a valid run whose outputs ignored the plan is not the workload
    # the scenario describes, and the token table further down is easy to miss
    for line in summary.hint_ignored:
        console.print(Text.assemble(("warning: ", "bold yellow"), line))
    headers, rows = summary_rows(summary)
    for table in fit_tables(f"loopbench — {summary.run_id}", headers, rows, width, corner="figure"):
        console.print(table)
    # the footnote explains a mark: printed only when a cell of this table carries one
    marked = any(cell.endswith(TOO_FEW_MARK) for row in rows for cell in row)
    if marked and (note := too_few_note(summary)):
        console.print(Text(note))
    for note in na_notes(summary):
        console.print(Text(note))
    c_headers, c_rows = comparison_rows(summary)
    if c_rows:
        for table in fit_tables(
            "speedup (paired on identical rollouts)", c_headers, c_rows, width, corner="figure"
        ):
            console.print(table)
    for table in _relayout(schedule_table(document), width):
        console.print(table)
    if tokens := token_counts.line(document):
        console.print(Text(tokens))
    if slo_line := slo.line(document):
        console.print(Text(slo_line))
    for line in summary.warnings:
        console.print(Text.assemble(("warning: ", "bold yellow"), line))
    if summary.valid is False and not reasons_said:
        console.print(
            Text.assemble(("run INVALID: ", "bold red"), "; ".join(summary.invalid_reasons))
        )
    console.print(Text(f"results: {run_dir}"))
    if (run_dir / "report.html").exists():
        console.print(Text(f"report:  {run_dir / 'report.html'}"))
    else:
        console.print(Text(f"report:  none; `loopbench report {run_dir}` renders it"))
