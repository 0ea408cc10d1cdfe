"""The run lifecycle's rules on synthetic inputs: pool, baseline, schedules, client health, validity."""

from __future__ import annotations

from pathlib import Path

from harness.metrics.hdr import Histogram
from harness.metrics.validity import MIN_JUDGED_TURNS
from harness.run.health import ClientHealth
from harness.run.measurement import Measurement, pool_size
from harness.run.runner import RunOptions, transport_options
from harness.run.schedule_stats import ScheduleStats
from harness.run.validity import client_reasons
from harness.workload.records import RolloutRecord, TurnRecord
from harness.workload.scenario import Scenario, validate_scenario

DOC = {
    "name": "synthetic",
    "seed": 1,
    "transports": ["ws", "http"],
    "rollout": {"count": 4, "tool_calls": 1},
    "load": {"mode": "open", "arrival": {"process": "constant", "rate": 10}},
}


def _scenario(**load: object) -> Scenario:
    return validate_scenario({**DOC, "load": {**DOC["load"], **load}}, "synthetic")


def _lag(ms: float, n: int = 100) -> Histogram:
    h = Histogram()
    for _ in range(n):
        h.record_ns(round(ms * 1e6))
    return h


def _ok_turn(rollout: int, index: int) -> TurnRecord:
    return TurnRecord(
        transport="http",
        rollout_id=rollout,
        turn_index=index,
        status="completed",
        sent_ns=1_000,
        first_token_ns=2_000,
        last_token_ns=3_000,
        done_ns=4_000,
        output_tokens=5,
    )


def test_the_pool_never_makes_requests_queue_for_a_connection() -> None:
    open_loop = _scenario().load
    assert pool_size(open_loop) == 1024
    assert pool_size(_scenario(max_in_flight=40).load) == 40
    closed = validate_scenario({**DOC, "load": {"mode": "closed", "concurrency": 30}}, "x").load
    assert pool_size(closed) == 60
    # A/B and run build their clients through the same function.
    assert transport_options("http://x/v1", RunOptions(), open_loop).max_connections == 1024


def test_schedules_merge_and_travel_between_processes() -> None:
    a = ScheduleStats(intended=2)
    rec = RolloutRecord(rollout_id=0, transport="http", start_ns=5_000_000, intended_start_ns=0)
    assert a.observe(rec, late_ns=1_000_000) is True
    b = ScheduleStats.from_state(ScheduleStats(intended=2, started=2, lag_max_ns=9).to_state())
    a.merge(b)
    assert a.as_dict() == {
        "intended": 4,
        "started": 3,
        "late": 1,
        "dropped": 0,
        # intended = started + cancelled + dropped + not_started: one begun, never recorded
        "cancelled": 1,
        "not_started": 0,
        "lag_mean_ms": round(5 / 3, 3),
        "lag_max_ms": 5.0,
    }


def test_loop_and_cpu_rules_judge_each_process_by_name() -> None:
    load = _scenario(max_schedule_lag_ms=1).load
    stalled = ClientHealth(cpu_share=0.99, wall_s=2.0, loop_lag=_lag(2.0), name="worker w1")
    assert client_reasons(stalled, load) == [
        "worker w1: client event loop stalled: wake-up lag p99 2.0 ms exceeds "
        "load.max_schedule_lag_ms 1",
        "worker w1: client CPU saturated: 99% of one core over the run",
    ]
    # Under a second, a late wake-up is one hiccup of the machine, not a stall.
    assert client_reasons(ClientHealth(0.1, 0.5, _lag(2.0)), load) == []


def test_a_merged_run_keeps_each_process_and_judges_it(tmp_path: Path) -> None:
    scenario = _scenario(max_schedule_lag_ms=1)
    children = []
    for i, lag_ms in enumerate((0.5, 2.0)):
        child = Measurement(scenario, tmp_path / f"p{i}", {"run_id": f"p{i}"}, ["http"], planned=2)
        child.clients.append(ClientHealth(cpu_share=0.2, wall_s=2.0, loop_lag=_lag(lag_ms)))
        # Enough completed turns for the client's health to be judged at all.
        for turn in range(MIN_JUDGED_TURNS):
            child.add_turn(_ok_turn(i, turn))
        child.schedules["http"].intended = 2
        if i == 1:
            child.stop_early("run interrupted before every rollout finished")
        children.append(child.to_state())
        child.close()
    run = Measurement(
        scenario, tmp_path / "run", {"run_id": "run"}, ["http"], planned=4, several_processes=True
    )
    for i, state in enumerate(children):
        run.merge_state(state, f"client process {i}")
    summary = run.finish()
    assert summary["partial"] is True and summary["valid"] is False
    assert summary["invalid_reasons"] == [
        "client process 1: run interrupted before every rollout finished",
        "client process 1: client event loop stalled: wake-up lag p99 2.0 ms exceeds "
        "load.max_schedule_lag_ms 1",
    ]
    client = summary["client"]
    assert client["procs"] == 2 and client["cpu_share"] == 0.2
    assert [p["loop_lag_ms"]["p99"] for p in client["per_process"]] == [0.5, 2.0]
    assert client["loop_lag_ms"]["max"] == 2.0
    assert summary["load"]["rollouts_planned"] == 4
    assert (tmp_path / "run" / "summary.json").is_file()
