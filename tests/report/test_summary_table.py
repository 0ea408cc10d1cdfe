"""The end-of-run table at 80 and at 200 columns: nothing cut, every number shown."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from harness.cli.summary_table import comparison_rows, na_notes, print_summary, summary_rows
from harness.metrics.summary import Accumulator
from harness.workload.records import RolloutRecord, TurnRecord

MS = 1_000_000
S = 1_000_000_000
TRANSPORTS = ("http", "http-chained", "ws", "ws-store", "ws-append")


def _summary() -> dict[str, Any]:
    """Five transports with long rollouts (six-digit milliseconds), errors of both kinds and
    40 ms responses (burst peak n/a)."""
    acc = Accumulator()
    for k, name in enumerate(TRANSPORTS):
        for rid in range(6):
            start = (100 * rid + 1) * S
            end = start + (103_456 + 1_000 * k + 37 * rid) * MS
            failed = name == "http" and rid == 5
            acc.add_turn(
                TurnRecord(
                    name,
                    rid,
                    0,
                    sent_ns=start,
                    first_event_ns=start + 2 * MS,
                    first_token_ns=start + (20 + k) * MS,
                    last_token_ns=start + (60 + k) * MS,
                    done_ns=start + (61 + k) * MS,
                    status="failed" if failed else "completed",
                    error_kind="rate_limited" if failed else "",
                    output_tokens=41,
                    burst_tokens_max=41,
                )
            )
            acc.add_rollout(
                RolloutRecord(
                    name,
                    rid,
                    intended_start_ns=start,
                    start_ns=start,
                    end_ns=end,
                    turns=1,
                    errors=int(failed),
                    status="failed" if failed else "completed",
                )
            )
    acc.add_rollout(RolloutRecord("ws", 9, start_ns=S, status="error", error_kind="connect"))
    return acc.summary("wide-and-narrow")


def _render(summary: dict[str, Any], width: int) -> str:
    out = io.StringIO()
    print_summary(summary, Path("results/x"), Console(file=out, width=width))
    return out.getvalue()


@pytest.mark.parametrize("width", [80, 200])
def test_every_number_shown_and_none_cut(width: int) -> None:
    summary = _summary()
    text = _render(summary, width)
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    _, rows = summary_rows(summary)
    assert len(rows) == len(TRANSPORTS)
    for row in rows:
        for cell in row:
            assert cell in text, (width, cell)
    # long enough to be cut at 80 columns before (a too-few-samples mark may follow)
    assert any(re.match(r"10\d,\d{3}\.\d", cell) for cell in rows[0])
    _, c_rows = comparison_rows(summary)
    assert len(c_rows) == len(TRANSPORTS) - 1
    for row in c_rows:  # "http-chained vs http" and "[0.99, 0.99]" each on one line
        for cell in row:
            assert cell in text, (width, cell)


def test_the_layout_follows_the_width() -> None:
    summary = _summary()
    wide = _render(summary, 200)
    narrow = _render(summary, 80)
    # wide: one row per transport, the headers on top
    assert any(line.lstrip("│ ").startswith("http-chained ") for line in wide.splitlines())
    # narrow: one row per figure, the transports across (stacked when they do not fit)
    assert any(line.lstrip("│ ").startswith("rollout p99 ms ") for line in narrow.splitlines())
    assert "figure" in narrow and "figure" not in wide


def test_turn_and_rollout_errors_are_separate_columns() -> None:
    summary = _summary()
    headers, rows = summary_rows(summary)
    assert "errors" not in headers
    by_name = {r[0]: dict(zip(headers, r, strict=True)) for r in rows}
    assert by_name["http"]["turn errors"] == "1"
    assert by_name["http"]["rollout errors"] == "1"
    assert by_name["ws"]["turn errors"] == "0"
    assert by_name["ws"]["rollout errors"] == "1"


def test_burst_peak_na_with_its_reason() -> None:
    summary = _summary()
    headers, rows = summary_rows(summary)
    col = headers.index("burst TPS peak")
    assert {r[col] for r in rows} == {"n/a"}
    (note,) = na_notes(summary)
    assert note == (
        "burst TPS peak n/a (no response long enough to fill a 100 ms window): "
        + ", ".join(TRANSPORTS)
    )
    assert note in _render(summary, 200)
