"""The master's work queue and the message wire forms: pure, no locust, no sockets."""

from __future__ import annotations

from dataclasses import fields, replace

import msgpack
import pytest

from harness.client.options import ClientSettings
from harness.client.shaping import RequestShaping
from harness.locust_driver.protocol import RunConfig
from harness.locust_driver.wire import (
    ROLLOUT_INSTANTS,
    TURN_INSTANTS,
    claim_from_wire,
    rollout_from_row,
    rollout_to_row,
    shift_instants,
    turn_from_row,
    turn_to_row,
    work_message,
)
from harness.locust_driver.work import Claim, WorkQueue
from harness.run.rounds import interleaving_rounds
from harness.workload.plan import RolloutPlan, SubagentPlan, TurnPlan
from harness.workload.records import RolloutRecord, TurnRecord
from harness.workload.rollout import generate_rollouts
from harness.workload.scenario import validate_scenario

MS = 1_000_000


def _scenario(**load: object) -> object:
    return validate_scenario(
        {
            "name": "w",
            "seed": 5,
            "transports": ["http", "ws"],
            "rollout": {"count": 6, "tool_calls": 2},
            "load": load,
        }
    )


def _drain(queue: WorkQueue, now: int = 0) -> list[tuple[int, str, int]]:
    """Claim and finish everything one at a time; returns (phase, transport, rollout_id)."""
    out = []
    while True:
        claim = queue.claim(now)
        if claim.kind == "done":
            return out
        assert claim.kind == "run" and claim.plan is not None
        out.append((claim.phase, claim.transport, claim.plan.rollout_id))
        queue.finish(claim.phase, claim.plan.rollout_id)


def test_closed_loop_runs_every_rollout_once_per_transport_in_phase_order() -> None:
    plans = generate_rollouts(_scenario(mode="closed", concurrency=3))
    queue = WorkQueue(plans, ["http", "ws"], open_loop=False)
    done = _drain(queue)
    assert done == [(0, "http", i) for i in range(6)] + [(1, "ws", i) for i in range(6)]
    assert queue.done and queue.finished == queue.total == 12 and queue.in_flight == 0


def test_next_phase_waits_until_every_rollout_of_this_one_finished() -> None:
    plans = generate_rollouts(_scenario(mode="closed", concurrency=2))
    queue = WorkQueue(plans[:2], ["http", "ws"], open_loop=False)
    a, b = queue.claim(0), queue.claim(0)
    assert (a.kind, b.kind) == ("run", "run")
    assert queue.claim(0).kind == "wait"  # phase http is handed out but not finished
    assert a.plan is not None and b.plan is not None
    queue.finish(a.phase, a.plan.rollout_id)
    queue.finish(a.phase, a.plan.rollout_id)  # a duplicate report counts once
    assert queue.claim(0).kind == "wait" and queue.in_flight == 1
    queue.finish(b.phase, b.plan.rollout_id)
    c = queue.claim(0)
    assert (c.kind, c.transport, c.phase) == ("run", "ws", 1)


def test_unknown_or_unclaimed_reports_are_ignored() -> None:
    plans = generate_rollouts(_scenario(mode="closed"))
    queue = WorkQueue(plans, ["http"], open_loop=False)
    queue.finish(0, 3)  # never claimed
    queue.finish(7, 0)  # no such phase
    assert queue.finished == 0


def test_interleaved_rounds_alternate_transports_like_loopbench_run() -> None:
    plans = generate_rollouts(_scenario(mode="closed", order="interleaved", rounds=3))
    queue = WorkQueue(plans, ["http", "ws"], open_loop=False, rounds=3)
    assert [(p.round, p.transport, len(p.plans)) for p in queue.phases] == [
        (0, "http", 2),
        (0, "ws", 2),
        (1, "http", 2),
        (1, "ws", 2),
        (2, "http", 2),
        (2, "ws", 2),
    ]
    # 10 rollouts in 4 rounds: the generator's round tags (3, 2, 3, 2), as `loopbench run`
    # groups them, not chunks of 3
    ten = generate_rollouts(
        validate_scenario(
            {"name": "w", "rollout": {"count": 10}, "load": {"order": "interleaved", "rounds": 4}}
        )
    )
    queue = WorkQueue(ten, ["http"], open_loop=False, rounds=4)
    assert [len(p.plans) for p in queue.phases] == [3, 2, 3, 2]
    assert all(plan.tags["round"] == str(p.round) for p in queue.phases for plan in p.plans)
    assert [len(c) for c in interleaving_rounds(ten[:5], 1)] == [5]


def test_open_loop_claims_carry_the_delay_to_the_intended_start() -> None:
    scenario = _scenario(mode="open", arrival={"process": "constant", "rate": 10})
    plans = generate_rollouts(scenario)
    offsets = [p.start_offset_ns for p in plans]
    assert offsets[:3] == [0, 100 * MS, 200 * MS]
    queue = WorkQueue(plans, ["http"], open_loop=True)
    t0 = 5_000 * MS
    first = queue.claim(t0)  # the phase starts at its first claim
    second = queue.claim(t0 + 30 * MS)
    third = queue.claim(t0 + 350 * MS)  # late: a negative delay, recorded as schedule lag
    assert (first.start_in_ns, second.start_in_ns, third.start_in_ns) == (0, 70 * MS, -150 * MS)


def test_open_loop_pool_sizing_counts_rollouts_due_soon() -> None:
    scenario = _scenario(mode="open", arrival={"process": "constant", "rate": 10})
    queue = WorkQueue(generate_rollouts(scenario), ["http"], open_loop=True)
    # 6 rollouts at 0, 100, ..., 500 ms: all due within 2 s, 3 within 250 ms.
    assert queue.due_within(0, 2_000 * MS) == 6
    assert queue.due_within(0, 250 * MS) == 3
    queue.claim(0)
    assert queue.due_within(0, 250 * MS) == 2 and queue.in_flight == 1
    closed = WorkQueue(generate_rollouts(_scenario(mode="closed")), ["http"], open_loop=False)
    assert closed.due_within(0, 0) == 6


def test_a_queue_needs_transports() -> None:
    with pytest.raises(ValueError, match="transports"):
        WorkQueue([], [], open_loop=False)


def _through_the_wire(plan: RolloutPlan) -> RolloutPlan | None:
    """A claim of ``plan`` as the master sends it and a worker reads it (msgpack between)."""
    claim = Claim("run", phase=1, transport="ws", round=0, plan=plan, start_in_ns=5)
    back = claim_from_wire(msgpack.unpackb(msgpack.packb(work_message(7, claim))))
    assert back == claim
    return back.plan


def test_plans_and_records_survive_the_wire() -> None:
    plans = generate_rollouts(_scenario(mode="open", arrival={"rate": 3}))
    for plan in plans:
        assert _through_the_wire(plan) == plan
    # a reasoning turn's budget travels with its plan to the worker that replays it
    reasoning = generate_rollouts(
        validate_scenario({"name": "r", "rollout": {"count": 1, "reasoning_tokens": 300}})
    )[0]
    assert all(t.reasoning_tokens == 300 for t in reasoning.turns)
    assert _through_the_wire(reasoning) == reasoning
    # so do a recorded client's context choices and the sub-agents a turn forks
    sub = SubagentPlan(1, 2, 3, 4, 5, (TurnPlan(0, 5, 0),), join="detach", ws_chains=True)
    forking = replace(
        reasoning,
        turns=(replace(reasoning.turns[0], subagents=(sub,)), *reasoning.turns[1:]),
        ws_chains=False,
        resends_reasoning=True,
    )
    assert _through_the_wire(forking) == forking
    turn = TurnRecord("ws", 4, 2, round=1, sent_ns=10, first_token_ns=25, status="completed")
    turn.sim_cache = "hit"
    back = turn_from_row(turn_to_row(turn))
    assert (back.sim_cache, back.first_token_ns, back.round) == ("hit", 25, 1)
    assert turn_to_row(back) == turn_to_row(turn)
    roll = RolloutRecord("http", 9, end_ns=99, status="completed", recoveries=2)
    assert rollout_to_row(rollout_from_row(rollout_to_row(roll))) == rollout_to_row(roll)
    with pytest.raises(ValueError, match="turn row: expected"):
        turn_from_row([1, 2])
    shaping = RequestShaping((("X-Team", "a"),), "x-session", {"chat": {"top_k": 5}})
    client = ClientSettings(keepalive=False, hints=False, shaping=shaping)
    config = RunConfig("r", "http://x/v1", "m", 2, client=client)
    assert RunConfig.from_wire(config.to_wire()) == config


def test_a_lost_rollout_ends_its_phase_without_counting_as_finished() -> None:
    plans = generate_rollouts(_scenario(mode="closed", concurrency=2))
    queue = WorkQueue(plans[:2], ["http", "ws"], open_loop=False)
    a, b = queue.claim(0), queue.claim(0)
    assert a.plan is not None and b.plan is not None
    queue.finish(a.phase, a.plan.rollout_id)
    assert queue.claim(0).kind == "wait"  # b's worker died holding it: the phase cannot end
    assert queue.lose(b.phase, b.plan.rollout_id) is True
    assert queue.lose(b.phase, b.plan.rollout_id) is False  # once
    assert queue.lose(a.phase, a.plan.rollout_id) is False  # already finished
    queue.finish(b.phase, b.plan.rollout_id)  # a late report of a lost one changes nothing
    assert (queue.finished, queue.lost, queue.in_flight) == (1, 1, 0)
    c = queue.claim(0)
    assert (c.kind, c.transport) == ("run", "ws")
    assert queue.unclaimed("ws", 0) == 1 and queue.unclaimed("http", 0) == 0


def test_the_edge_hosts_instants_move_onto_the_workers_clock_and_durations_do_not() -> None:
    turn = TurnRecord("ws", 1, 0, sent_ns=100, first_token_ns=150, done_ns=200, recovery_ns=30)
    roll = RolloutRecord("ws", 1, intended_start_ns=90, start_ns=95, end_ns=300, tool_ns=40)
    shift_instants(turn, 1000)
    shift_instants(roll, 1000)
    assert (turn.sent_ns, turn.first_token_ns, turn.done_ns) == (1100, 1150, 1200)
    assert turn.connected_ns == 0  # did not happen: stays 0
    assert turn.recovery_ns == 30 and roll.tool_ns == 40
    assert (roll.intended_start_ns, roll.start_ns, roll.end_ns) == (1090, 1095, 1300)


def test_every_ns_field_is_known_as_an_instant_or_a_duration() -> None:
    # a new timestamp field must be shifted too, or workers' rows stop sharing an origin
    durations = {"recovery_ns", "itl_ns", "model_ns", "tool_ns", "client_ns", "subagent_wait_ns"}
    for cls, instants in ((TurnRecord, TURN_INSTANTS), (RolloutRecord, ROLLOUT_INSTANTS)):
        ns = {f.name for f in fields(cls) if f.name.endswith("_ns")}
        assert ns == set(instants) | (durations & ns), cls.__name__
