"""What a Locust worker reports to Locust's statistics: the metric table's values (imports
gevent, never patches it; no locust)."""

from __future__ import annotations

from typing import Any

from harness.locust_driver.protocol import RunConfig
from harness.locust_driver.worker import WorkerRun, WorkerSide
from harness.metrics import definitions as D
from harness.metrics.summary import Accumulator
from harness.workload.records import RolloutRecord, TurnRecord

MS = 1_000_000
S = 1_000_000_000


def _side() -> tuple[WorkerSide, list[dict[str, Any]]]:
    fired: list[dict[str, Any]] = []
    side = WorkerSide(send=lambda *_: None, fire=lambda **kw: fired.append(kw))
    side.run = WorkerRun(RunConfig("r", "http://127.0.0.1:1", "m", 0), Accumulator())
    return side, fired


def test_turn_times_are_the_tables_and_failed_turns_count_with_how_long_they_ran() -> None:
    side, fired = _side()
    ok = TurnRecord("http", 1, 0, sent_ns=S, first_token_ns=S + 7 * MS, last_token_ns=S + 9 * MS,
                    done_ns=S + 12 * MS, status="completed", output_tokens=3)  # fmt: skip
    failed = TurnRecord("ws", 2, 0, sent_ns=S, first_token_ns=S + 2 * MS, done_ns=S + 5 * MS,
                        status="failed", error_kind="server")  # fmt: skip
    never_sent = TurnRecord("http", 3, 0, status="error", error_kind="connect")
    for rec in (ok, failed, never_sent):
        side.on_turn(rec)
    got = [(f["name"], f["response_time"], f["exception"] is None) for f in fired]
    assert got == [
        ("http ttft", D.sample(D.get("ttft_ms"), ok), True),
        ("http turn", D.sample(D.get("turn_ms"), ok), True),
        ("ws turn", 5.0, False),
        ("http turn", 0.0, False),
    ]
    assert got[0][1] == 7.0 and got[1][1] == 12.0


def test_rollout_times_are_the_tables_from_the_intended_start() -> None:
    side, fired = _side()
    late = RolloutRecord("http", 1, intended_start_ns=S, start_ns=S + 3 * MS, end_ns=2 * S,
                         status="completed", turns=2)  # fmt: skip
    unscheduled = RolloutRecord("http", 2, start_ns=S, end_ns=S + 40 * MS, status="completed")
    failed = RolloutRecord("ws", 3, intended_start_ns=S, start_ns=S, end_ns=S + 9 * MS,
                           status="error", error_kind="server")  # fmt: skip
    for rec in (late, unscheduled, failed):
        side.on_rollout(rec)
    rollout = D.get("rollout_ms")
    assert [f["response_time"] for f in fired] == [
        D.sample(rollout, late),
        D.sample(rollout, unscheduled),
        9.0,
    ]
    assert [f["response_time"] for f in fired[:2]] == [1000.0, 40.0]
    assert [f["exception"] is None for f in fired] == [True, True, False]
