"""The stepper's sub-agents, driven by a scripted edge: fork, join, detach, failure, and the
critical path it records (docs/metrics.md §1.7)."""

from __future__ import annotations

from typing import Any

from harness.client.rollout import RolloutSteps, Step
from harness.wire.errors import ErrorKind, TransportError
from harness.workload.plan import RolloutPlan, SubagentPlan, TurnPlan
from harness.workload.records import TurnRecord
from tests.client.test_rollout_steps import Clock, _answer, _steps


def _sub(sub_id: int, call: int, join: str) -> SubagentPlan:
    return SubagentPlan(
        subagent_id=sub_id,
        seed=sub_id,
        system_tokens=10,
        tool_schema_tokens=10,
        user_prompt_tokens=5,
        turns=(TurnPlan(0, 8, 1, (4.0,), (9,)), TurnPlan(1, 8, 0)),
        call_index=call,
        result_tokens=7,
        join=join,
    )


def _plan(second_join: str) -> RolloutPlan:
    fork = TurnPlan(
        0, 10, 2, (0.0, 0.0), (7, 7), subagents=(_sub(1, 0, "wait"), _sub(2, 1, second_join))
    )
    return RolloutPlan(
        rollout_id=4,
        seed=1,
        system_tokens=20,
        tool_schema_tokens=20,
        user_prompt_tokens=10,
        turns=(fork, TurnPlan(1, 10, 1, (1.0,), (5,)), TurnPlan(2, 10, 0)),
    )


def _drive(steps: RolloutSteps, clock: Clock, log: list[tuple[str, int, int]], fail: int) -> None:
    """One conversation; a sub-agent runs when joined, or after its parent's last turn."""
    started: list[RolloutSteps] = []
    while (step := steps.next()) is not Step.DONE:
        if step is Step.SLEEP:
            clock.now += round(steps.sleep_s * 1e9)
        elif step is Step.FORK:
            started += steps.forks
        elif step is Step.JOIN:
            for child in steps.joining:
                _drive(child, clock, log, fail)
                started.remove(child)
        else:
            rec = steps.turn_record
            log.append(("turn", steps.conversation, rec.turn_index))
            if steps.conversation == fail:
                rec.sent_ns = clock()
                steps.failed(TransportError(ErrorKind.CONNECTION, "the peer hung up"))
                continue
            calls = steps.plan.turns[rec.turn_index].tool_calls
            steps.answered(_answer(rec, clock, calls))
    for child in started:
        _drive(child, clock, log, fail)
    steps.finish()


def _run(second_join: str, fail: int = -1) -> tuple[RolloutSteps, list[Any], list[TurnRecord]]:
    clock = Clock()
    records: list[TurnRecord] = []
    steps = _steps(clock, records.append, plan=_plan(second_join), transport="http")
    log: list[Any] = []
    _drive(steps, clock, log, fail)
    return steps, log, records


def test_the_parent_waits_for_every_wait_subagent() -> None:
    steps, log, records = _run("wait")
    # both sub-agents ran their two turns before the root's second turn
    assert log == [
        ("turn", 0, 0),
        ("turn", 1, 0),
        ("turn", 1, 1),
        ("turn", 2, 0),
        ("turn", 2, 1),
        ("turn", 0, 1),
        ("turn", 0, 2),
    ]
    roll = steps.record
    assert roll.status == "completed"
    assert (roll.turns, roll.conversations) == (7, 3)
    assert roll.rollout_id == 4 and {r.rollout_id for r in records} == {4}
    assert {(r.conversation, r.parent_conversation) for r in records} == {
        (0, -1),
        (1, 0),
        (2, 0),
    }
    root_second = next(r for r in records if (r.conversation, r.turn_index) == (0, 1))
    assert root_second.sent_ns > max(r.done_ns for r in records if r.conversation)
    # the root had no tool time of its own at turn 0: all of the join was a wait
    assert roll.subagent_wait_ns > 0
    assert roll.critical_path == "0>2>0"  # the one that ended last
    assert roll.critical_path_turns == 3 + 2


def test_a_detached_subagent_does_not_hold_the_parent_but_ends_the_rollout() -> None:
    steps, log, records = _run("detach")
    assert log == [
        ("turn", 0, 0),
        ("turn", 1, 0),
        ("turn", 1, 1),
        ("turn", 0, 1),
        ("turn", 0, 2),
        ("turn", 2, 0),
        ("turn", 2, 1),
    ]
    roll = steps.record
    assert roll.status == "completed" and roll.turns == 7
    assert roll.end_ns >= max(r.done_ns for r in records)
    assert roll.critical_path == "0>1>0>2"  # it ends in the detached sub-agent
    assert roll.critical_path_turns == 3 + 2 + 2


def test_a_failed_subagent_fails_the_rollout_at_the_join() -> None:
    steps, log, _ = _run("wait", fail=1)
    # the root does not send its next turn with a sub-agent's result missing
    assert ("turn", 0, 1) not in log
    assert steps.record.status == "error"
    assert steps.record.error_kind == "connection"
    assert steps.record.errors == 1
