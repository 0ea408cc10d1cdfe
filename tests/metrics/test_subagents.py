"""summary.json's subagents figures: medians, merge across processes, absent without sub-agents."""

from __future__ import annotations

from harness.metrics.summary import Accumulator
from harness.workload.records import RolloutRecord

MS = 1_000_000


def _roll(rid: int, wait_ms: int, path: str, turns: int, conversations: int = 3) -> RolloutRecord:
    rec = RolloutRecord(transport="ws", rollout_id=rid, status="completed")
    rec.start_ns, rec.end_ns = 1_000 * MS, 2_000 * MS  # 1 s
    rec.subagent_wait_ns = wait_ms * MS
    rec.critical_path = path
    rec.critical_path_turns = turns
    rec.conversations = conversations
    return rec


def test_medians_merge_and_survive_the_state_round_trip() -> None:
    a, b = Accumulator(), Accumulator()
    a.add_rollout(_roll(0, 100, "0>1>0", 9))
    a.add_rollout(_roll(1, 400, "0", 6))
    b.add_rollout(_roll(2, 300, "0>2>0", 8))
    b.add_rollout(_roll(3, 200, "0>1>0", 7))
    # a rollout without sub-agents is not one of them
    b.add_rollout(_roll(4, 0, "0", 5, conversations=1))
    merged = Accumulator.from_state(a.to_state()).merge(Accumulator.from_state(b.to_state()))
    assert merged.summary("x")["subagents"] == {
        "ws": {
            "rollouts": 4,
            "wait_share_p50": 0.25,  # the middle of 0.1, 0.2, 0.3, 0.4
            "critical_path_turns_p50": 7.5,
            "critical_path_through_subagent": 0.75,
            # 0>1>0 twice (one from each process), 0 and 0>2>0 once
            "critical_path_common": "0>1>0",
            "critical_path_common_share": 0.5,
        }
    }


def test_the_common_path_breaks_ties_by_name_and_reaches_the_report_line() -> None:
    from harness.report.render import subagents_line

    acc = Accumulator()
    acc.add_rollout(_roll(0, 100, "0>2>0", 9))
    acc.add_rollout(_roll(1, 100, "0>1>0", 9))
    acc.add_rollout(_roll(2, 100, "0>1>0", 9))
    acc.add_rollout(_roll(3, 100, "0>2>0", 9))
    summary = acc.summary("x")
    group = summary["subagents"]["ws"]
    assert (group["critical_path_common"], group["critical_path_common_share"]) == ("0>1>0", 0.5)
    summary["transports"] = {"ws": {}}
    line = subagents_line(summary)
    assert line is not None and "through a sub-agent in 100 % of 4 rollouts, most often " in line
    assert line.endswith("most often 0>1>0 (50 % of them).")


def test_absent_when_no_rollout_forked() -> None:
    acc = Accumulator()
    acc.add_rollout(_roll(0, 0, "0", 5, conversations=1))
    assert "subagents" not in acc.summary("x")
