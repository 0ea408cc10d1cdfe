"""The agent loop, sans I/O: think, send a turn, run the tools, record; written once for both edges.

:class:`RolloutSteps` walks a :class:`~harness.workload.plan.RolloutPlan` and tells its edge
what to do next, one :class:`Step` at a time (each member says what the edge does before it
calls :meth:`~RolloutSteps.next` again); the edge only sleeps, does the turn's I/O and
supplies the clock.  Sub-agents (docs/metrics.md §1.7) are steppers of their own, over a
session of their own or a lane of this one, started at ``Step.FORK`` as concurrent tasks; at
``Step.DONE`` the edge waits for all of them (the detached ones too) before
:meth:`~RolloutSteps.finish`, so the rollout's record spans the whole tree.  The edge, one
short loop: harness/transports/rollout_loop.py (asyncio; a Locust worker runs it too, in its
edge host).

The pure :class:`~harness.workload.agent.Transcript` decides what each turn
sends; the steps keep the rollout record (model, tool, client and recovery time)
and pass every finished turn record to ``on_turn``.  The stepper runs once per
turn and per sleep, never per streamed event.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from enum import Enum
from typing import Any, TypedDict

from harness.client import honesty
from harness.client.api_errors import CONTEXT_LENGTH_EXCEEDED, context_message, error_kind
from harness.client.stream import ResponseStream
from harness.wire.errors import APIError, LoopbenchError
from harness.wire.tokens import FIXED_WIDTH, TokenConvention
from harness.wire.transports import BY_NAME, TransportSpec
from harness.workload.agent import Transcript, TurnInput
from harness.workload.plan import RolloutPlan, SubagentPlan, subagent_rollout
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
    DONE = "done"  # wait for every task of forks, then call finish()
    FORK = "fork"  # start a concurrent task for each stepper in forks, then call next()
    JOIN = "join"  # wait until every stepper in joining is done, then call next()


# where the rollout is between two calls
_READY, _THINKING, _IN_TURN, _TOOLS_DUE, _TOOLS_RUNNING, _OVER, _FORK_DUE, _FORKED, _JOINING = (
    range(9)
)
#: the counts a finished sub-agent's record adds to its parent's (RolloutSteps._fold)
_SUMS = ("conversations", "turns", "errors", "model_ns", "recoveries", "recovery_ns", "connections")


class ContextOptions(TypedDict):
    resend_reasoning: bool
    server_holds_reasoning: bool
    chain: bool


def context_options(spec: TransportSpec | None, plan: RolloutPlan) -> ContextOptions:
    """How a rollout's context goes out over ``spec``: the :class:`Transcript` options.

    The transport decides, except where the recorded client's choice is the client's
    (the plan's ``ws_chains`` and ``resends_reasoning``, from a trace's ``client``).
    """
    # stateless: nothing on the server side to hold the reasoning (docs/protocol.md)
    stateless = spec is not None and not spec.chained and not spec.websocket
    # Over WebSocket the client chooses to chain or to re-send: as the trace recorded it.
    resent_ws = spec is not None and spec.websocket and not spec.append and plan.ws_chains is False
    whole = stateless or resent_ws  # the whole history goes out every turn
    # A Responses client may send no reasoning back (include: [], no items), as the trace
    # recorded; Messages wants its thinking blocks back and Chat has no field for them.
    dropped = whole and spec is not None and spec.api == "responses"
    dropped = dropped and plan.resends_reasoning is False
    return ContextOptions(
        resend_reasoning=whole and not dropped,
        server_holds_reasoning=not whole,
        chain=not resent_ws,
    )


class RolloutSteps:
    #: the turn to send, valid after next() returned Step.TURN
    turn_input: TurnInput
    turn_record: TurnRecord
    #: the sub-agents to start, valid after next() returned Step.FORK
    forks: list[RolloutSteps]
    #: the sub-agents to wait for, valid after next() returned Step.JOIN
    joining: list[RolloutSteps]

    __slots__ = (
        "_answers",
        "_children",
        "_clock",
        "_compact_at",
        "_compacted_index",
        "_compacting",
        "_crit_path",
        "_crit_turns",
        "_done_ns",
        "_fork_args",
        "_index",
        "_jobs",
        "_on_turn",
        "_phase",
        "_subagent",
        "_t0",
        "_tools_end",
        "_transcript",
        "_wait_ms",
        "answer_text",
        "conversation",
        "forks",
        "join",
        "joining",
        "parent_conversation",
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
        subagent: SubagentPlan | None = None,
        parent_conversation: int = -1,
    ) -> None:
        """``subagent``: this stepper runs that sub-agent of ``plan`` (the root rollout's)."""
        self._fork_args = (plan, intended_start_ns, model, hints, compact_at_tokens, tokens)
        self.conversation = subagent.subagent_id if subagent is not None else 0
        self.parent_conversation = parent_conversation
        self.join = subagent.join if subagent is not None else "wait"
        self._subagent = subagent
        #: the text of the conversation's final answer (a sub-agent's result)
        self.answer_text = ""
        #: call index → answer of the joined sub-agent that answered it (this turn's)
        self._answers: dict[int, str] = {}
        if subagent is not None:
            plan = subagent_rollout(plan, subagent)
            intended_start_ns = clock()
        self.plan = plan
        self.transport = transport
        self._clock = clock
        self._on_turn = on_turn
        roll = self.record = RolloutRecord(
            transport=transport, rollout_id=plan.rollout_id, round=round_index
        )
        roll.intended_start_ns = intended_start_ns
        roll.start_ns = clock()
        self._transcript = Transcript(
            plan,
            model=model,
            hints=hints,
            tokens=tokens,
            salt=pass_salt(transport, round_index),
            **context_options(BY_NAME.get(transport), plan),
        )
        self._index = 0
        self._phase = _READY
        self._t0 = 0
        self._jobs: list[tuple[str, int]] = []
        self.sleep_s = 0.0
        self._compact_at = compact_at_tokens
        self._compacting = False  # the request in flight is a compaction
        self._compacted_index = -1  # at most one compaction before each turn
        self.forks = []
        self.joining = []
        self._children: list[RolloutSteps] = []  # started, not yet folded into the record
        self._wait_ms = 0.0
        self._tools_end = 0
        self._done_ns = 0
        self._crit_turns = 0
        self._crit_path = str(self.conversation)

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
            if self._must_join():
                return Step.JOIN
            self._tools_done()
        elif phase == _FORK_DUE:
            self._children.extend(self.forks)
            self._phase = _FORKED
            return Step.FORK
        elif phase == _FORKED:
            self.forks = []
            self._t0 = clock()
            if self._wait_ms > 0:
                self.sleep_s = self._wait_ms / 1000
                self._phase = _TOOLS_RUNNING
                return Step.SLEEP
            if self._must_join():
                return Step.JOIN
            self._tools_done()
        elif phase == _JOINING:
            self._joined()
            if self._phase == _OVER:
                self._done_ns = clock()
                return Step.DONE
            self._tools_done(timed=False)
        elif phase == _OVER:
            if not self._done_ns:
                self._done_ns = clock()
            return Step.DONE
        elif phase == _IN_TURN:
            raise RuntimeError("next() before the turn was answered() or failed()")
        turns = self.plan.turns
        if self._index >= len(turns):
            roll.status = "completed"
            self._phase = _OVER
            self._done_ns = clock()
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
            conversation=self.conversation,
            parent_conversation=self.parent_conversation,
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
        stream.fill(rec)
        if rec.error_kind == CONTEXT_LENGTH_EXCEEDED:
            # Refused inside a stream (an append segment): worded as the error response is.
            rec.error_message = context_message(rec.error_message)
        spec = BY_NAME.get(self.transport)
        # A compaction is one JSON answer (no first event or token, ResponseStream.whole): no
        # output to judge.
        if not self._compacting and spec is not None:
            honesty.check(spec, rec)
        roll.turns += 1
        self._crit_turns += 1
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
            if self._subagent is not None:
                self.answer_text = _answer_text(stream.output_items)
            self._index += 1
            self._phase = _READY
            return
        # Parallel tool calls run concurrently on the client: the turn waits for the slowest.
        # A call a sub-agent answers takes the sub-agent's time instead (joined below).
        latencies = turn.tool_latency_ms or (0.0,)
        by_subagent = {sub.call_index for sub in turn.subagents}
        wait_ms = max(
            (latencies[i % len(latencies)] for i in range(len(jobs)) if i not in by_subagent),
            default=0.0,
        )
        self._jobs = jobs
        if turn.subagents:
            self.forks = [self._fork(sub) for sub in turn.subagents]
            self._wait_ms = wait_ms
            self._phase = _FORK_DUE
            return
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
        roll = self.record
        roll.end_ns = self._clock()
        # Detached sub-agents (and those left running when this conversation failed) end it.
        children, self._children = self._children, []
        last = self._fold(children)
        if last is not None and last.record.end_ns > self._done_ns:
            roll.subagent_wait_ns += last.record.end_ns - self._done_ns
            self._crit_turns += last._crit_turns
            self._crit_path += ">" + last._crit_path
        roll.critical_path_turns = self._crit_turns
        roll.critical_path = self._crit_path
        self._fail_with(children)
        return roll

    def _current(self) -> TurnRecord:
        if self._phase != _IN_TURN:
            raise RuntimeError("no turn in flight")
        return self.turn_record

    def _fork(self, sub: SubagentPlan) -> RolloutSteps:
        root, _, model, hints, compact_at, tokens = self._fork_args
        return RolloutSteps(
            root,
            transport=self.transport,
            intended_start_ns=0,
            round_index=self.record.round,
            model=model,
            hints=hints,
            on_turn=self._on_turn,
            clock=self._clock,
            compact_at_tokens=compact_at,
            tokens=tokens,
            subagent=sub,
            parent_conversation=self.conversation,
        )

    def _must_join(self) -> bool:
        """After this conversation's own tools: whether sub-agents it waits for still run."""
        waiting = [c for c in self._children if c.join == "wait"]
        if not waiting:
            return False
        c = self._tools_end = self._clock()
        self.record.tool_ns += c - self._t0
        self.joining = waiting
        self._phase = _JOINING
        return True

    def _joined(self) -> None:
        """The sub-agents in ``joining`` are done: their time and turns join this record."""
        roll = self.record
        joined, self.joining = self.joining, []
        for child in joined:
            if child._subagent is not None and child.answer_text:
                self._answers[child._subagent.call_index] = child.answer_text
        self._children = [c for c in self._children if c not in joined]
        waited = self._clock() - self._tools_end
        roll.subagent_wait_ns += waited
        last = self._fold(joined)
        if last is not None and last.record.end_ns > self._tools_end:
            # The slowest sub-agent outlasted this conversation's tools: the path runs through it.
            self._crit_turns += last._crit_turns
            self._crit_path += f">{last._crit_path}>{self.conversation}"
        if self._fail_with(joined):
            self._phase = _OVER

    def _fail_with(self, children: list[RolloutSteps]) -> bool:
        """A failed sub-agent fails the rollout, with its error kind (the first one's)."""
        for child in children:
            sub = child.record
            if not sub.ok:
                roll = self.record
                if roll.ok or not roll.error_kind:
                    roll.status = "error"
                    roll.error_kind = sub.error_kind or sub.status
                return True
        return False

    def _fold(self, children: list[RolloutSteps]) -> RolloutSteps | None:
        """Add finished sub-agents' records to this one; the one that ended last."""
        roll = self.record
        last: RolloutSteps | None = None
        for child in children:
            sub = child.record
            if not sub.end_ns:
                raise RuntimeError("a sub-agent was joined before its finish()")
            for name in _SUMS:
                setattr(roll, name, getattr(roll, name) + getattr(sub, name))
            if last is None or sub.end_ns > last.record.end_ns:
                last = child
        return last

    def _tools_done(self, *, timed: bool = True) -> None:
        clock = self._clock
        roll = self.record
        c2 = clock()
        if timed:
            roll.tool_ns += c2 - self._t0
        self._transcript.add_tool_outputs(self._index, self._jobs, self._answers)
        self._answers = {}
        roll.client_ns += clock() - c2
        self._index += 1


def _answer_text(items: list[dict[str, Any]]) -> str:
    """The text of a response's message items (its final answer)."""
    return "".join(
        part["text"]
        for item in items
        if item.get("type") == "message"
        for part in item.get("content") or ()
        if isinstance(part, dict) and isinstance(part.get("text"), str)
    )
