"""The cached / input token ratio (summary ``cache`` group) and the live export's interval
percentiles, against hand computations on small known sets of records."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest
from rich.console import Console

from harness.cli.summary_table import print_summary
from harness.metrics.hdr import Histogram
from harness.metrics.live import IntervalPercentiles
from harness.metrics.summary import Accumulator
from harness.report.render import cache_line
from harness.workload.records import TurnRecord

MS = 1_000_000


def _turn(
    transport: str,
    rollout: int,
    index: int,
    input_tokens: int,
    cached: int,
    *,
    status: str = "completed",
    compaction: bool = False,
) -> TurnRecord:
    return TurnRecord(
        transport,
        rollout,
        index,
        status=status,
        input_tokens=input_tokens,
        cached_tokens=cached,
        output_tokens=10,
        compaction=compaction,
    )


RECORDS = [
    # warm-up rollout 0: left out
    _turn("ws", 0, 0, 5000, 5000),
    _turn("ws", 1, 0, 400, 0),
    _turn("ws", 1, 1, 600, 400),
    _turn("ws", 1, 2, 800, 600),
    _turn("ws", 2, 0, 400, 300),
    _turn("ws", 2, 1, 600, 500),
    # a compaction is no turn of the conversation
    _turn("ws", 2, 2, 9000, 0, compaction=True),
    # a failed turn without usage says nothing about the cache (it counts as a turn error)
    _turn("ws", 2, 2, 0, 0, status="failed"),
    _turn("http", 1, 0, 400, 0),
    _turn("http", 1, 1, 600, 0),
]


def _acc(records: list[TurnRecord] = RECORDS) -> Accumulator:
    acc = Accumulator(warmup_rollouts=1)
    for rec in records:
        acc.add_turn(rec)
    return acc


def test_cached_ratio_per_transport_and_by_turn_index_is_the_ratio_of_token_sums() -> None:
    cache = _acc().summary("c")["transports"]["ws"]["cache"]
    # by hand: input 400+600+800+400+600 = 2800, cached 0+400+600+300+500 = 1800
    assert cache["input_tokens"] == 2800
    assert cache["cached_tokens"] == 1800
    assert cache["cached_ratio"] == round(1800 / 2800, 4) == 0.6429
    assert cache["by_turn"] == [
        # turn 0: (0 + 300) / (400 + 400); turn 1: (400 + 500) / (600 + 600); turn 2: 600 / 800
        {"turn_index": 0, "turns": 2, "input_tokens": 800, "cached_tokens": 300,
         "cached_ratio": 0.375},
        {"turn_index": 1, "turns": 2, "input_tokens": 1200, "cached_tokens": 900,
         "cached_ratio": 0.75},
        {"turn_index": 2, "turns": 1, "input_tokens": 800, "cached_tokens": 600,
         "cached_ratio": 0.75},
    ]  # fmt: skip
    http = _acc().summary("c")["transports"]["http"]["cache"]
    assert http["cached_ratio"] == 0.0 and http["input_tokens"] == 1000


def test_no_reported_input_gives_no_ratio_and_no_line() -> None:
    summary = _acc([_turn("http", 1, 0, 0, 0)]).summary("c")
    assert summary["transports"]["http"]["cache"] == {
        "cached_ratio": None,
        "input_tokens": 0,
        "cached_tokens": 0,
        "by_turn": [],
    }
    assert cache_line(summary) is None


def test_merged_processes_give_the_cache_of_one() -> None:
    half = len(RECORDS) // 2
    a, b = _acc(RECORDS[:half]), _acc(RECORDS[half:])
    merged = Accumulator.from_state(a.to_state()).merge(Accumulator.from_state(b.to_state()))
    assert (
        merged.summary("c")["transports"]["ws"]["cache"]
        == (_acc().summary("c")["transports"]["ws"]["cache"])
    )


def test_the_console_and_the_report_show_the_ratio(tmp_path: Path) -> None:
    summary = _acc().summary("c")
    out = io.StringIO()
    print_summary(summary, tmp_path, Console(file=out, width=200))
    text = out.getvalue()
    assert "cached" in text and "ratio" in text and "0.64" in text
    assert cache_line(summary) == (
        "Cached input tokens (cached / input, as the server reported them): http 0.00 (0 of "
        "1,000), ws 0.64 (1,800 of 2,800); by turn index in summary.json (cache.by_turn) and the "
        "plot below."
    )


def test_live_counters_are_the_summary_counters() -> None:
    live = _acc().live(["ttft_ms"])["ws"]
    assert (live["input_tokens"], live["cached_tokens"]) == (2800, 1800)
    # every output token, the compaction's and the failed turn's included (warm-up not)
    assert live["output_tokens"] == 70
    assert (live["turns"], live["turn_errors"]) == (7, 1)
    unit, counts = live["histograms"]["ttft_ms"]
    assert unit == "us" and sum(counts) == 0


def test_interval_percentiles_are_those_of_what_was_recorded_in_between() -> None:
    h = Histogram()
    for ms in range(1, 101):  # 1 … 100 ms
        h.record_ns(ms * MS)
    iv = IntervalPercentiles()
    (first,) = iv.advance({"ws": {"ttft_ms": h.snapshot()}}).values()
    assert first.samples == 100
    assert first.quantiles == pytest.approx((0.050, 0.090, 0.099), rel=1e-3)
    # the next interval: ten samples of 500 ms only, whatever came before
    for _ in range(10):
        h.record_ns(500 * MS)
    (second,) = iv.advance({"ws": {"ttft_ms": h.snapshot()}}).values()
    assert second.samples == 10
    assert second.quantiles == pytest.approx((0.5, 0.5, 0.5), rel=1e-3)
    # nothing new: no sample, NaN percentiles
    (third,) = iv.advance({"ws": {"ttft_ms": h.snapshot()}}).values()
    assert third.samples == 0 and all(math.isnan(q) for q in third.quantiles)


def test_a_histogram_from_counts_refuses_a_foreign_layout() -> None:
    with pytest.raises(ValueError, match=r"expected .* buckets"):
        Histogram.from_counts("us", [1, 2, 3])
    unit, counts = Histogram().snapshot()
    counts[0] = -1
    with pytest.raises(ValueError, match="negative"):
        Histogram.from_counts(unit, counts)
