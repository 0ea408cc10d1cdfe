"""The agent loop, sans I/O: think, send a turn, run the tools, record; written once for both edges.

:class:`RolloutSteps` walks a :class:`~harness.workload.plan.RolloutPlan` and tells
its edge what to do next; the edge only sleeps, does the turn's I/O and supplies
the clock.  The edge calls :meth:`~RolloutSteps.next` until it returns
``Step.DONE``: on ``Step.SLEEP`` it sleeps ``sleep_s``; on ``Step.TURN`` it sends
``turn_input`` and reports :meth:`~RolloutSteps.answered` with the stream or
:meth:`~RolloutSteps.failed` with the error; then :meth:`~RolloutSteps.finish`
gives the rollout record.  The two edges, each one short loop:
harness/transports/rollout_loop.py (asyncio) and harness/locust_driver/agent_loop.py
(gevent).

The pure :class:`~harness.workload.agent.Transcript` decides what each turn
sends; the steps keep the rollout record (model, tool, client and recovery time)
and pass every finished turn record to ``on_turn``.  The stepper runs once per
turn and per sleep, never per streamed event.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from enum import Enum

from harness.client import honesty
from harness.client.api_errors import CONTEXT_LENGTH_EXCEEDED, context_message, error_kind
from harness.client.stream import ResponseStream
from harness.wire.errors import APIError, LoopbenchError
from harness.wire.tokens import FIXED_WIDTH, TokenConvention
from harness.wire.transports import BY_NAME
from harness.workload.agent import Transcript, TurnInput
from harness.workload.plan import RolloutPlan
from harness.workload.records import RolloutRecord, TurnRecord

TurnSink = Callable[[TurnRecord], None]
Clock = Callable[[], int]


def pass_salt(transport: str, round_index: int) -> str:
    """Eight hex digits naming one transport's replay (one round of it), put first in the
    instructions and the tool description of every rollout it sends.

    Every transport replays the same rollouts one after the other, and a server's prefix cache
    (the reference server's, vLLM's, SGLang's) is keyed by content: without it, each replay
    would find the previous one's prompts cached and start its first turns warm — a gift to
    whichever transport runs later.  The salt has the same length for every transport, so the
    replays stay paired token for token (docs/metrics.md §2).
    """
    return f"{zlib.crc32(f'{transport}|{round_index}'.encode()):08x}"


class Step(Enum):
    SLEEP = "sleep"  # sleep sleep_s (think time or the tools' latency), then call next()
    TURN = "turn"  # send turn_input, fill turn_record, report answered() or failed()
    DONE = "done"  # call finish()


# where the rollout is between two calls
_READY, _THINKING, _IN_TURN, _TOOLS_DUE, _TOOLS_RUNNING, _OVER = range(6)


class RolloutSteps:
    #: the turn to send, valid after next() returned Step.TURN
    turn_input: TurnInput
    turn_record: TurnRecord

    __slots__ = (
        "_clock",
        "_compact_at",
        "_compacted_index",
        "_compacting",
        "_index",
        "_jobs",
        "_on_turn",
        "_phase",
        "_t0",
        "_transcript",
        "plan",
        "record",
        "sleep_s",
        "transport",
        "turn_input",
        "turn_record",
    )

    def __init__(
        self,
        plan: RolloutPlan,
        *,
        transport: str,
        intended_start_ns: int,
        round_index: int,
        model: str,
        hints: bool,
        on_turn: TurnSink,
        clock: Clock,
        compact_at_tokens: int | None = None,
        tokens: TokenConvention = FIXED_WIDTH,
    ) -> None:
        self.plan = plan
        self.transport = transport
        self._clock = clock
        self._on_turn = on_turn
        roll = self.record = RolloutRecord(
            transport=transport, rollout_id=plan.rollout_id, round=round_index
        )
        roll.intended_start_ns = intended_start_ns
        roll.start_ns = clock()
        spec = BY_NAME.get(transport)
        # stateless: nothing on the server side to hold the reasoning (docs/protocol.md)
        stateless = spec is not None and not spec.chained and not spec.websocket
        self._transcript = Transcript(
            plan,
            model=model,
            hints=hints,
            resend_reasoning=stateless,
            tokens=tokens,
            salt=pass_salt(transport, round_index),
        )
        self._index = 0
        self._phase = _READY
        self._t0 = 0
        self._jobs: list[tuple[str, int]] = []
        self.sleep_s = 0.0
        self._compact_at = compact_at_tokens
        self._compacting = False  # the request in flight is a compaction
        self._compacted_index = -1  # at most one compaction before each turn

    def next(self) -> Step:
        clock = self._clock
        roll = self.record
        phase = self._phase
        if phase == _THINKING:
            roll.client_ns += clock() - self._t0
        elif phase == _TOOLS_DUE:
            self._phase = _TOOLS_RUNNING
            return Step.SLEEP
        elif phase == _TOOLS_RUNNING:
            self._tools_done()
        elif phase == _OVER:
            return Step.DONE
        elif phase == _IN_TURN:
            raise RuntimeError("next() before the turn was answered() or failed()")
        turns = self.plan.turns
        if self._index >= len(turns):
            roll.status = "completed"
            self._phase = _OVER
            return Step.DONE
        index = self._index
        turn = turns[index]
        # After a compaction the turn goes out at once: its think time was spent before it.
        thought = phase == _THINKING or self._compacted_index == index
        if not thought and turn.think_ms > 0:
            self._t0 = clock()
            self.sleep_s = turn.think_ms / 1000
            self._phase = _THINKING
            return Step.SLEEP
        c0 = clock()
        transcript = self._transcript
        compact_at = self._compact_at
        self._compacting = (
            compact_at is not None
            and index > 0
            and self._compacted_index != index
            and transcript.context_tokens() >= compact_at
        )
        if self._compacting:
            self._compacted_index = index
            self.turn_input = transcript.compaction_input(index)
        else:
            self.turn_input = transcript.next_input(index)
        rec = self.turn_record = TurnRecord(
            transport=self.transport,
            rollout_id=self.plan.rollout_id,
            turn_index=index,
            round=roll.round,
            compaction=self._compacting,
        )
        rec.intended_start_ns = c0
        # A compaction's input is the history and the tool outputs pending for the turn.
        rec.history_tokens = (
            transcript.context_tokens() if self._compacting else transcript.history_tokens
        )
        if not self._compacting:
            turn = self.plan.turns[index]
            rec.planned_output_tokens = turn.output_tokens + turn.reasoning_tokens
        roll.client_ns += clock() - c0
        self._phase = _IN_TURN
        return Step.TURN

    def answered(self, stream: ResponseStream) -> None:
        """The turn's stream ended (its terminal event, or a paused append segment)."""
        rec = self._current()
        roll = self.record
        sent_ns = rec.sent_ns
        stream.fill(rec)
        rec.sent_ns = sent_ns
        if rec.error_kind == CONTEXT_LENGTH_EXCEEDED:
            # Refused inside a stream (an append segment): worded as the error response is.
            rec.error_message = context_message(rec.error_message)
        spec = BY_NAME.get(self.transport)
        if self._compacting:
            # One JSON answer, no stream: its time is the turn's latency, and it has no
            # first byte or token to put in TTFB or TTFT (docs/metrics.md).
            rec.first_event_ns = 0
        elif spec is not None:
            honesty.check(spec, rec)
        roll.turns += 1
        roll.model_ns += rec.done_ns - rec.sent_ns
        roll.recoveries += rec.recoveries
        roll.recovery_ns += rec.recovery_ns
        if rec.new_connection:
            roll.connections += 1
        if not rec.ok:
            roll.errors += 1
            roll.status = rec.status
            roll.error_kind = rec.error_kind or rec.status
            self._on_turn(rec)
            self._phase = _OVER
            return
        self._on_turn(rec)
        clock = self._clock
        index = self._index
        c1 = clock()
        if self._compacting:
            self._compacting = False
            self._transcript.compacted(stream.output_items)
            roll.client_ns += clock() - c1
            self._phase = _READY
            return
        jobs = self._transcript.record_output(index, stream.output_items, rec.reasoning_tokens)
        roll.client_ns += clock() - c1
        turn = self.plan.turns[index]
        if turn.final or not jobs:
            self._index += 1
            self._phase = _READY
            return
        # Parallel tool calls run concurrently on the client: the turn waits for the slowest.
        latencies = turn.tool_latency_ms or (0.0,)
        wait_ms = max(latencies[i % len(latencies)] for i in range(len(jobs)))
        self._jobs = jobs
        self._t0 = clock()
        if wait_ms > 0:
            self.sleep_s = wait_ms / 1000
            self._phase = _TOOLS_DUE
        else:
            self._tools_done()
            self._phase = _READY

    def failed(self, exc: LoopbenchError) -> None:
        """The turn could not be completed: it and the rollout end with ``exc``'s kind."""
        rec = self._current()
        roll = self.record
        rec.status = "error"
        rec.error_kind = error_kind(exc)
        # Whole: the message is the user's only lead on the cause (bodies are cut where quoted).
        rec.error_message = str(exc) + self._hint_advice(exc)
        rec.done_ns = self._clock()
        roll.turns += 1
        roll.errors += 1
        roll.status = "error"
        roll.error_kind = rec.error_kind
        roll.recoveries += rec.recoveries
        self._on_turn(rec)
        self._phase = _OVER

    def _hint_advice(self, exc: LoopbenchError) -> str:
        """What to do when an endpoint refuses the request because of loopbench's hints.

        Only the reference server reads the ``loopbench.*`` metadata; the Chat Completions API
        takes no metadata without ``store`` and the Messages API only ``user_id``, so a real
        endpoint answers 400 naming ``metadata``.
        """
        if (
            self._transcript.hints
            and isinstance(exc, APIError)
            and exc.status == 400
            and "metadata" in str(exc)
        ):
            return (
                " (loopbench sent its loopbench.* metadata hints, which only its reference "
                "server reads: add --no-hints for this endpoint)"
            )
        return ""

    def finish(self) -> RolloutRecord:
        """The rollout record, ended now (call after the edge closed its session)."""
        self.record.end_ns = self._clock()
        return self.record

    def _current(self) -> TurnRecord:
        if self._phase != _IN_TURN:
            raise RuntimeError("no turn in flight")
        return self.turn_record

    def _tools_done(self) -> None:
        clock = self._clock
        roll = self.record
        c2 = clock()
        roll.tool_ns += c2 - self._t0
        self._transcript.add_tool_outputs(self._index, self._jobs)
        roll.client_ns += clock() - c2
        self._index += 1
