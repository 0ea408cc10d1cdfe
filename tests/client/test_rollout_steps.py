"""The sans-I/O agent loop driven by a scripted edge: what it asks for and what it records."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from harness.client.rollout import RolloutSteps, Step
from harness.client.stream import ResponseStream
from harness.wire.errors import APIError
from harness.workload.agent import TurnInput
from harness.workload.plan import RolloutPlan, TurnPlan
from harness.workload.records import TurnRecord

MS = 1_000_000


class Clock:
    """Advances 1 µs per reading and by each sleep, so every interval is known."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        self.now += 1000
        return self.now


def _steps(
    clock: Clock,
    on_turn: Callable[[TurnRecord], None],
    round_index: int = 0,
    *,
    plan: RolloutPlan | None = None,
    transport: str = "x",
    hints: bool = True,
) -> RolloutSteps:
    return RolloutSteps(
        PLAN if plan is None else plan,
        transport=transport,
        intended_start_ns=0,
        round_index=round_index,
        model="m",
        hints=hints,
        on_turn=on_turn,
        clock=clock,
    )


def _answer(rec: TurnRecord, clock: Clock, calls: int) -> ResponseStream:
    """A completed response with ``calls`` function calls, 5 ms after the send."""
    stream = ResponseStream(clock(), rec=rec)
    t = rec.sent_ns
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}
    ]
    for i in range(calls):
        item = {
            "type": "function_call",
            "id": f"fc_{i}",
            "call_id": f"call_{i}",
            "name": "run_tool",
        }
        events += [
            {
                "type": "response.output_item.added",
                "output_index": i,
                "item": {**item, "arguments": ""},
            },
            {"type": "response.function_call_arguments.delta", "output_index": i, "delta": "{}"},
            {
                "type": "response.output_item.done",
                "output_index": i,
                "item": {**item, "arguments": "{}"},
            },
        ]
    events.append(
        {"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}}
    )
    for seq, event in enumerate(events):
        t += MS
        stream.feed({**event, "sequence_number": seq}, t)
    clock.now = t
    return stream


def _drive(steps: RolloutSteps, clock: Clock, answer: Any) -> list[str]:
    """An edge: sleeps advance the clock; turns are answered by ``answer``."""
    seen = []
    while (step := steps.next()) is not Step.DONE:
        if step is Step.SLEEP:
            seen.append(f"sleep {steps.sleep_s * 1000:g}")
            clock.now += round(steps.sleep_s * 1e9)
            continue
        inp: TurnInput = steps.turn_input
        seen.append(f"turn {steps.turn_record.turn_index} ({len(inp.new_items)} new)")
        result = answer(steps.turn_record, inp)
        if isinstance(result, Exception):
            steps.failed(result)  # type: ignore[arg-type]
        else:
            steps.answered(result)
    return seen


PLAN = RolloutPlan(
    7,
    3,
    20,
    20,
    10,
    (
        TurnPlan(0, 10, 2, (40.0, 90.0), (10,), think_ms=30.0),
        TurnPlan(1, 10, 0, (), (), think_ms=0.0),
    ),
)


def test_think_turn_tools_turn_with_every_interval_accounted() -> None:
    clock = Clock()
    records: list[TurnRecord] = []
    steps = _steps(clock, records.append, round_index=2)
    seen = _drive(steps, clock, lambda rec, inp: _answer(rec, clock, inp.turn.tool_calls))
    # the slowest of the parallel tool calls decides the wait
    assert seen == ["sleep 30", "turn 0 (1 new)", "sleep 90", "turn 1 (2 new)"]
    roll = steps.finish()
    assert (roll.status, roll.turns, roll.errors, roll.round) == ("completed", 2, 0, 2)
    assert [r.turn_index for r in records] == [0, 1] and all(r.ok for r in records)
    assert roll.tool_ns >= 90 * MS and roll.tool_ns < 91 * MS
    assert roll.client_ns >= 30 * MS and roll.client_ns < 31 * MS  # think time is client time
    assert roll.model_ns == sum(r.done_ns - r.sent_ns for r in records)
    assert roll.start_ns < roll.end_ns


def test_a_failed_turn_ends_the_rollout_with_its_kind() -> None:
    clock = Clock()
    records: list[TurnRecord] = []
    steps = _steps(clock, records.append)
    seen = _drive(steps, clock, lambda rec, inp: APIError(503, "service_unavailable", "busy"))
    assert seen == ["sleep 30", "turn 0 (1 new)"]
    roll = steps.finish()
    assert (roll.status, roll.error_kind, roll.turns, roll.errors) == (
        "error",
        "service_unavailable",
        1,
        1,
    )
    assert (records[0].status, records[0].error_kind) == ("error", "service_unavailable")


def test_the_edge_must_answer_before_asking_again() -> None:
    steps = _steps(Clock(), lambda rec: None)
    assert steps.next() is Step.SLEEP and steps.next() is Step.TURN
    with pytest.raises(RuntimeError, match="answered"):
        steps.next()


@pytest.mark.parametrize("hints", [True, False])
def test_a_refusal_of_the_metadata_hints_says_to_drop_them(hints: bool) -> None:
    """The Messages API refuses unknown metadata keys; the error must say what to do."""
    clock = Clock()
    records: list[TurnRecord] = []
    steps = _steps(clock, records.append, transport="messages", hints=hints)
    refusal = "metadata.loopbench.output_tokens: Extra inputs are not permitted"
    _drive(steps, clock, lambda rec, inp: APIError(400, "invalid_request_error", refusal))
    message = records[0].error_message
    assert refusal in message
    assert ("add --no-hints" in message) is hints


def test_other_bad_requests_get_no_advice_about_hints() -> None:
    clock = Clock()
    records: list[TurnRecord] = []
    steps = _steps(clock, records.append)
    _drive(steps, clock, lambda rec, inp: APIError(400, "invalid_value", "max_tokens: too large"))
    assert "--no-hints" not in records[0].error_message
