"""The receive-stamp diagnostic window and its summary (harness/metrics/rx_stamps.py)."""

from __future__ import annotations

from harness.metrics.rx_stamps import RxStampStats
from harness.workload.records import TurnRecord


def turn(transport: str, diff: float | None, kind: str = "kernel") -> TurnRecord:
    rec = TurnRecord(transport, 0, 0)
    rec.rx_stamp = kind
    rec.rx_user_minus_kernel_us = diff
    return rec


def test_the_window_keeps_the_first_differences_per_transport_and_clears_the_rest() -> None:
    stats = RxStampStats(window=3)
    recs = [turn("http", float(i)) for i in range(5)] + [turn("ws", 7.0), turn("ws", None, "user")]
    for rec in recs:
        stats.add(rec)
    assert [r.rx_user_minus_kernel_us for r in recs[:5]] == [0.0, 1.0, 2.0, None, None]
    http = stats.summary("http")
    assert http == {
        "kernel_turns": 5,
        "user_turns": 0,
        "user_minus_kernel_us": {"count": 3, "p50": 1.0, "p99": 2.0, "max": 2.0, "mean": 1.0},
    }
    ws = stats.summary("ws")
    assert ws is not None and (ws["kernel_turns"], ws["user_turns"]) == (1, 1)
    assert stats.summary("chat") is None


def test_processes_merge_their_counts_and_windows() -> None:
    a, b = RxStampStats(), RxStampStats()
    a.add(turn("http", 10.0))
    b.add(turn("http", 30.0))
    b.add(turn("http", None, "user"))
    a.merge(b.to_state())
    block = a.summary("http")
    assert block is not None
    assert (block["kernel_turns"], block["user_turns"]) == (2, 1)
    assert block["user_minus_kernel_us"]["max"] == 30.0
    assert block["user_minus_kernel_us"]["count"] == 2


def test_a_transport_without_both_stamps_keeps_the_block_shape() -> None:
    stats = RxStampStats()
    stats.add(turn("http", None, "user"))
    block = stats.summary("http")
    assert block == {
        "kernel_turns": 0,
        "user_turns": 1,
        "user_minus_kernel_us": {"count": 0, "p50": None, "p99": None, "max": None, "mean": None},
    }
