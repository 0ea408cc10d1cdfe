"""The seeded rollout generator: determinism, shapes, history arithmetic."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import pytest

from harness.wire.errors import ScenarioError
from harness.workload.plan import RolloutPlan, TurnPlan
from harness.workload.rollout import (
    derive_seed,
    generate_rollouts,
    throughput_derivation,
)
from harness.workload.scenario import Scenario, load_scenario, validate_scenario
from harness.workload.schedule import schedule_starts
from tests.plan_tokens import history_tokens, new_tokens

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"

BASE: dict[str, Any] = {
    "name": "gen",
    "seed": 42,
    "rollout": {
        "count": 8,
        "system_tokens": 800,
        "tool_schema_tokens": 400,
        "user_prompt_tokens": {"dist": "uniform", "min": 100, "max": 300},
        "tool_calls": {"dist": "uniform", "min": 8, "max": 12},
        "tool_output_tokens": {"dist": "lognormal", "median": 400, "p95": 2000},
        "tool_latency_ms": {"dist": "lognormal", "median": 120, "p95": 600},
        "step_output_tokens": {"dist": "uniform", "min": 40, "max": 120},
        "final_answer_tokens": 300,
    },
}


def _scenario(overrides: dict[str, str] | None = None, **top: Any) -> Scenario:
    return validate_scenario({**BASE, **top}, "test.yaml", overrides)


def test_same_seed_identical_plans() -> None:
    assert generate_rollouts(_scenario()) == generate_rollouts(_scenario())


def test_different_seed_different_plans() -> None:
    a = generate_rollouts(_scenario())
    b = generate_rollouts(_scenario(seed=43))
    assert [p.turns for p in a] != [p.turns for p in b]


def test_rollouts_do_not_depend_on_count_or_load() -> None:
    small = generate_rollouts(_scenario({"rollout.count": "3"}))
    big = generate_rollouts(_scenario())
    assert [p.turns for p in small] == [p.turns for p in big[:3]]
    open_loop = generate_rollouts(
        _scenario({"load.mode": "open", "load.arrival.rate": "2", "load.concurrency": "7"})
    )
    assert [p.turns for p in open_loop] == [p.turns for p in big]


def test_shapes_follow_the_scenario() -> None:
    plans = generate_rollouts(_scenario())
    assert [p.rollout_id for p in plans] == list(range(8))
    assert len({p.seed for p in plans}) == 8
    for plan in plans:
        assert plan.system_tokens == 800 and plan.tool_schema_tokens == 400
        assert 100 <= plan.user_prompt_tokens <= 300
        assert 8 <= plan.tool_call_count <= 12
        *steps, final = plan.turns
        assert final.final and final.tool_calls == 0 and final.output_tokens == 300
        assert final.tool_latency_ms == () and final.tool_output_tokens == ()
        assert [t.index for t in plan.turns] == list(range(len(plan.turns)))
        for turn in steps:
            assert turn.tool_calls == 1
            assert 40 <= turn.output_tokens <= 120
            assert len(turn.tool_latency_ms) == len(turn.tool_output_tokens) == 1
            assert all(isinstance(n, int) and n >= 1 for n in turn.tool_output_tokens)
            assert all(ms >= 0 for ms in turn.tool_latency_ms)
        assert plan.start_offset_ns == 0
        assert plan.tags == {"phase": "measure", "round": "0", "arrival": "closed"}


def test_parallel_calls_split_the_total() -> None:
    plan = generate_rollouts(
        _scenario({"rollout.tool_calls": "10", "rollout.parallel_calls": "3"})
    )[0]
    assert [t.tool_calls for t in plan.turns] == [3, 3, 3, 1, 0]
    assert [len(t.tool_output_tokens) for t in plan.turns] == [3, 3, 3, 1, 0]


def test_no_tool_calls_is_a_single_answer() -> None:
    plan = generate_rollouts(_scenario({"rollout.tool_calls": "0"}))[0]
    assert len(plan.turns) == 1 and plan.turns[0].final


def test_outputs_at_least_one_token_and_clamped_latencies() -> None:
    plans = generate_rollouts(
        _scenario(
            {
                "rollout.step_output_tokens": "0",
                "rollout.final_answer_tokens": "0",
                "rollout.tool_latency_ms": "{dist: normal, mean: 1, sd: 50}",
                "rollout.think_ms": "{dist: normal, mean: 1, sd: 50}",
            }
        )
    )
    turns = [t for p in plans for t in p.turns]
    assert all(t.output_tokens >= 1 for t in turns)
    assert all(ms >= 0 for t in turns for ms in t.tool_latency_ms)
    assert all(t.think_ms >= 0 for t in turns)
    assert any(t.think_ms > 0 for t in turns)


def test_tool_output_growth() -> None:
    plan = generate_rollouts(
        _scenario(
            {
                "rollout.tool_calls": "4",
                "rollout.tool_output_tokens": "100",
                "rollout.tool_output_growth": "2",
            }
        )
    )[0]
    assert [t.tool_output_tokens for t in plan.turns] == [(100,), (200,), (400,), (800,), ()]


def test_history_and_new_tokens() -> None:
    plan = RolloutPlan(
        rollout_id=0,
        seed=1,
        system_tokens=800,
        tool_schema_tokens=400,
        user_prompt_tokens=200,
        turns=(
            TurnPlan(0, 50, 2, (10.0, 20.0), (300, 100)),
            TurnPlan(1, 60, 1, (5.0,), (1000,)),
            TurnPlan(2, 300, 0),
        ),
    )
    assert [new_tokens(plan, i) for i in range(3)] == [200, 400, 1000]
    assert [history_tokens(plan, i) for i in range(3)] == [1400, 1850, 2910]
    with pytest.raises(IndexError):
        history_tokens(plan, 3)
    with pytest.raises(IndexError):
        new_tokens(plan, -1)


def test_history_grows_by_output_plus_new_input() -> None:
    for plan in generate_rollouts(_scenario()):
        for i in range(1, len(plan.turns)):
            grown = history_tokens(plan, i) - history_tokens(plan, i - 1)
            assert grown == plan.turns[i - 1].output_tokens + new_tokens(plan, i)


def test_open_loop_offsets_come_from_the_schedule() -> None:
    scenario = _scenario(
        {
            "load.mode": "open",
            "load.arrival": "{process: poisson, rate: 2}",
            "load.bursts": "[{at_s: 1, extra: 3, over_s: 1}]",
        }
    )
    plans = generate_rollouts(scenario)
    rng = random.Random(derive_seed(42, "schedule"))
    expected = [s.offset_ns for s in schedule_starts(scenario.load, 8, rng)]
    assert [p.start_offset_ns for p in plans] == expected
    assert len(plans) == 11
    assert sum(p.tags["arrival"] == "burst" for p in plans) == 3


def test_warmup_and_round_tags() -> None:
    plans = generate_rollouts(
        _scenario({"load.warmup_rollouts": "2", "load.order": "interleaved", "load.rounds": "4"})
    )
    assert [p.tags["phase"] for p in plans] == ["warmup"] * 2 + ["measure"] * 6
    assert [p.tags["round"] for p in plans] == ["0", "0", "1", "1", "2", "2", "3", "3"]


TRACE_LINES = [
    json.dumps(
        {
            "type": "rollout",
            "id": f"t{i}",
            "system_tokens": 1000 + i,
            "user_prompt_tokens": 10 + i,
            "turns": [
                {"output_tokens": 50 + i, "tool_calls": [{"latency_ms": 5, "output_tokens": 100}]},
                {"output_tokens": 70},
            ],
        }
    )
    for i in range(3)
]


def _trace_scenario(tmp_path: Path, **load: Any) -> Scenario:
    (tmp_path / "traces").mkdir(exist_ok=True)
    (tmp_path / "traces" / "t.jsonl").write_text("\n".join(TRACE_LINES) + "\n")
    data = {"name": "replay", "seed": 4, "rollout": {"trace": "traces/t.jsonl"}, "load": load}
    return validate_scenario(data, str(tmp_path / "replay.yaml"))


def test_trace_replays_each_recorded_rollout_once_by_default(tmp_path: Path) -> None:
    plans = generate_rollouts(_trace_scenario(tmp_path))
    assert [p.system_tokens for p in plans] == [1000, 1001, 1002]
    assert [p.user_prompt_tokens for p in plans] == [10, 11, 12]
    assert [[t.output_tokens for t in p.turns] for p in plans] == [[50, 70], [51, 70], [52, 70]]
    assert plans == generate_rollouts(_trace_scenario(tmp_path))


def test_trace_cycles_when_count_is_larger(tmp_path: Path) -> None:
    scenario = _trace_scenario(tmp_path)
    bigger = validate_scenario(
        {**scenario.model_dump(mode="json"), "rollout": {"trace": "traces/t.jsonl", "count": 5}},
        scenario.source,
    )
    plans = generate_rollouts(bigger)
    assert [p.system_tokens for p in plans] == [1000, 1001, 1002, 1000, 1001]
    # Content seeds differ per rollout even when the recorded shape repeats.
    assert len({p.seed for p in plans}) == 5


def test_trace_with_open_loop_schedule(tmp_path: Path) -> None:
    scenario = _trace_scenario(
        tmp_path, mode="open", arrival={"process": "constant", "rate": 10}, duration_s=1
    )
    plans = generate_rollouts(scenario)
    assert len(plans) == 10
    assert [p.start_offset_ns for p in plans] == [i * 100_000_000 for i in range(10)]
    assert [p.system_tokens for p in plans][:4] == [1000, 1001, 1002, 1000]


def test_missing_trace_file_names_the_field(tmp_path: Path) -> None:
    scenario = validate_scenario(
        {"name": "replay", "rollout": {"trace": "traces/none.jsonl"}}, str(tmp_path / "r.yaml")
    )
    with pytest.raises(ScenarioError, match=r"r.yaml: rollout.trace: expected an existing trace"):
        generate_rollouts(scenario)


def test_throughput_mode_derives_rate_from_mean_output() -> None:
    scenario = _scenario(
        {
            "load.mode": "throughput",
            "load.throughput": "{tps: 1000, bursts: [{at_s: 20, over_s: 10, tps: 4000}]}",
            "load.duration_s": "60",
            "load.arrival": "{process: constant}",
            "rollout.final_answer_tokens": "300",
        }
    )
    derived = throughput_derivation(scenario)
    assert derived is not None
    # ~10 steps x uniform(40, 120) + 300: mean output per rollout ~1100 tokens.
    assert 1000 <= derived.mean_output_tokens <= 1200
    assert derived.arrival_rate == pytest.approx(1000 / derived.mean_output_tokens)
    assert derived.burst_rates == pytest.approx((4000 / derived.mean_output_tokens,))
    plans = generate_rollouts(scenario)
    # Constant gaps: 50 s at the base rate + 10 s at 4x.
    expected = (50 + 40) * derived.arrival_rate
    assert len(plans) == pytest.approx(expected, abs=2)
    # The scheduled rollouts carry the targeted output: 1,000 TPS x 50 s + 4,000 x 10 s.
    tokens = sum(t.output_tokens for p in plans for t in p.turns)
    assert tokens / (50 * 1000 + 10 * 4000) == pytest.approx(1.0, rel=0.05)
    burst = [p for p in plans if 20e9 <= p.start_offset_ns < 30e9]
    base = [p for p in plans if 30e9 <= p.start_offset_ns < 60e9]
    assert len(burst) / 10 > 2.5 * len(base) / 30
    assert throughput_derivation(_scenario()) is None


def test_quickstart_reaches_a_long_history() -> None:
    plans = generate_rollouts(load_scenario(SCENARIOS / "quickstart.yaml"))
    assert 4 <= len(plans) <= 6
    for plan in plans:
        assert 8 <= plan.tool_call_count <= 12
        final = len(plan.turns) - 1
        assert 12_000 <= history_tokens(plan, final) <= 28_000
        assert all(60 <= t.output_tokens <= 120 for t in plan.turns[:-1])
        assert all(50 <= ms <= 150 for t in plan.turns for ms in t.tool_latency_ms)
    assert generate_rollouts(load_scenario(SCENARIOS / "quickstart.yaml")) == plans


def test_tiny_is_two_by_three() -> None:
    plans = generate_rollouts(load_scenario(SCENARIOS / "tiny.yaml"))
    assert len(plans) == 2
    assert [p.tool_call_count for p in plans] == [3, 3]


def test_reasoning_is_drawn_per_turn_from_its_own_stream() -> None:
    without = generate_rollouts(_scenario())
    reasoning = {"dist": "uniform", "min": 100, "max": 500}
    with_ = generate_rollouts(_scenario({"rollout.reasoning_tokens": str(reasoning)}))
    # no distribution: no reasoning
    assert all(t.reasoning_tokens == 0 for p in without for t in p.turns)
    # every turn reasons, the final answer too, within the distribution
    drawn = [t.reasoning_tokens for p in with_ for t in p.turns]
    assert all(100 <= n <= 500 for n in drawn) and len(set(drawn)) > 10
    # the same rollouts otherwise: reasoning is a stream of its own
    for a, b in zip(without, with_, strict=True):
        assert [dataclasses.replace(t, reasoning_tokens=0) for t in b.turns] == list(a.turns)
    # the conversation grows by the reasoning too (stateless HTTP re-sends it)
    plan, base = with_[0], without[0]
    last = len(plan.turns) - 1
    earlier = sum(t.reasoning_tokens for t in plan.turns[:last])
    assert history_tokens(plan, last) == history_tokens(base, last) + earlier
    # a constant 0 is "absent"
    zero = generate_rollouts(_scenario({"rollout.reasoning_tokens": "0"}))
    assert [p.turns for p in zero] == [p.turns for p in without]


def test_throughput_target_counts_reasoning_as_output() -> None:
    load = {"load.mode": "throughput", "load.throughput.tps": "1000", "load.duration_s": "10"}
    plain = throughput_derivation(_scenario(load))
    reasoning = throughput_derivation(_scenario({**load, "rollout.reasoning_tokens": "200"}))
    assert plain is not None and reasoning is not None
    turns = sum(len(p.turns) for p in generate_rollouts(_scenario())) / 8
    # ~turns x 200 more output tokens per rollout (the sample is the first 500 rollouts)
    extra = reasoning.mean_output_tokens - plain.mean_output_tokens
    assert extra == pytest.approx(200 * turns, rel=0.1)
