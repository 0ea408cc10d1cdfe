"""SLO attainment and goodput (docs/metrics.md "SLOs and goodput"), hand-computed."""

from __future__ import annotations

import math

import pytest

from harness.gate.rules import parse_rules
from harness.metrics.slo import MIN_ATTAINMENT_N, wilson
from harness.metrics.summary import Accumulator
from harness.wire.errors import ScenarioError
from harness.workload.records import RolloutRecord, TurnRecord
from harness.workload.scenario import load_scenario

MS = 1_000_000
S = 1_000_000_000


def _turn(
    rid: int, idx: int, ttft_ms: float, turn_ms: float, status: str = "completed"
) -> TurnRecord:
    sent = (rid + 1) * S + idx * 100 * MS
    return TurnRecord(
        "ws",
        rid,
        idx,
        status=status,
        sent_ns=sent,
        first_event_ns=sent + 1,
        first_token_ns=sent + round(ttft_ms * MS),
        first_output_ns=sent + round(ttft_ms * MS),
        last_token_ns=sent + round(turn_ms * MS) - 1,
        done_ns=sent + round(turn_ms * MS),
        output_tokens=10,
    )


def _rollout(rid: int, latency_ms: float, status: str = "completed") -> RolloutRecord:
    start = (rid + 1) * S
    return RolloutRecord(
        "ws",
        rid,
        intended_start_ns=start,
        start_ns=start,
        end_ns=start + round(latency_ms * MS),
        turns=2,
        status=status,
    )


def test_wilson_matches_the_hand_computed_interval() -> None:
    # p = 0.9, n = 100, z = 1.96: centre (0.9 + 3.8415/200) / 1.038415 = 0.885196,
    # half 1.96 * sqrt(0.0009 + 0.00009604) / 1.038415 = 0.059582
    lo, hi = wilson(90, 100)  # type: ignore[misc]
    assert lo == pytest.approx(0.82566, abs=1e-4)
    assert hi == pytest.approx(0.94478, abs=1e-4)
    # the ends are exact, and a perfect record's lower bound is n / (n + z^2)
    assert wilson(20, 20) == (pytest.approx(20 / (20 + 1.959964**2)), 1.0)
    assert wilson(0, 20)[0] == 0.0  # type: ignore[index]
    assert wilson(0, 0) is None


@pytest.mark.parametrize("fold", [False, True], ids=["kept", "folded"])
def test_attainment_and_goodput_judge_every_threshold(fold: bool) -> None:
    acc = Accumulator(
        slo={"ttft_ms": 100.0, "turn_ms": 300.0, "rollout_ms": 1000.0}, fold_rollouts=fold
    )
    # rollout 0: both turns within, rollout 500 ms -> good
    # rollout 1: turn 1 has TTFT 150 ms -> the turn and the rollout miss
    # rollout 2: turns within, rollout 1200 ms -> rollout misses, turns meet
    # rollout 3: turn 0 turn time 400 ms -> misses; rollout 4: a failed turn and rollout
    shapes = [
        ([(50, 200), (60, 250)], 500, "completed"),
        ([(50, 200), (150, 250)], 500, "completed"),
        ([(50, 200), (60, 250)], 1200, "completed"),
        ([(50, 400), (60, 250)], 600, "completed"),
        ([(50, 200), (60, 250)], 700, "failed"),
    ]
    for rid, (turns, latency, status) in enumerate(shapes):
        for idx, (ttft, turn) in enumerate(turns):
            failed = status == "failed" and idx == 1
            acc.add_turn(_turn(rid, idx, ttft, turn, "failed" if failed else "completed"))
        acc.add_rollout(_rollout(rid, latency, status))
    t = acc.summary("s")["transports"]["ws"]
    slo = t["slo"]
    assert (slo["good_rollouts"], slo["rollouts"]) == (1, 5)
    assert slo["rollout_attainment"] == 0.2
    # 10 turns: rollout 1's second, rollout 3's first and rollout 4's failed one miss
    assert (slo["good_turns"], slo["turns"]) == (7, 10)
    assert slo["turn_attainment"] == 0.7
    assert slo["turn_attainment_ci95"] == pytest.approx(list(wilson(7, 10)), abs=1e-6)  # type: ignore[arg-type]
    assert slo["rollout_attainment_ci95"] == [None, None]
    assert slo["ci_reason"] == f"n=5: too few for a CI (need {MIN_ATTAINMENT_N})"
    assert slo["thresholds"] == {"ttft_ms": 100.0, "turn_ms": 300.0, "rollout_ms": 1000.0}
    # goodput: rollout 0's 20 tokens over the span 1 s .. 5.7 s
    g = t["goodput"]
    assert g["span_s"] == 4.7
    assert g["goodput_tps"] == pytest.approx(20 / 4.7, abs=1e-3)
    assert g["good_rollouts_per_s"] == pytest.approx(1 / 4.7, abs=1e-4)


def test_without_thresholds_a_rollout_is_good_when_it_succeeds() -> None:
    acc = Accumulator()
    acc.add_turn(_turn(0, 0, 5000, 9000))
    acc.add_rollout(_rollout(0, 60_000))
    assert acc.summary("s")["transports"]["ws"]["slo"]["rollout_attainment"] == 1.0


def test_attainment_survives_merge_and_state() -> None:
    thresholds = {"ttft_ms": 100.0}
    a, b = Accumulator(slo=thresholds), Accumulator(slo=thresholds)
    a.add_turn(_turn(0, 0, 150, 200))  # the turn misses in one accumulator...
    b.add_rollout(_rollout(0, 300))  # ...the rollout's record reaches the other
    a.add_turn(_turn(1, 0, 50, 200))
    a.add_rollout(_rollout(1, 300))
    merged = Accumulator.from_state(a.to_state()).merge(Accumulator.from_state(b.to_state()))
    assert merged.summary("s")["transports"]["ws"]["slo"]["good_rollouts"] == 1
    with pytest.raises(ValueError, match="SLO thresholds"):
        Accumulator(slo={"ttft_ms": 1.0}).merge(Accumulator())


def test_slo_section_errors_name_file_field_and_expected_value() -> None:
    s = load_scenario("tiny", {"slo.ttft_ms": "500", "slo.rollout_ms": "9000"})
    assert s.slo.thresholds() == {"ttft_ms": 500.0, "rollout_ms": 9000.0}
    with pytest.raises(
        ScenarioError, match=r"tiny\.yaml: slo\.turn_ms: expected a number > 0, got 0"
    ):
        load_scenario("tiny", {"slo.turn_ms": "0"})
    with pytest.raises(
        ScenarioError, match=r"slo\.ttf_ms: unknown field \(did you mean 'ttft_ms'\?\)"
    ):
        load_scenario("tiny", {"slo.ttf_ms": "1"})


def test_the_gate_names_attainment_as_a_summary_path() -> None:
    cfg = parse_rules({"slo": ["ws.slo.rollout_attainment >= 0.99", "*.goodput.goodput_tps > 0"]})
    rule = cfg.slo[0]
    assert (rule.transport, rule.path, rule.op, rule.value) == (
        "ws",
        ("slo", "rollout_attainment"),
        ">=",
        0.99,
    )
    assert math.isclose(cfg.slo[1].value, 0.0)


def test_folded_rollouts_leave_no_state_per_rollout_and_survive_a_merge() -> None:
    # A long run's accumulator (one process, whole rollouts) keeps counters, not an entry per
    # rollout: the harness's memory grew ~250 bytes a rollout before (docs/reliability.md).
    acc = Accumulator(slo={"ttft_ms": 100.0}, fold_rollouts=True)
    for rid in range(2_000):
        acc.add_turn(_turn(rid, 0, 150 if rid % 4 == 0 else 50, 200))
        acc.add_rollout(_rollout(rid, 300))
    t = acc._by_transport["ws"]
    assert t.slo_rollouts == {} and t.slo_folded == [1_500, 1_500 * 10]
    other = Accumulator(slo={"ttft_ms": 100.0})
    other.add_turn(_turn(5_000, 0, 50, 200))  # a rollout still under way: kept per rollout
    merged = Accumulator.from_state(acc.to_state()).merge(other)
    assert merged.summary("s")["transports"]["ws"]["slo"]["good_rollouts"] == 1_500
