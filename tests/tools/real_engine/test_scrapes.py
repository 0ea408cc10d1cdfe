"""The check's loopbench runs scrape vLLM only at their start and end (issue 38: a scrape of
vLLM's /metrics holds its API server's streams up by 16-19 ms; docs/real-engine.md, "The
scrapes"), and the count of turns that met a scrape."""

from __future__ import annotations

from pathlib import Path

from tools.real_engine.engine import Engine
from tools.real_engine.run import Options, loopbench_argv
from tools.real_engine.scrape_cost import meetings


def test_the_check_never_scrapes_inside_a_window() -> None:
    argv = loopbench_argv(
        Path("s.yaml"), Engine("http://127.0.0.1:1", None, None), "chat", Path("t"), Path("o"), "r"
    )
    interval = float(argv[argv.index("--server-metrics-interval") + 1])
    # a window running longer than this is stopped, so the poller's first in-run scrape
    # (one interval after the start) can never come
    assert interval >= Options().run_timeout_s


def test_a_turn_meets_a_scrape_between_its_send_and_its_first_token() -> None:
    ms = 1_000_000
    turns = [
        {"sent_ns": str(100 * ms), "first_token_ns": str(145 * ms)},  # scrape at 120: met, late
        {"sent_ns": str(300 * ms), "first_token_ns": str(306 * ms)},  # nothing near
        {"sent_ns": str(500 * ms), "first_token_ns": str(540 * ms)},  # late, no scrape
    ]
    assert meetings(turns, [120 * ms, 900 * ms], late_ms=20.0) == {
        "met": 1,
        "late": 2,
        "late_met": 1,
    }
