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
        }
    }


def test_absent_when_no_rollout_forked() -> None:
    acc = Accumulator()
    acc.add_rollout(_roll(0, 0, "0", 5, conversations=1))
    assert "subagents" not in acc.summary("x")
