"""Load generation against a real reference server: schedule lag, validity, drops, rounds, hints.

Every run here is small (a handful of short rollouts) against the session's
shared server; assertions compare the slowed run with a control run or count
events, rather than checking wall-clock thresholds.
"""

from __future__ import annotations

import gzip
import json
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from harness.run.runner import RunResult, run_scenario
from harness.workload.records import TurnRecord
from harness.workload.rollout import generate_rollouts
from harness.workload.scenario import Scenario, validate_scenario
from tests.runs import run_options

ROLLOUT: dict[str, Any] = {
    "system_tokens": 50,
    "tool_schema_tokens": 40,
    "user_prompt_tokens": 20,
    "tool_calls": 1,
    "tool_output_tokens": 30,
    "tool_latency_ms": 1,
    "step_output_tokens": 20,
    "final_answer_tokens": 20,
}


def _scenario(load: dict[str, Any], **rollout: Any) -> Scenario:
    data = {"name": "load-test", "seed": 9, "rollout": {**ROLLOUT, **rollout}, "load": load}
    return validate_scenario(data, "load-test.yaml")


def _run(scenario: Scenario, url: str, out: Path, transports: list[str], **opts: Any) -> RunResult:
    options = run_options(
        transports=transports,
        target=url,
        results_root=out,
        run_id=opts.pop("run_id", "r"),
        render=False,
        **opts,
    )
    return run_scenario(scenario, scenario.source, options)


def _rollouts(result: RunResult) -> pd.DataFrame:
    with gzip.open(result.run_dir / "rollouts.csv.gz", "rt") as fh:
        return pd.read_csv(fh)


def _turns(result: RunResult) -> pd.DataFrame:
    with gzip.open(result.run_dir / "turns.csv.gz", "rt") as fh:
        return pd.read_csv(fh)


OPEN_LOAD = {
    "mode": "open",
    "arrival": {"process": "constant", "rate": 20},
    "max_schedule_lag_ms": 50,
}


def test_slowed_client_shows_schedule_lag_and_invalid_run(server_url: str, tmp_path: Path) -> None:
    strict = _scenario({**OPEN_LOAD}, count=16)
    # Same plans, a limit no hiccup of a shared CI machine reaches: the control must pass.
    lenient = _scenario({**OPEN_LOAD, "max_schedule_lag_ms": 1000}, count=16)
    control = _run(lenient, server_url, tmp_path, ["http"], run_id="control")

    def stall(rec: TurnRecord) -> None:
        # A client that blocks its event loop for 150 ms per turn (a synchronous parse or
        # log write): 16 rollouts x 2 turns = 4.8 s of stall for a 0.75 s schedule.
        time.sleep(0.15)

    slowed = _run(strict, server_url, tmp_path, ["http"], run_id="slowed", turn_hook=stall)

    lag_slow = slowed.summary["transports"]["http"]["schedule_lag_ms"]
    lag_ctrl = control.summary["transports"]["http"]["schedule_lag_ms"]
    assert lag_slow["p50"] > 4 * max(lag_ctrl["p50"], 2.0)
    assert lag_slow["p99"] > 50
    sched = slowed.summary["transports"]["http"]["schedule"]
    assert sched["intended"] == sched["started"] == 16
    assert sched["late"] >= 8 and sched["dropped"] == 0
    assert sched["lag_max_ms"] >= lag_slow["p99"] * 0.99

    assert slowed.summary["valid"] is False
    reasons = slowed.summary["invalid_reasons"]
    assert any(
        r.startswith("http: schedule lag p99 ")
        and "exceeds load.max_schedule_lag_ms 50" in r
        and "the load generator fell behind" in r
        for r in reasons
    ), reasons
    assert any(r.startswith("client event loop stalled: ") for r in reasons), reasons
    assert slowed.summary["client"]["loop_lag_ms"]["p99"] > 50
    assert control.summary["valid"] is True, control.summary["invalid_reasons"]

    # Coordinated-omission safety: latency counts from the intended start, so the waiting
    # the stall caused is inside the corrected figure and outside the uncorrected one.
    t = slowed.summary["transports"]["http"]
    assert t["rollout_ms"]["p50"] > t["rollout_uncorrected_ms"]["p50"]
    rows = _rollouts(slowed)
    lag = rows["start_ns"] - rows["intended_start_ns"]
    assert (lag > 50e6).sum() == sched["late"]
    assert (
        (rows["end_ns"] - rows["intended_start_ns"]) >= (rows["end_ns"] - rows["start_ns"])
    ).all()
    # Written to disk for reports: the summary file carries the same verdict.
    on_disk = json.loads((slowed.run_dir / "summary.json").read_text())
    assert on_disk["valid"] is False and on_disk["invalid_reasons"] == reasons


def test_max_in_flight_drops_and_counts_starts(server_url: str, tmp_path: Path) -> None:
    # Starts every 20 ms, each rollout waits >= 50 ms on its tool: with one slot, the
    # starts that find it busy are dropped rather than queued behind it.
    scenario = _scenario(
        {**OPEN_LOAD, "arrival": {"process": "constant", "rate": 50}, "max_in_flight": 1},
        count=6,
        tool_latency_ms=50,
    )
    result = _run(scenario, server_url, tmp_path, ["ws"])
    sched = result.summary["transports"]["ws"]["schedule"]
    assert sched["intended"] == 6
    assert sched["dropped"] >= 3
    assert sched["started"] + sched["dropped"] == 6
    assert len(_rollouts(result)) == sched["started"]
    assert result.summary["valid"] is False
    assert any(
        f"ws: {sched['dropped']} of 6 intended starts dropped (load.max_in_flight 1" in r
        for r in result.summary["invalid_reasons"]
    )


def test_interleaved_rounds_pair_per_round(server_url: str, tmp_path: Path) -> None:
    scenario = _scenario(
        {
            "mode": "closed",
            "concurrency": 2,
            "order": "interleaved",
            "rounds": 2,
            "warmup_rollouts": 1,
        },
        count=5,
    )
    result = _run(scenario, server_url, tmp_path, ["http", "ws"])
    rows = _rollouts(result)
    plans = generate_rollouts(scenario)
    tag_round = {p.rollout_id: int(p.tags["round"]) for p in plans}
    # Each record's round is its plan's round, and both transports ran the same rollouts.
    assert all(tag_round[r.rollout_id] == r.round for r in rows.itertuples())
    for rnd in (0, 1):
        ids = {
            name: set(rows[(rows["round"] == rnd) & (rows["transport"] == name)]["rollout_id"])
            for name in ("http", "ws")
        }
        assert ids["http"] == ids["ws"] == {i for i, r in tag_round.items() if r == rnd}
    # A/B/A/B: each (round, transport) block starts after the previous one ended.
    blocks = [("http", 0), ("ws", 0), ("http", 1), ("ws", 1)]
    spans = [
        (
            rows[(rows.transport == t) & (rows["round"] == r)]["start_ns"].min(),
            rows[(rows.transport == t) & (rows["round"] == r)]["end_ns"].max(),
        )
        for t, r in blocks
    ]
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(3))
    # Warm-up rollout 0 is written but not summarised; the comparison is paired.
    assert len(rows) == 10
    for name in ("http", "ws"):
        assert result.summary["transports"][name]["rollouts"]["count"] == 4
        assert result.summary["transports"][name]["schedule"]["intended"] == 4
    [comp] = result.summary["comparisons"]
    assert comp["paired"] is True
    assert not any(r.startswith(("http:", "ws:")) for r in result.summary["invalid_reasons"])


def test_closed_loop_duration_limit(server_url: str, tmp_path: Path) -> None:
    scenario = _scenario(
        {"mode": "closed", "concurrency": 1, "duration_s": 0.3}, count=50, tool_latency_ms=40
    )
    result = _run(scenario, server_url, tmp_path, ["ws"])
    sched = result.summary["transports"]["ws"]["schedule"]
    assert 1 <= sched["started"] < 50
    assert sched["not_started"] == 50 - sched["started"]
    assert result.summary["transports"]["ws"]["rollouts"]["count"] == sched["started"]
    assert result.summary["load"]["mode"] == "closed"


def test_run_without_reference_server_hints(server_url: str, tmp_path: Path) -> None:
    """No loopbench.* metadata: the run works on standard fields alone (tools, tool_choice,
    max_output_tokens, usage), as against a real endpoint."""
    scenario = _scenario({"mode": "closed", "concurrency": 2}, count=2, tool_calls=2)
    plain = _run(scenario, server_url, tmp_path, ["http", "ws"], run_id="plain", hints=False)
    hinted = _run(scenario, server_url, tmp_path, ["http", "ws"], run_id="hinted")
    for name in ("http", "ws"):
        t = plain.summary["transports"][name]
        assert t["turns"]["errors"] == 0 and t["rollouts"]["errors"] == 0
        assert t["turns"]["count"] == 6  # 2 rollouts x (2 tool calls + answer)
    manifest = json.loads((plain.run_dir / "manifest.json").read_text())
    assert manifest["client_options"]["hints"] is False

    # Token counts come from usage.  Without the hint the server draws each answer's
    # length from its profile, capped by max_output_tokens (2 x planned + 32, at least
    # 64): the lengths vary and exceed the plan, which proves no hint reached it; with
    # hints they are exactly the planned 20 tokens.
    def answers(result: RunResult) -> set[int]:
        turns = _turns(result)
        last = turns.groupby(["transport", "rollout_id"])["turn_index"].transform("max")
        return set(turns[turns["turn_index"] == last]["output_tokens"])

    assert answers(hinted) == {20}
    plain_answers = answers(plain)
    assert max(plain_answers) <= max(64, 20 * 2 + 32)
    assert plain_answers != {20}
    assert plain.summary["comparisons"][0]["paired"] is True


@pytest.mark.parametrize("mode", ["open", "throughput"])
def test_scheduled_runs_report_their_load(server_url: str, tmp_path: Path, mode: str) -> None:
    load: dict[str, Any] = {"mode": mode, "arrival": {"process": "poisson"}, "duration_s": 0.5}
    if mode == "open":
        load["arrival"]["rate"] = 10
    else:
        load["throughput"] = {"tps": 800}
    result = _run(_scenario(load), server_url, tmp_path, ["ws"])
    summary = result.summary["load"]
    assert summary["mode"] == mode
    planned = summary["rollouts_planned"]
    assert planned == len(generate_rollouts(_scenario(load)))
    assert result.summary["transports"]["ws"]["schedule"]["started"] == planned
    if mode == "throughput":
        # 40 output tokens per rollout: 800 TPS needs 20 rollouts/s.
        tp = summary["throughput"]
        assert tp["mean_output_tokens_per_rollout"] == 40
        assert tp["arrival_rate_per_s"] == 20
