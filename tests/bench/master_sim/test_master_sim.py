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

from bench.master_sim.figures import KEEP_UP_LAG_P99_MS, figures
from tests.runs import ROOT

MS = 1_000_000


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
    assert m["rows_sent"] == m["rows_handled"] > 4 * 4  # ~2 a second each for 4 s and more
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
        "handled_ns": {"loopbench_rows": [e - s for v in rows.values() for s, e, _ in v]},
        "stamps": {"loopbench_rows": rows, "loopbench_final": finals},
        "timed_ns": {"Accumulator.merge": [2, 4 * MS], "Accumulator.from_state": [2, 10 * MS]},
        "plans": {"seconds": 0.5, "rollouts": 1000},
        "cpu": [[0, 0.0], [500 * MS, 0.125], [1000 * MS, 0.25], [2000 * MS, 0.5]],
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
        "a": [[1 * MS, 2 * MS, 10], [501 * MS, 503 * MS, 10], [1001 * MS, 1010 * MS, 10]],
        "b": [[101 * MS, 104 * MS, 10], [2000 * MS, 2000 * MS, 10]],
    }
    finals = {"a": [[1950 * MS, 1960 * MS, 0]], "b": [[1950 * MS, 1970 * MS, 0]]}
    fig = figures(logs, _master(rows, finals), rows_on_disk=50, rollout_rows_on_disk=0)
    assert fig["every_message_handled"] is True
    # a: 2, 3, 10 ms; b: 4 ms and 1,400 ms (its second report waited)
    assert fig["report_lag_ms"]["p100"] == 1400.0
    assert fig["report_lag_ms"]["p50"] == 4.0
    assert fig["finals"]["lag_ms"]["p100"] == 70.0
    assert fig["finals"]["merge_ms_per_worker"] == 2.0
    assert fig["finals"]["from_state_ms_per_worker"] == 5.0
    assert fig["plan"]["ms_per_rollout"] == 0.5
    assert fig["master_cpu_share"] == 0.25
    assert fig["gc"]["collections"] == 2 and fig["gc"]["full_collections"] == 1
    assert fig["gc"]["full_pause_ms"]["p100"] == 300.0
    assert fig["keeps_up"] is False  # a lag p99 past the ship interval is falling behind
    rows["b"][1] = [601 * MS, 602 * MS, 10]
    fig = figures(logs, _master(rows, finals), rows_on_disk=50, rollout_rows_on_disk=0)
    assert fig["report_lag_ms"]["p99"] <= KEEP_UP_LAG_P99_MS
    assert fig["keeps_up"] is True


def test_a_report_the_master_never_handled_or_a_row_not_on_disk_is_caught() -> None:
    logs = [_log("a", [0, 500 * MS], final_ns=900 * MS)]
    finals = {"a": [[950 * MS, 960 * MS, 0]]}
    one_missing = {"a": [[1 * MS, 2 * MS, 10]]}
    fig = figures(logs, _master(one_missing, finals), rows_on_disk=20, rollout_rows_on_disk=0)
    assert fig["messages"]["rows_sent"] == 2 and fig["messages"]["rows_handled"] == 1
    assert fig["every_message_handled"] is False and fig["keeps_up"] is False
    both = {"a": [[1 * MS, 2 * MS, 10], [501 * MS, 502 * MS, 10]]}
    assert figures(logs, _master(both, finals), rows_on_disk=20, rollout_rows_on_disk=0)[
        "every_message_handled"
    ]
    fig = figures(logs, _master(both, finals), rows_on_disk=19, rollout_rows_on_disk=0)
    assert fig["every_message_handled"] is False
    fig = figures(logs, _master(both, {}), rows_on_disk=20, rollout_rows_on_disk=0)
    assert fig["every_message_handled"] is False  # no final handled
