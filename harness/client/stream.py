"""Client-side state machine for one Responses stream: ``(event, t_ns)`` in, measurements out.

A transport decodes events (SSE or WebSocket frames), stamps each with a monotonic
``t_ns`` at the I/O edge and feeds it to :class:`ResponseStream`.  The stream
enforces the ordering invariants of docs/protocol.md §1.3 (raising
:class:`~harness.wire.errors.StreamOrderError` with the event, its sequence number and
what was expected), collects output items, usage and the server's ``sim_timing``,
and computes the timing metrics of docs/metrics.md §1, which :meth:`ResponseStream.fill`
copies into a :class:`~harness.workload.records.TurnRecord`.

Append prototype (docs/protocol.md §5): ``response.done`` with ``response.status ==
"in_progress"`` ends a *segment* (``status == "paused"``, ``done`` is True).  After
:meth:`ResponseStream.resume` the same object accepts the rest of the response:
ordering state and sequence numbers carry over, while measurements (timestamps,
deltas, ITL, tokens, output items) restart, so each segment is measured as one turn.

Reasoning (docs/metrics.md §1.1): a reasoning item's ``response.output_item.added`` is
sent when its first reasoning token exists, so it is the first token of the response
(TTFT) like any delta; its reasoning-text deltas are tokens too.  The visible output
(text, tool-call arguments, refusals) starts at ``first_output_ns`` (TTFOT), and ITL,
the burst window and the streamed-token count read the visible deltas only, so the time
a model spends reasoning does not pass for slow decoding.

The ``chat`` and ``messages`` transports feed it the same events, translated from their
APIs' streams (:mod:`harness.client.translate`), plus one event of loopbench's own,
:data:`FUNCTION_NAME_TOKEN`: a Chat Completions tool call's name, output without text.

Unknown event types and fields are ignored (forward compatibility) but still
consume a sequence number.
"""

from __future__ import annotations

from typing import Any, Generic, NoReturn, TypeVar

from harness.wire.errors import StreamOrderError
from harness.wire.events import (
    ARGUMENTS_DELTA,
    ARGUMENTS_DONE,
    COMPLETED,
    CONTENT_PART_ADDED,
    CONTENT_PART_DONE,
    CREATED,
    DELTA_TYPES,
    DONE,
    ERROR,
    FAILED,
    IN_PROGRESS,
    INCOMPLETE,
    OUTPUT_ITEM_ADDED,
    OUTPUT_ITEM_DONE,
    QUEUED,
    REASONING_SUMMARY_TEXT_DELTA,
    REASONING_TEXT_DELTA,
    REFUSAL_DELTA,
    TEXT_DELTA,
    TEXT_DONE,
)
from harness.wire.tokens import FIXED_WIDTH, TokenConvention, count_tokens
from harness.workload.records import BURST_WINDOW_NS, SIM_FIELDS, TurnRecord

__all__ = ["FUNCTION_NAME_TOKEN", "ResponseStream"]

#: not a Responses event: what a translated stream (harness/client/translate.py) feeds when a
#: function call's name arrives as output of its own (Chat Completions' first tool-call delta);
#: a Responses server never sends it (its names come in ``output_item.added``)
FUNCTION_NAME_TOKEN = "loopbench.function_call_name"

_TERMINAL_STATUS = {COMPLETED: "completed", INCOMPLETE: "incomplete", FAILED: "failed"}
# Events scoped to one content part of an item.
_PART_EVENTS = frozenset({TEXT_DELTA, TEXT_DONE, CONTENT_PART_DONE})
# Events scoped to an item but not to a content part (item must be added, not yet done).
_ITEM_EVENTS = frozenset({ARGUMENTS_DELTA, ARGUMENTS_DONE}) | (DELTA_TYPES - {TEXT_DELTA})
#: the deltas of the visible output: what TTFOT, ITL, decode rates and bursts are measured on
VISIBLE_DELTA_TYPES = frozenset({TEXT_DELTA, ARGUMENTS_DELTA, REFUSAL_DELTA})
#: a reasoning summary's text, streamed while the model reasons: a token of the response, not
#: of its visible output (the summary's length is not the reasoning's)
SUMMARY_DELTA = REASONING_SUMMARY_TEXT_DELTA


_V = TypeVar("_V")


class _OnRecord(Generic[_V]):
    """A stream attribute that lives on the stream's :class:`TurnRecord`: the turn's timestamps
    have one home and one writer (the stream), and the record needs no copy of them."""

    __slots__ = ("name",)

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: ResponseStream, objtype: type | None = None) -> _V:
        value: _V = getattr(obj.rec, self.name)
        return value

    def __set__(self, obj: ResponseStream, value: _V) -> None:
        setattr(obj.rec, self.name, value)


class ResponseStream:
    """Per-response state machine; see the module docstring.

    ``status`` is ``"pending"`` before ``response.created``, ``"in_progress"`` while
    streaming, then one of ``"completed"``, ``"incomplete"``, ``"failed"``,
    ``"error"`` (an ``error`` event not, or not yet, followed by ``response.failed``)
    or ``"paused"`` (append prototype).  ``done`` is True in all terminal states;
    after an ``error`` event only ``response.failed`` is still accepted.

    The timestamps, the delta count and the gaps are written straight into ``rec``, the turn's
    record (a record of its own when none is given: the probe's, a test's); :meth:`fill` adds
    what is known only at the end (status, usage, ``sim_timing``).
    """

    sent_ns = _OnRecord[int]()
    first_event_ns = _OnRecord[int]()
    first_token_ns = _OnRecord[int]()
    first_output_ns = _OnRecord[int]()
    last_token_ns = _OnRecord[int]()
    done_ns = _OnRecord[int]()
    delta_events = _OnRecord[int]()
    output_arrivals = _OnRecord[int]()
    first_arrival_tokens = _OnRecord[int]()
    first_arrival_deltas = _OnRecord[int]()

    def __init__(
        self,
        sent_ns: int,
        burst_window_ns: int = BURST_WINDOW_NS,
        tokens: TokenConvention = FIXED_WIDTH,
        rec: TurnRecord | None = None,
    ) -> None:
        self.rec = rec if rec is not None else TurnRecord("", 0, 0)
        if burst_window_ns <= 0:
            raise ValueError(f"burst_window_ns: expected a positive number, got {burst_window_ns}")
        self.burst_window_ns = burst_window_ns
        #: counts the streamed text (--tokenizer); the default needs only its length
        self.tokens = tokens
        self.status = "pending"
        self.done = False
        self.response_id: str | None = None
        self.response: dict[str, Any] | None = None
        self.usage: dict[str, Any] | None = None
        self.sim_timing: dict[str, Any] | None = None
        self.error_code: str | None = None
        self.error_message: str | None = None
        # ordering state: lives for the whole response, across pause/resume
        self._created = False
        #: some read of this response carried a kernel receive stamp (the edge sets it)
        self.rx_kernel = False
        self._last_seq: int | None = None
        self._added: dict[int, dict[str, Any]] = {}
        self._item_done: set[int] = set()
        self._parts: set[tuple[int, int]] = set()
        self._tokens_before = 0
        self._reasoning_before = 0
        #: (output_index, content_index, item_id) of the text part the last text delta passed
        #: every check for; cleared when an item ends or a segment starts (see :meth:`feed`)
        self._hot: tuple[int, int, object] | None = None
        self._start_segment(sent_ns)

    def _start_segment(self, sent_ns: int) -> None:
        self._hot = None
        rec = self.rec
        rec.sent_ns = sent_ns
        #: the user-space stamp of the read that carried the first token, when the edge stamped
        #: it with the kernel's receive time (first_token_ns); 0 otherwise
        self.first_token_user_ns = 0
        rec.first_event_ns = rec.first_token_ns = rec.first_output_ns = 0
        rec.last_token_ns = rec.done_ns = rec.delta_events = rec.output_arrivals = 0
        rec.first_arrival_tokens = 0
        rec.first_arrival_deltas = 0
        #: the record's own list: the gaps are appended where they are kept
        self.itl_ns: list[int] = []
        rec.itl_ns = self.itl_ns
        #: when a tool call's name arrived (visible output that is no delta)
        self._name_t: list[int] = []
        self.burst_tokens_max = 0
        self._items: dict[int, dict[str, Any]] = {}
        self._delta_t: list[int] = []
        self._delta_len: list[int] = []
        self._text_chars = 0
        self._reasoning_chars = 0
        # The text itself only under a real tokenizer: the 4-character rule needs its length,
        # and keeping every delta would cost the default path on every event.
        self._text: list[str] | None = None if self.tokens is FIXED_WIDTH else []
        self._reasoning_text: list[str] | None = None if self.tokens is FIXED_WIDTH else []
        self._output_tokens: int | None = None
        self._reasoning_tokens: int | None = None

    # -- public results ----------------------------------------------------------------------

    @property
    def output_items(self) -> list[dict[str, Any]]:
        """Output items completed in this segment, in ``output_index`` order."""
        return [self._items[i] for i in sorted(self._items)]

    @property
    def function_calls(self) -> list[dict[str, Any]]:
        """The ``function_call`` items among :attr:`output_items`."""
        return [it for it in self.output_items if it.get("type") == "function_call"]

    @property
    def output_tokens(self) -> int:
        """``usage.output_tokens`` (minus earlier segments) if known, else counted from delta text
        (the reasoning text included: usage counts reasoning as output)."""
        if self._output_tokens is not None:
            return self._output_tokens
        return self._segment_tokens() + self._streamed_reasoning_tokens()

    @property
    def streamed_tokens(self) -> int:
        """This segment's streamed delta text in tokens (the stream's token convention: the
        4-character rule of harness/wire/tokens.py, or the run's --tokenizer)."""
        return self._segment_tokens()

    @property
    def reasoning_tokens(self) -> int:
        """This segment's ``usage.output_tokens_details.reasoning_tokens`` (part of the output,
        not streamed as visible output); when usage does not say, the streamed reasoning text."""
        if self._reasoning_tokens is not None:
            return self._reasoning_tokens
        return self._streamed_reasoning_tokens()

    @property
    def visible_tokens(self) -> int:
        """The visible output: :attr:`output_tokens` less :attr:`reasoning_tokens`."""
        return max(0, self.output_tokens - self.reasoning_tokens)

    def resume(self, sent_ns: int, rec: TurnRecord | None = None) -> None:
        """Continue a paused response (append prototype); measurement restarts at ``sent_ns``,
        into ``rec`` (the next turn's record) when given."""
        if self.status != "paused":
            raise StreamOrderError(
                f"resume() of response {self.response_id}: expected status paused, got {self.status}"
            )
        self._tokens_before += self.output_tokens
        self._reasoning_before += self.reasoning_tokens
        self.status = "in_progress"
        self.done = False
        if rec is not None:
            self.rec = rec
        self._start_segment(sent_ns)

    def whole(self, response: dict[str, Any], done_ns: int) -> None:
        """The response came as one JSON body at ``done_ns`` (a compaction): completed, with its
        output and usage, and no event — so no first event or token for TTFB or TTFT."""
        self._created = True
        self.status = "in_progress"
        self._on_terminal(COMPLETED, None, {"type": COMPLETED, "response": response}, done_ns)

    # -- feeding -----------------------------------------------------------------------------

    def feed(self, event: dict[str, Any], t_ns: int) -> None:
        """Apply one decoded event received at ``t_ns``; raise StreamOrderError if it is out of order."""
        hot = self._hot
        if hot is not None and type(event) is dict and event.get("type") == TEXT_DELTA:
            # Most events of a stream are the next text delta of the part the previous one
            # passed every check for: then only the sequence number and the part's identity
            # need a look (any other value, or a type that merely compares equal, takes the
            # full path below and its error message).
            seq = event.get("sequence_number")
            last = self._last_seq
            oi = event.get("output_index")
            ci = event.get("content_index")
            if (
                type(seq) is int
                and last is not None
                and seq == last + 1
                and type(oi) is int
                and type(ci) is int
                and (oi, ci, event.get("item_id")) == hot
                and not self.done
            ):
                self._last_seq = seq
                rec = self.rec
                rec.delta_events += 1
                # _visible_delta, inlined: this is the line every token of a stream runs
                delta = event.get("delta")
                n = len(delta) if isinstance(delta, str) else 0
                times = self._delta_t
                self.itl_ns.append(t_ns - times[-1])  # not the first delta: one passed before
                rec.last_token_ns = t_ns
                times.append(t_ns)
                self._delta_len.append(n)
                self._text_chars += n
                if self._text is not None and n:
                    self._text.append(str(delta))
                return
        etype = event.get("type") if isinstance(event, dict) else None
        if not isinstance(etype, str):
            raise StreamOrderError(
                f"event without a string 'type' after sequence_number {self._last_seq}: "
                f"expected a Responses event object, got {_preview(event)}"
            )
        seq = event.get("sequence_number")
        if seq is not None:
            if not isinstance(seq, int) or isinstance(seq, bool):
                self._fail(etype, seq, "an integer sequence_number", repr(seq))
            if self._last_seq is not None and seq != self._last_seq + 1:
                self._fail(etype, seq, f"sequence_number {self._last_seq + 1}", str(seq))
        # Only a response.failed may follow an error event; everything else is late.
        if self.done and not (self.status == "error" and etype == FAILED):
            self._fail(
                etype, seq, f"no event after the terminal event (status {self.status})", etype
            )
        if seq is not None:
            self._last_seq = seq
        if not self.first_event_ns:
            self.first_event_ns = t_ns

        if etype in DELTA_TYPES:
            self._on_delta(etype, seq, event, t_ns)
        elif etype == CREATED:
            if self._created:
                self._fail(etype, seq, "a single response.created per response", "a second one")
            self._check_response(etype, seq, event)
            self._created = True
            self.status = "in_progress"
        elif etype == ERROR:
            self._on_error(event, t_ns)
        elif not self._created and not (etype == FAILED and self.status == "error"):
            if etype in _KNOWN or etype == FAILED:
                self._fail(etype, seq, "response.created as the first event", etype)
            # unknown types before response.created (e.g. keepalives) are ignored
        elif etype == OUTPUT_ITEM_ADDED:
            self._on_item_added(etype, seq, event, t_ns)
        elif etype == OUTPUT_ITEM_DONE:
            self._on_item_done(etype, seq, event, t_ns)
        elif etype == FUNCTION_NAME_TOKEN:
            # A Chat Completions tool call's name (harness/client/chat_api.py): output, no text,
            # so it stamps the first output without adding a delta, an ITL sample or a burst.
            self._open_item(etype, seq, event)
            self._name_token(t_ns)
        elif etype == SUMMARY_DELTA:
            self._open_item(etype, seq, event)
            self.delta_events += 1
            self._reasoning_token(t_ns)
        elif etype == CONTENT_PART_ADDED:
            index = self._open_item(etype, seq, event)
            cidx = _int_field(self, etype, seq, event, "content_index")
            if (index, cidx) in self._parts:
                self._fail(
                    etype, seq, f"content_index {cidx} added once", "a second content_part.added"
                )
            self._parts.add((index, cidx))
        elif etype in _PART_EVENTS:
            self._check_part(etype, seq, event)
        elif etype in _ITEM_EVENTS:
            self._open_item(etype, seq, event)
        elif etype in (IN_PROGRESS, QUEUED):
            self._check_response(etype, seq, event)
        elif etype in _TERMINAL_STATUS or etype == DONE:
            self._on_terminal(etype, seq, event, t_ns)
        # anything else: unknown, ignored

    # -- handlers ----------------------------------------------------------------------------

    def _on_delta(self, etype: str, seq: int | None, event: dict[str, Any], t_ns: int) -> None:
        if not self._created:
            self._fail(etype, seq, "response.created as the first event", etype)
        if etype == TEXT_DELTA:
            self._check_part(etype, seq, event)
            self._hot = (event["output_index"], event["content_index"], event.get("item_id"))
        else:
            self._open_item(etype, seq, event)
        delta = event.get("delta")
        self.delta_events += 1
        if etype not in VISIBLE_DELTA_TYPES:
            n = len(delta) if isinstance(delta, str) else 0
            self._reasoning_token(t_ns)
            if etype == REASONING_TEXT_DELTA:
                self._reasoning_chars += n
                if self._reasoning_text is not None and n:
                    self._reasoning_text.append(str(delta))
            return
        self._visible_delta(delta, t_ns)

    def _visible_delta(self, delta: object, t_ns: int) -> None:
        """A delta of the visible output (already counted in ``delta_events``) arrived."""
        n = len(delta) if isinstance(delta, str) else 0
        if self._delta_t:
            self.itl_ns.append(t_ns - self._delta_t[-1])
        self._arrived(t_ns)
        self._delta_t.append(t_ns)
        self._delta_len.append(n)
        self._text_chars += n
        if self._text is not None and n:
            self._text.append(str(delta))

    def _arrived(self, t_ns: int) -> None:
        """Visible output arrived at ``t_ns`` (a delta, or a tool call's name)."""
        rec = self.rec
        if not rec.first_output_ns:
            rec.first_output_ns = t_ns
            if not rec.first_token_ns:
                rec.first_token_ns = t_ns
        rec.last_token_ns = t_ns

    def _reasoning_token(self, t_ns: int) -> None:
        """A reasoning token arrived: it may be the response's first token, never its first
        visible one."""
        if not self.first_token_ns:
            self.first_token_ns = t_ns
        if not self.first_output_ns:
            self.last_token_ns = t_ns

    def _name_token(self, t_ns: int) -> None:
        """A Chat Completions tool call's name arrived: visible output without text, so it may
        be the first output but is no delta (no ITL sample, no burst weight)."""
        self._arrived(t_ns)
        self._name_t.append(t_ns)

    def _on_item_added(self, etype: str, seq: int | None, event: dict[str, Any], t_ns: int) -> None:
        index = _int_field(self, etype, seq, event, "output_index")
        if index in self._added:
            self._fail(etype, seq, f"output_index {index} added once", "a second output_item.added")
        item = self._added[index] = self._item(etype, seq, event)
        if item.get("type") == "reasoning":
            # sent when the first reasoning token exists (the reasoning contract)
            self._reasoning_token(t_ns)

    def _on_item_done(self, etype: str, seq: int | None, event: dict[str, Any], t_ns: int) -> None:
        index = self._open_item(etype, seq, event)
        item = self._item(etype, seq, event)
        self._item_done.add(index)
        self._hot = None
        self._items[index] = item
        if item.get("type") == "reasoning":
            # sent when the last reasoning token is decoded
            self._reasoning_token(t_ns)

    def _item(self, etype: str, seq: int | None, event: dict[str, Any]) -> dict[str, Any]:
        item = event.get("item")
        if not isinstance(item, dict):
            self._fail(etype, seq, "an 'item' object", _preview(item))
        return item

    def _on_error(self, event: dict[str, Any], t_ns: int) -> None:
        nested = event.get("error")
        src = nested if isinstance(nested, dict) else event
        code = src.get("code")
        message = src.get("message")
        self.error_code = str(code) if code is not None else None
        self.error_message = str(message) if message is not None else ""
        self._end("error", t_ns)

    def _on_terminal(self, etype: str, seq: int | None, event: dict[str, Any], t_ns: int) -> None:
        resp = self._check_response(etype, seq, event)
        if etype == DONE:
            rstatus = resp.get("status")
            status = "paused" if rstatus == "in_progress" else str(rstatus or "completed")
        else:
            status = _TERMINAL_STATUS[etype]
        if status != "paused":
            # Items may be reported only in the final output (docs/protocol.md §1.3).
            output = resp.get("output")
            if isinstance(output, list):
                for i, item in enumerate(output):
                    if i not in self._item_done and isinstance(item, dict):
                        self._item_done.add(i)
                        self._hot = None
                        self._items[i] = item
        if status in ("completed", "paused"):
            missing = sorted(set(self._added) - self._item_done)
            if missing:
                self._fail(
                    etype,
                    seq,
                    f"output_item.done for every added item first (output_index {missing} open)",
                    etype,
                )
        self.response = resp
        u = resp.get("usage")
        if isinstance(u, dict):
            self.usage = u
            out = u.get("output_tokens")
            if isinstance(out, int):
                self._output_tokens = max(0, out - self._tokens_before)
            details = u.get("output_tokens_details")
            reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
            if isinstance(reasoning, int) and reasoning > 0:
                self._reasoning_tokens = max(0, reasoning - self._reasoning_before)
        st = resp.get("sim_timing")
        if isinstance(st, dict):
            self.sim_timing = st
        err = resp.get("error")
        if isinstance(err, dict) and self.error_code is None:
            code = err.get("code")
            self.error_code = str(code) if code is not None else None
            self.error_message = str(err.get("message", ""))
        self._end(status, t_ns)

    def _end(self, status: str, t_ns: int) -> None:
        self.status = status
        self.done = True
        self.done_ns = t_ns
        self.burst_tokens_max = self._burst()
        # Counted once at the end, off the per-delta path: deltas read together share a stamp.
        self.output_arrivals = len({*self._delta_t, *self._name_t})
        self.first_arrival_tokens = self._first_arrival_tokens()
        first = self.rec.first_output_ns
        together = 0
        # Visible output is a delta or a tool call's name (as in output_arrivals); each list
        # is in arrival order, so what shares the first stamp leads it.
        for stamps in (self._delta_t, self._name_t):
            for t in stamps:
                if t != first:
                    break
                together += 1
        self.first_arrival_deltas = together

    # -- checks ------------------------------------------------------------------------------

    def _check_response(self, etype: str, seq: int | None, event: dict[str, Any]) -> dict[str, Any]:
        resp = event.get("response")
        if not isinstance(resp, dict):
            self._fail(etype, seq, "a 'response' object", _preview(resp))
        rid = resp.get("id")
        if not isinstance(rid, str):
            self._fail(etype, seq, "a string response.id", repr(rid))
        if self.response_id is None:
            self.response_id = rid
        elif rid != self.response_id:
            self._fail(etype, seq, f"response.id {self.response_id!r}", repr(rid))
        return resp

    def _open_item(self, etype: str, seq: int | None, event: dict[str, Any]) -> int:
        index = _int_field(self, etype, seq, event, "output_index")
        item = self._added.get(index)
        if item is None:
            self._fail(
                etype, seq, f"response.output_item.added for output_index {index} first", etype
            )
        if index in self._item_done:
            self._fail(
                etype,
                seq,
                f"output_index {index} still open",
                "an event after its output_item.done",
            )
        item_id = event.get("item_id")
        if item_id is not None and "id" in item and item_id != item["id"]:
            self._fail(
                etype, seq, f"item_id {item['id']!r} for output_index {index}", repr(item_id)
            )
        return index

    def _check_part(self, etype: str, seq: int | None, event: dict[str, Any]) -> None:
        index = self._open_item(etype, seq, event)
        cidx = _int_field(self, etype, seq, event, "content_index")
        if (index, cidx) not in self._parts:
            self._fail(
                etype,
                seq,
                f"response.content_part.added for output_index {index} content_index {cidx} first",
                etype,
            )

    def _fail(self, etype: str, seq: object, expected: str, got: str) -> NoReturn:
        where = (
            f"sequence_number {seq}"
            if seq is not None
            else f"after sequence_number {self._last_seq}"
        )
        rid = f" (response {self.response_id})" if self.response_id else ""
        raise StreamOrderError(f"{etype} at {where}{rid}: expected {expected}, got {got}")

    # -- metrics -----------------------------------------------------------------------------

    def _segment_tokens(self) -> int:
        return self._counted(self._text, self._text_chars)

    def _streamed_reasoning_tokens(self) -> int:
        return self._counted(self._reasoning_text, self._reasoning_chars)

    def _counted(self, text: list[str] | None, chars: int) -> int:
        if text is not None:
            return self.tokens.count("".join(text))
        return count_tokens("x" * chars) if chars else 0

    def _first_arrival_tokens(self) -> int:
        """The visible tokens of the first non-empty delta read with the first visible output
        (0: the output began with a tool call's name alone).  One delta, not the whole read: an
        engine releasing a held call sends one delta of many tokens, while a client that read
        several paced deltas late has them in one read — its lateness, not a release."""
        first = self.rec.first_output_ns
        for i, (t, n) in enumerate(zip(self._delta_t, self._delta_len, strict=True)):
            if t != first:
                break
            if n:
                if self._text is None:
                    return self._counted(None, n)
                # _text holds the deltas that had text, in order: this is the i-th of them
                return self._counted([self._text[sum(1 for x in self._delta_len[:i] if x)]], 0)
        return 0

    def _burst(self) -> int:
        """Highest token count in any window [t_i, t_i + W) starting at a delta (docs/metrics.md §1).

        Each visible delta weighs ``visible_tokens * len / total_len``; the maximum of the
        weighted sums equals ``visible_tokens / total_len`` times the maximum length
        sum, so the scan works on integer lengths and rounds (half up) once at the end.
        """
        n = len(self._delta_t)
        if n == 0:
            return 0
        total_tokens = self.visible_tokens
        lengths = self._delta_len if self._text_chars else [1] * n
        total = sum(lengths)
        window = self.burst_window_ns
        times = self._delta_t
        best = acc = lo = 0
        for hi in range(n):
            acc += lengths[hi]
            while times[hi] - times[lo] >= window:
                acc -= lengths[lo]
                lo += 1
            best = max(best, acc)
        return (best * total_tokens * 2 + total) // (2 * total)

    def fill(self, rec: TurnRecord | None = None) -> TurnRecord:
        """Write what the end of the stream tells into ``rec``: status, ids, token counts and
        ``sim_*`` (the stamps, delta count and gaps are already there, :attr:`rec`).

        A paused segment (append prototype) is a successful turn and is recorded as
        ``completed``; a stream that never reached a terminal event as ``error``.
        """
        if rec is None:
            rec = self.rec
        elif rec is not self.rec:
            raise ValueError("fill(): expected the record this stream writes its stamps into")
        status = self.status
        if status == "paused":
            status = "completed"
        elif not self.done:
            status = "error"
            if not self.error_message:
                rec.error_message = "stream ended before a terminal event"
        rec.status = status
        if status in ("failed", "error"):
            rec.error_kind = self.error_code or rec.error_kind or "stream"
            if self.error_message:
                rec.error_message = self.error_message
        rec.response_id = self.response_id or ""
        # The first token's read decides; a response without one, any of its reads.
        if self.first_token_user_ns:
            rec.rx_stamp = "kernel"
            rec.rx_user_minus_kernel_us = (self.first_token_user_ns - self.first_token_ns) / 1e3
        elif self.rx_kernel and not self.first_token_ns:
            rec.rx_stamp = "kernel"
        rec.function_calls = len(self.function_calls)
        u = self.usage or {}
        rec.input_tokens = _int(u.get("input_tokens"))
        details = u.get("input_tokens_details")
        rec.cached_tokens = _int(details.get("cached_tokens")) if isinstance(details, dict) else 0
        rec.output_tokens = self.output_tokens
        rec.reasoning_tokens = self.reasoning_tokens
        rec.streamed_tokens = self._segment_tokens()
        rec.burst_tokens_max = self.burst_tokens_max
        st = self.sim_timing or {}
        for key, attr in (*SIM_FIELDS, ("first_token_late_ms", "server_late_ms")):
            value = st.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                setattr(rec, attr, float(value))
        cache = st.get("cache")
        if isinstance(cache, str):
            rec.sim_cache = cache
        # Only on one host do the monotonic clocks agree (a remote server's counts from its own
        # boot, so its arrival cannot fall between our send and first token); the gevent edge
        # stamps on the Unix epoch, hence the second field.
        for key in ("arrived_clock_ns", "arrived_unix_ns"):
            arrived = st.get(key)
            if (
                isinstance(arrived, int)
                and not isinstance(arrived, bool)
                and self.first_token_ns
                and self.sent_ns <= arrived <= self.first_token_ns
            ):
                rec.server_read_ms = (arrived - self.sent_ns) / 1e6
                break
        return rec


_KNOWN = (
    frozenset({IN_PROGRESS, QUEUED, OUTPUT_ITEM_ADDED, OUTPUT_ITEM_DONE, CONTENT_PART_ADDED})
    | {COMPLETED, INCOMPLETE, DONE, SUMMARY_DELTA, FUNCTION_NAME_TOKEN}
    | _PART_EVENTS
    | _ITEM_EVENTS
)


def _int_field(
    s: ResponseStream, etype: str, seq: int | None, event: dict[str, Any], key: str
) -> int:
    value = event.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        s._fail(etype, seq, f"an integer {key}", repr(value))
    return value


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _preview(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"
