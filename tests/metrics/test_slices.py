"""Time slices (harness/metrics/slices.py): exact per-slice statistics on hand-built records."""

from __future__ import annotations

import math
import random
from dataclasses import asdict
from typing import Any

import pandas as pd
import pytest

from harness.metrics import slices as SL
from harness.metrics.summary import Accumulator
from harness.workload.records import TurnRecord, csv_fields

MS = 1_000_000
S = 1_000_000_000
HALF = S // 2


def _frame(recs: list[TurnRecord]) -> pd.DataFrame:
    """The rows as ``turns.csv.gz`` holds them."""
    keep = csv_fields(TurnRecord)
    return pd.DataFrame([{k: v for k, v in asdict(r).items() if k in keep} for r in recs])


def _turn(
    transport: str, rollout: int, sent: int, ttft_ms: float, turn_ms: float, **kw: Any
) -> TurnRecord:
    first = sent + round(ttft_ms * MS)
    done = sent + round(turn_ms * MS)
    return TurnRecord(
        transport,
        rollout,
        0,
        status=kw.pop("status", "completed"),
        intended_start_ns=kw.pop("intended", sent),
        sent_ns=sent,
        first_event_ns=first,
        first_token_ns=first,
        first_output_ns=first,
        last_token_ns=done,
        done_ns=done,
        **kw,
    )


def _hand_built() -> list[TurnRecord]:
    t0 = 10 * S
    return [
        # slice 0 [0, 0.5 s): four turns, TTFT 10/20/30/40 ms, 100 output tokens over 50 ms
        _turn("http", 1, t0, 10, 60, output_tokens=100),
        _turn("http", 2, t0 + 100 * MS, 20, 70),
        _turn("http", 3, t0 + 200 * MS, 40, 90),
        _turn("http", 4, t0 + 300 * MS, 30, 80),
        # slice 1 [0.5, 1 s): nothing ended (a stall)
        # slice 2 [1, 1.5 s): TTFT 100 and 200 ms, and one failure after 50 ms
        _turn("http", 5, t0 + 1000 * MS, 100, 300),
        _turn("http", 6, t0 + 1050 * MS, 200, 400),
        TurnRecord("http", 7, 0, status="error", sent_ns=t0 + 1100 * MS, done_ns=0),
        # another transport, its own clock: first intended start 50 s, first turn ends at 0.2 s
        _turn("ws", 1, 50 * S + 100 * MS, 5, 100, intended=50 * S),
    ]


def test_slice_math_exact_per_slice() -> None:
    table = SL.slice_table(_frame(_hand_built()), HALF, transports=["ws", "http"])
    assert list(table.columns) == SL.columns()
    assert list(table["transport"]) == ["ws", "http", "http", "http"]
    ws, s0, s1, s2 = (table.iloc[i] for i in range(4))

    assert (ws["slice"], ws["turns"], ws["ttft_p50_ms"], ws["turn_p99_ms"]) == (0, 1, 5.0, 100.0)

    assert (s0["start_s"], s0["end_s"]) == (0.0, 0.5)
    assert s0["turns"] == 4 and s0["errors"] == 0
    assert s0["turns_per_s"] == 8.0
    # nearest rank of 10, 20, 30, 40: p50 the 2nd, p90 and p99 the 4th
    assert (s0["ttft_p50_ms"], s0["ttft_p90_ms"], s0["ttft_p99_ms"]) == (20.0, 40.0, 40.0)
    assert (s0["turn_p50_ms"], s0["turn_p90_ms"]) == (70.0, 90.0)
    # no reasoning: TTFOT is TTFT
    assert s0["ttfot_p50_ms"] == 20.0 and s0["ttfot_n"] == 4
    # 100 tokens between 10 ms and 60 ms, all inside the slice: 100 / 0.5 s
    assert s0["output_tokens_per_s"] == pytest.approx(200.0)

    assert s1["slice"] == 1 and s1["turns"] == 0 and s1["ttft_n"] == 0
    assert math.isnan(s1["ttft_p50_ms"]) and s1["turns_per_s"] == 0.0

    assert s2["turns"] == 2 and s2["errors"] == 1 and s2["errors_per_s"] == 2.0
    assert (s2["ttft_p50_ms"], s2["ttft_p99_ms"], s2["ttft_n"]) == (100.0, 200.0, 2)


def test_warmup_rollouts_are_dropped_but_keep_the_origin() -> None:
    recs = _hand_built()
    table = SL.slice_table(_frame(recs), HALF, warmup_rollouts=5)
    http = table[table["transport"] == "http"]
    # rollouts 1-4 were warm-up: slice 0 and 1 empty, t = 0 still the pass's start
    assert list(http["turns"]) == [0, 0, 2]
    assert list(http["errors"]) == [0, 0, 1]


def test_a_turn_belongs_to_the_slice_it_ended_in() -> None:
    # sent in slice 0, ended in slice 1 (a 600 ms turn)
    table = SL.slice_table(_frame([_turn("http", 1, S, 10, 600)]), HALF)
    assert list(table["turns"]) == [0, 1]


def test_one_slice_over_the_pass_gives_the_summary_percentiles() -> None:
    rng = random.Random(7)
    recs = [
        _turn("http", i, S + i * MS, rng.uniform(1, 900) + rng.random() / 1000, 1000.0)
        for i in range(1, 301)
    ]
    acc = Accumulator()
    for rec in recs:
        acc.add_turn(rec)
    summary = acc.summary("r")["transports"]["http"]["ttft_ms"]
    row = SL.slice_table(_frame(recs), 10 * S).iloc[0]
    for stat in SL.STATS:
        assert round(row[f"ttft_{stat}_ms"], 3) == summary[stat]


def test_too_few_marks_follow_the_sample_size_rule() -> None:
    table = SL.slice_table(_frame(_hand_built()), HALF)
    http = table[table["transport"] == "http"]
    # 4 values: enough for a p50 (needs 2), not for a p90 (10)
    assert list(SL.too_few(http, "ttft", "p50")) == [False, True, False]
    assert list(SL.too_few(http, "ttft", "p90")) == [True, True, True]


def test_auto_width_and_bad_width() -> None:
    frame = _frame(_hand_built())
    assert SL.auto_slice_ns(frame) == SL.AUTO_MIN_NS
    with pytest.raises(ValueError, match="slice_ns"):
        SL.slice_table(frame, 0)


def test_token_spread_by_prefix_sums_agrees_with_the_direct_sum(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # fine slices over many responses take the n log n path: the same rates up to float noise
    from harness.metrics import timeseries as T

    rng = random.Random(3)
    first = [rng.randrange(1, 10**10) for _ in range(2000)]
    last = [f + rng.randrange(0, 3 * 10**9) for f in first]
    tokens = [rng.randrange(0, 600) for _ in first]
    monkeypatch.setattr(T, "_DIRECT_MAX", 10**18)
    direct = T.token_rate_series(first, last, tokens, bucket_ns=7 * MS, origin_ns=5)
    monkeypatch.setattr(T, "_DIRECT_MAX", 0)
    sorted_ = T.token_rate_series(first, last, tokens, bucket_ns=7 * MS, origin_ns=5)
    assert list(direct[0]) == list(sorted_[0])
    assert sorted_[1] == pytest.approx(direct[1], rel=1e-9, abs=1e-6)
    assert sorted_[1].sum() == pytest.approx(direct[1].sum(), rel=1e-12)
