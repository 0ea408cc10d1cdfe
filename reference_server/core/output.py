"""What the simulated model answers: the output policy of docs/model.md.

Pure and seeded.  ``tool_choice`` decides between function calls and a text
answer; the length comes from the ``loopbench.output_tokens`` metadata hint,
then ``max_output_tokens``, then the server default.  Function-call arguments are
valid JSON that conforms to the tool's ``parameters`` schema (required
properties, types, enums), so real tool-dispatch code accepts them.  A reasoning
budget (core/reasoning.py) puts a reasoning item before all of it.

Text is produced lazily, as its tokens fall due: the cursor holds a position,
not the pieces, so planning and streaming a response costs memory independent
of its length; only the closing events carry the whole text (docs/reliability.md
"Memory per response").
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from harness.wire import events as ev
from harness.wire.tokens import CHARS_PER_TOKEN, chunked_text, count_tokens, make_text
from reference_server.core import reasoning
from reference_server.core.arguments import make_arguments
from reference_server.core.lengths import standard_normal
from reference_server.core.tool_weights import callable_tools, pick_tool

HINT_OUTPUT_TOKENS = "loopbench.output_tokens"
HINT_TOOL_CALLS = "loopbench.tool_calls"
HINT_PARALLEL_CALLS = "loopbench.parallel_calls"
# Hints are clamped so that no metadata value can make one response unboundedly large:
# the output bound is the one validation.py puts on max_output_tokens.
MAX_HINT_OUTPUT_TOKENS = 1_000_000
MAX_PARALLEL_CALLS = 128
# An answer's length when neither a hint, a fixed default nor a profile says.
FALLBACK_OUTPUT_TOKENS = 200


class Spread(Protocol):
    """A length distribution of the engine profile (profiles.TokenSpread)."""

    def tokens(self, z: float) -> int: ...


@dataclass(frozen=True, slots=True)
class Lengths:
    """How long answers are without the ``loopbench.output_tokens`` hint (docs/model.md §11).

    ``fixed`` (``--default-output-tokens``) makes every text answer and every call that
    long; else each is drawn from ``text`` or ``tool_call``.  The request's limit cuts
    either; it never sets the length.
    """

    text: Spread | None = None
    tool_call: Spread | None = None
    fixed: int | None = None
    weights: dict[str, float] | None = None

    def draw(self, spread: Spread | None, rng: random.Random) -> int:
        if self.fixed is not None or spread is None:
            return self.fixed if self.fixed is not None else FALLBACK_OUTPUT_TOKENS
        return max(1, spread.tokens(standard_normal(rng)))


@dataclass(frozen=True, slots=True)
class PlannedCall:
    name: str
    arguments: str  # JSON text
    tokens: int


@dataclass(frozen=True, slots=True)
class OutputPlan:
    """What one response will contain: function calls, or a text answer of ``text_tokens``."""

    calls: tuple[PlannedCall, ...]
    text_tokens: int
    truncated: bool  # max_output_tokens cut the output: status incomplete
    reasoning_tokens: int = 0  # decoded first, before any visible output
    summary: bool = False  # stream a reasoning summary
    include_encrypted: bool = False  # the reasoning item carries encrypted_content

    @property
    def output_tokens(self) -> int:
        return self.reasoning_tokens + self.text_tokens + sum(c.tokens for c in self.calls)


def int_hint(metadata: dict[str, str], key: str, limit: int | None = None) -> int | None:
    """A ``loopbench.*`` metadata hint as an integer ≥ 0 (at most ``limit``); None if it is not one."""
    raw = metadata.get(key)
    if raw is None or len(raw) > 20:
        return None
    try:
        value = int(raw)
    except ValueError:
        return None
    if value < 0:
        return None
    return value if limit is None else min(value, limit)


def plan_output(
    *,
    tools: list[dict[str, Any]],
    tool_choice: Any,
    parallel_tool_calls: bool,
    metadata: dict[str, str],
    max_output_tokens: int | None,
    chain_function_calls: int,
    default_output_tokens: int | None,
    default_auto_tool_calls: int,
    rng: random.Random,
    reasoning_tokens: int = 0,
    summary: bool = False,
    include_encrypted: bool = False,
    lengths: Lengths | None = None,
    context_paths: Sequence[str] = (),
) -> OutputPlan:
    """Decide this response's output.  ``chain_function_calls`` counts calls already made in the chain.

    The ``loopbench.output_tokens`` hint is an exact plan.  Without it the length is
    ``default_output_tokens`` when set, else drawn from ``lengths`` (the engine
    profile's distributions); ``max_output_tokens`` only cuts it, and only a cut
    makes the response incomplete.  ``reasoning_tokens`` (core/reasoning.py's
    budget) come first and count against ``max_output_tokens``, as on the API:
    reasoning that exhausts it leaves no visible output and the response incomplete;
    otherwise text or a call always follows it.  ``context_paths`` (files the
    conversation named, core/arguments.py) feed the arguments of unhinted calls.
    """
    if lengths is None or default_output_tokens is not None:
        base = lengths or Lengths()
        lengths = Lengths(base.text, base.tool_call, default_output_tokens, base.weights)
    reasoning = min(reasoning_tokens, max_output_tokens or reasoning_tokens)
    thinks = reasoning > 0

    def plan(calls: Sequence[PlannedCall], text_tokens: int, truncated: bool) -> OutputPlan:
        return OutputPlan(
            tuple(calls),
            text_tokens,
            truncated,
            max(0, reasoning),
            summary and thinks,
            include_encrypted and thinks,
        )

    function_tools = callable_tools(tools)
    hint = int_hint(metadata, HINT_OUTPUT_TOKENS, MAX_HINT_OUTPUT_TOKENS)
    limit = max_output_tokens
    if limit is not None and reasoning_tokens > 0:
        if reasoning_tokens >= limit:
            return plan((), 0, truncated=True)
        limit -= reasoning_tokens

    call: bool
    chosen: list[dict[str, Any]] = function_tools
    weights = lengths.weights or {}
    if isinstance(tool_choice, dict):
        name = tool_choice.get("name")
        chosen = [t for t in function_tools if t.get("name") == name] or function_tools
        call = bool(chosen)
    elif tool_choice == "required":
        call = bool(function_tools)
    elif tool_choice == "none":
        call = False
    else:  # auto: a scripted agent makes K calls along the chain, then answers
        k = int_hint(metadata, HINT_TOOL_CALLS)
        k = default_auto_tool_calls if k is None else k
        call = bool(function_tools) and chain_function_calls < k

    if not call:
        want = max(1, hint if hint is not None else lengths.draw(lengths.text, rng))
        tokens = want if limit is None else min(want, limit)
        return plan((), tokens, truncated=limit is not None and want > limit)

    n_calls = 1
    if parallel_tool_calls:
        n_calls = max(1, int_hint(metadata, HINT_PARALLEL_CALLS, MAX_PARALLEL_CALLS) or 1)
    calls: list[PlannedCall] = []
    budget = limit
    hinted_left = max(1, hint) if hint is not None else 0
    for i in range(n_calls):
        if hint is not None:
            # loopbench's plan: what is left of the hint split evenly over the calls still to
            # make (rounded up), the tool uniformly.  A floor split lost ``hint % n_calls``
            # tokens (a recorded 167 over two calls replayed as 166); splitting what is left
            # also lets a later call make up for one its schema made longer than asked.
            per_call = max(1, -(-hinted_left // (n_calls - i)))
            tool = rng.choice(chosen)
            args = make_arguments(tool, per_call, rng)
        else:
            per_call, tool = lengths.draw(lengths.tool_call, rng), pick_tool(chosen, weights, rng)
            args = make_arguments(tool, per_call, rng, exact=False, paths=context_paths)
        toks = count_tokens(args)
        if budget is not None and toks > budget:
            # The call would be cut mid-JSON: the response ends incomplete without it.
            return plan(calls, 0, truncated=True)
        if budget is not None:
            budget -= toks
        hinted_left -= toks
        calls.append(PlannedCall(str(tool.get("name")), args, toks))
    return plan(calls, 0, truncated=False)


@dataclass(slots=True)
class _Segment:
    """One output item still to stream: ``tokens`` long, ``pos`` of them emitted."""

    kind: str  # "reasoning", "call" or "text"
    tokens: int
    name: str = ""
    arguments: str = ""
    pos: int = 0


class OutputCursor:
    """Turns "k more tokens are due" into delta events walking through the planned items.

    Nothing is produced ahead of time: text pieces are drawn from ``rng`` as they
    fall due (the same draws, so the same text, as drawing them all up front), and
    the whole text is redrawn once from the saved generator state for the closing
    events instead of being collected delta by delta.
    """

    def __init__(self, builder: ev.ResponseBuilder, plan: OutputPlan, rng: random.Random) -> None:
        self.b = builder
        self.truncated = plan.truncated
        self.plan = plan
        self.segments: list[_Segment] = []
        if plan.reasoning_tokens:
            self.segments.append(_Segment("reasoning", plan.reasoning_tokens))
        for call in plan.calls:
            self.segments.append(
                _Segment("call", count_tokens(call.arguments), call.name, call.arguments)
            )
        if plan.text_tokens:
            self.segments.append(_Segment("text", plan.text_tokens))
        self.rng = rng
        self.seg = 0
        self.open = False
        self._text_state: Any = None
        # The server's own copy of the finished reasoning item: always with its blob,
        # so a stored or cached conversation knows what the reasoning weighs.
        self.reasoning_item: dict[str, Any] | None = None
        self._summary_rng: random.Random | None = None
        self._summary_tokens = 0

    @property
    def reasoning_tokens(self) -> int:
        return self.plan.reasoning_tokens

    def emit(self, k: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while k > 0 and self.seg < len(self.segments):
            seg = self.segments[self.seg]
            if not self.open:
                out.extend(self._open(seg))
                self.open = True
            take = min(k, seg.tokens - seg.pos)
            before = seg.pos
            seg.pos += take
            k -= take
            if take:
                delta = self._delta(seg, before, take)
                if delta is not None:
                    out.append(delta)
            if seg.pos >= seg.tokens:
                out.extend(self._close(seg))
                self.seg += 1
                self.open = False
        return out

    def finish(self) -> list[dict[str, Any]]:
        """Close whatever is still open (the engine emitted fewer tokens than planned)."""
        out: list[dict[str, Any]] = []
        while self.seg < len(self.segments):
            seg = self.segments[self.seg]
            out.extend(self.emit(seg.tokens - seg.pos or 1))
        return out

    def _open(self, seg: _Segment) -> list[dict[str, Any]]:
        if seg.kind == "reasoning":
            events = self.b.begin_reasoning()
            item_id = str(self.b.open_item_id)
            if self.plan.summary:
                self._summary_rng = random.Random(item_id + "/summary")
                self._summary_tokens = reasoning.summary_tokens(seg.tokens)
                events.append(self.b.summary_part_added())
            return events
        if seg.kind == "call":
            return self.b.begin_function_call(
                seg.name, ev.new_id("call", self.rng), keep_text=False
            )
        self._text_state = self.rng.getstate()
        return self.b.begin_message(keep_text=False)

    def _delta(self, seg: _Segment, before: int, take: int) -> dict[str, Any] | None:
        if seg.kind == "reasoning":
            if self._summary_rng is None:
                return None  # hidden tokens: nothing on the wire until the item is done
            # The summary keeps pace with the reasoning it summarizes.
            due = self._summary_tokens * seg.pos // seg.tokens
            new = due - self._summary_tokens * before // seg.tokens
            return self.b.summary_delta(make_text(new, self._summary_rng)) if new else None
        if seg.kind == "call":
            start = before * CHARS_PER_TOKEN
            return self.b.arguments_delta(seg.arguments[start : start + take * CHARS_PER_TOKEN])
        return self.b.text_delta(make_text(take, self.rng))

    def _close(self, seg: _Segment) -> list[dict[str, Any]]:
        if seg.kind == "reasoning":
            events = self.b.summary_done() if self._summary_rng is not None else []
            item_id = str(self.b.open_item_id)
            blob = reasoning.encrypted_content(seg.tokens, item_id)
            events += self.b.end_reasoning(blob if self.plan.include_encrypted else None)
            self.reasoning_item = dict(self.b.output[-1], encrypted_content=blob)
            return events
        if seg.kind == "call":
            return self.b.end_function_call(seg.arguments)
        replay = random.Random()
        replay.setstate(self._text_state)
        self._text_state = None
        # A message cut by max_output_tokens is itself incomplete.
        return self.b.end_message(
            "incomplete" if self.truncated else "completed", chunked_text(seg.pos, replay)
        )

    def conversation_items(self, output: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``output`` as the conversation keeps it: the reasoning item with its blob."""
        kept = self.reasoning_item
        if kept is None:
            return output
        return [kept if it.get("id") == kept["id"] else it for it in output]
