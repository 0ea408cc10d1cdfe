"""``make bench-master`` in small: a real master, fake workers, every message accounted for.

The end-to-end test is the only one that catches a fake worker that stops speaking
Locust's protocol or loopbench's messages as the master reads them (a master that
ignores its rows, a final it cannot merge): 4 fake workers for a few seconds.  The unit
tests feed :func:`figures` stamps whose answer is known.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.master_sim.figures import KEEP_UP_LAG_P99_MS, figures, verdict
from tests.runs import ROOT

MS = 1_000_000


def _at(start_ms: float, end_ms: float, rows: int = 10) -> list[float]:
    """A handling stamp; the master's CPU time grows at a quarter of a core."""
    return [start_ms * MS, end_ms * MS, rows, end_ms / 4000]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_small_simulation_handles_every_message_and_reports_sane_figures(
    tmp_path: Path,
) -> None:
    out = tmp_path / "sim.json"
    cmd = ["--workers", "4", "--agents", "20", "--seconds", "4", "--procs", "2"]
    # Four turns a second: the ten-turn rollouts end within the run, so rollout rows and
    # claims reporting a finished rollout are exercised.
    cmd += ["--turn-rate", "4"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.master_sim", *cmd, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=230,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    fig = json.loads(out.read_text())
    m, rows = fig["messages"], fig["rows"]
    assert fig["workers"] == fig["workers_seen_by_master"] == 4
    assert fig["agents"] == 80
    assert fig["every_message_handled"] is True
    # every SHIP_INTERVAL_S (2 s) each: at least once in 4 s of load
    assert m["rows_sent"] == m["rows_handled"] >= 4
    assert m["finals_sent"] == m["finals_handled"] == 4
    assert m["claims_sent"] == m["claims_handled"] > 80  # every agent, and again after a rollout
    assert m["heartbeats_handled"] >= 4 * 4 and m["stats_handled"] >= 4
    assert rows["turn_rows_sent"] == rows["turn_rows_on_disk"] > 0
    assert rows["rollout_rows_sent"] == rows["rollout_rows_on_disk"] > 0
    # 4 turns a second per agent: 80 agents, the ramp and the stop around 4 s of load
    assert 80 < rows["turn_rows_per_s"] < 640
    assert fig["finals"]["from_state_calls"] == fig["finals"]["merge_calls"] == 4
    assert (
        fig["finals"]["merge_ms_per_worker"] > 0 and fig["finals"]["from_state_ms_per_worker"] > 0
    )
    assert 0 < fig["master_cpu_share"] < 1.5
    assert 0 < fig["report_lag_ms"]["p50"] <= fig["report_lag_ms"]["p99"] < 30_000
    assert fig["us_per_row_handled"] > 0 and fig["writer"]["us_per_turn_row"] > 0
    assert fig["plan"]["rollouts"] > 80 and fig["plan"]["ms_per_rollout"] > 0
    assert fig["master_exit_code"] == 0 and fig["fake_workers_exit_codes"] == [0, 0]
    assert "keeps up" in done.stdout and "report lag" in done.stdout


def _log(node: str, sent: list[int], *, turns: int = 10, final_ns: int = 0) -> dict[str, Any]:
    return {
        "node": node,
        "rows_sent_ns": sent,
        "rows_sizes": [[turns, 0]] * len(sent),
        "claims": 0,
        "works": 0,
        "final_sent_ns": final_ns,
        "final_rows": [0, 0],
        "turn_rows": turns * len(sent),
        "rollout_rows": 0,
        "stats_reports": 0,
        "agents": 5,
        "process_cpu_share": 0.05,
    }


def _master(rows: dict[str, list[list[int]]], finals: dict[str, list[list[int]]]) -> dict[str, Any]:
    return {
        "handled_ns": {"loopbench_rows": [s[1] - s[0] for v in rows.values() for s in v]},
        "stamps": {"loopbench_rows": rows, "loopbench_final": finals},
        "timed_ns": {"Accumulator.merge": [2, 4 * MS], "Accumulator.from_state": [2, 10 * MS]},
        "plans": {"seconds": 0.5, "rollouts": 1000},
        "loop_lag": [],
        # (end, generation, pause): only those within the load window count
        "gc": [[1500 * MS, 2, 300 * MS], [1600 * MS, 0, 1 * MS], [9000 * MS, 2, 900 * MS]],
    }


def test_lag_is_matched_message_by_message_and_the_master_keeps_up() -> None:
    logs = [
        _log("a", [0, 500 * MS, 1000 * MS], final_ns=1900 * MS),
        _log("b", [100 * MS, 600 * MS], final_ns=1900 * MS),
    ]
    rows = {
        "a": [_at(1, 2), _at(501, 503), _at(1001, 1010)],
        "b": [_at(101, 104), _at(2000, 2000)],
    }
    finals = {"a": [_at(1950, 1960, 0)], "b": [_at(1950, 1970, 0)]}
    fig = figures(
        logs, _master(rows, finals), rows_on_disk=50, rollout_rows_on_disk=0, offered_turns_per_s=25
    )
    assert fig["every_message_handled"] is True
    # a: 2, 3, 10 ms; b: 4 ms and 1,400 ms (its second report waited)
    assert fig["report_lag_ms"]["p100"] == 1400.0
    assert fig["report_lag_ms"]["p50"] == 4.0
    assert fig["finals"]["lag_ms"]["p100"] == 70.0
    assert fig["finals"]["merge_ms_per_worker"] == 2.0
    assert fig["finals"]["from_state_ms_per_worker"] == 5.0
    assert fig["plan"]["ms_per_rollout"] == 0.5
    assert fig["master_cpu_share"] == 0.25
    # 0.4995 CPU s over the 40 rows after the first report: ~12,500 µs a row, and the
    # offered 25 turns/s need 0.31 of a core (the toy master is slow: 1,000 µs a row would
    # be the real one's ~20x)
    assert fig["master_cpu_us_per_turn_row"] == 12487.5
    assert fig["master_ceiling_turn_rows_per_s"] == 80
    assert fig["master_core_needed"] == 0.312 and fig["keeps_up_by_cost"] is True
    assert fig["gc"]["collections"] == 2 and fig["gc"]["full_collections"] == 1
    assert fig["gc"]["full_pause_ms"]["p100"] == 300.0
    assert fig["keeps_up"] is False  # a lag p99 past the ship interval is falling behind
    heavy = figures(
        logs, _master(rows, finals), rows_on_disk=50, rollout_rows_on_disk=0, offered_turns_per_s=80
    )
    assert heavy["master_core_needed"] == 0.999 and heavy["keeps_up_by_cost"] is False
    rows["b"][1] = _at(601, 602)
    fig = figures(
        logs, _master(rows, finals), rows_on_disk=50, rollout_rows_on_disk=0, offered_turns_per_s=25
    )
    assert fig["report_lag_ms"]["p99"] <= KEEP_UP_LAG_P99_MS
    assert fig["keeps_up"] is True


def test_a_report_the_master_never_handled_or_a_row_not_on_disk_is_caught() -> None:
    logs = [_log("a", [0, 500 * MS], final_ns=900 * MS)]
    finals = {"a": [_at(950, 960, 0)]}
    one_missing = {"a": [_at(1, 2)]}
    fig = figures(
        logs,
        _master(one_missing, finals),
        rows_on_disk=20,
        rollout_rows_on_disk=0,
        offered_turns_per_s=20,
    )
    assert fig["messages"]["rows_sent"] == 2 and fig["messages"]["rows_handled"] == 1
    assert fig["every_message_handled"] is False and fig["keeps_up"] is False
    assert fig["keeps_up_by_cost"] is False
    both = {"a": [_at(1, 2), _at(501, 502)]}
    assert figures(
        logs, _master(both, finals), rows_on_disk=20, rollout_rows_on_disk=0, offered_turns_per_s=20
    )["every_message_handled"]
    fig = figures(
        logs, _master(both, finals), rows_on_disk=19, rollout_rows_on_disk=0, offered_turns_per_s=20
    )
    assert fig["every_message_handled"] is False
    fig = figures(
        logs, _master(both, {}), rows_on_disk=20, rollout_rows_on_disk=0, offered_turns_per_s=20
    )
    assert fig["every_message_handled"] is False  # no final handled


def test_the_verdict_judges_keeping_up_only_on_a_quiet_machine() -> None:
    logs = [_log("a", [0, 500 * MS], final_ns=900 * MS)]
    finals = {"a": [_at(950, 960, 0)]}

    def quiet(rows: dict[str, list[list[float]]]) -> dict[str, Any]:
        fig = figures(
            logs, _master(rows, finals), rows_on_disk=20, rollout_rows_on_disk=0,
            offered_turns_per_s=20,
        )  # fmt: skip
        return dict(fig, not_judged="")

    fig = quiet({"a": [_at(1, 2), _at(501, 1800)]})  # the second report handled 1.3 s late
    assert verdict(fig, check=False) == (0, "")
    code, why = verdict(fig, check=True)
    assert code == 2 and "fell behind" in why and "1287.02 ms" in why
    busy = dict(fig, not_judged="not judged: the machine was busy (others used 150 % of a core)")
    code, why = verdict(busy, check=True)
    assert code == 3 and why == f"keeps up: {busy['not_judged']}"
    missing = dict(fig, every_message_handled=False)
    code, why = verdict(missing, check=False)
    assert code == 3 and "reports 2/2" in why and "turn rows on disk 20/20" in why
    fig = quiet({"a": [_at(1, 2), _at(501, 502)]})
    assert verdict(fig, check=True) == (0, "the master kept up: report lag p99 2.0 ms")


def test_turn_rows_per_second_follow_the_workers_clock_not_the_masters_bunched_stamps() -> None:
    # 50 rows made from 0 to 1,000 ms on the workers' clock; a busy master handled them all
    # within 10 ms: the rate is still 50 a second.
    logs = [_log("a", [500 * MS, 1000 * MS], turns=20), _log("b", [700 * MS], turns=10)]
    logs[0]["load_started_ns"], logs[1]["load_started_ns"] = 1, 100 * MS
    rows = {"a": [_at(1001, 1002), _at(1003, 1005)], "b": [_at(1006, 1011)]}
    fig = figures(
        logs, _master(rows, {}), rows_on_disk=50, rollout_rows_on_disk=0, offered_turns_per_s=50
    )
    assert fig["rows"]["turn_rows_per_s"] == 50.0
    assert fig["load_window_s"] == 0.01
    del logs[0]["load_started_ns"], logs[1]["load_started_ns"]
    fig = figures(
        logs, _master(rows, {}), rows_on_disk=50, rollout_rows_on_disk=0, offered_turns_per_s=50
    )
    assert fig["rows"]["turn_rows_per_s"] is None  # no start on record: no rate, not a guess
