"""Responses stream events: their shapes, a builder, and the JSON codec.

Both sides of loopbench use this module: the reference server builds its events
with :class:`ResponseBuilder`, and the harness decodes what it receives with
:func:`loads`.  Keeping one model guarantees that what the server emits is what
the client state machine (:mod:`harness.client.stream`) accepts, and the tests
check the builder's output against the official ``openai`` SDK types.

Shapes follow docs/protocol.md §1.2-§1.3 (HTTP/SSE), §2.3 (WebSocket ``error`` and lane
echo) and §5 (the ``response.done`` pause of the append prototype).

The builder is pure: it reads no clock and no global random generator.  Times
(``created_at``, ``completed_at``) and ids are passed in; :func:`new_id` draws
from an injected :class:`random.Random`.
"""

from __future__ import annotations

import random
from typing import Any

import orjson

from harness.wire.errors import ProtocolError

# --- event type names -------------------------------------------------------------------------

CREATED = "response.created"
IN_PROGRESS = "response.in_progress"
QUEUED = "response.queued"
COMPLETED = "response.completed"
INCOMPLETE = "response.incomplete"
FAILED = "response.failed"
OUTPUT_ITEM_ADDED = "response.output_item.added"
OUTPUT_ITEM_DONE = "response.output_item.done"
CONTENT_PART_ADDED = "response.content_part.added"
CONTENT_PART_DONE = "response.content_part.done"
TEXT_DELTA = "response.output_text.delta"
TEXT_DONE = "response.output_text.done"
ARGUMENTS_DELTA = "response.function_call_arguments.delta"
ARGUMENTS_DONE = "response.function_call_arguments.done"
REASONING_TEXT_DELTA = "response.reasoning_text.delta"
REASONING_SUMMARY_PART_ADDED = "response.reasoning_summary_part.added"
REASONING_SUMMARY_TEXT_DELTA = "response.reasoning_summary_text.delta"
REASONING_SUMMARY_TEXT_DONE = "response.reasoning_summary_text.done"
REASONING_SUMMARY_PART_DONE = "response.reasoning_summary_part.done"
REFUSAL_DELTA = "response.refusal.delta"
ERROR = "error"
# loopbench append prototype (docs/protocol.md §5): the response pauses with status "in_progress".
DONE = "response.done"

TERMINAL_TYPES = frozenset({COMPLETED, INCOMPLETE, FAILED})
# Every event that carries generated output; each one is a "token arrival" for TTFT/ITL.
DELTA_TYPES = frozenset({TEXT_DELTA, ARGUMENTS_DELTA, REASONING_TEXT_DELTA, REFUSAL_DELTA})

# `response.error.code` is a closed Literal in the SDK (types/responses/response_error.py);
# anything else would make a strict client reject the whole response.
RESPONSE_ERROR_CODES = frozenset(
    {
        "server_error",
        "rate_limit_exceeded",
        "invalid_prompt",
        "data_residency_mismatch",
        "bio_policy",
        "misalignment_policy_violation",
        "vector_store_timeout",
        "invalid_image",
        "invalid_image_format",
        "invalid_base64_image",
        "invalid_image_url",
        "image_too_large",
        "image_too_small",
        "image_parse_error",
        "image_content_policy_violation",
        "invalid_image_mode",
        "image_file_too_large",
        "unsupported_image_media_type",
        "empty_image_file",
        "failed_to_download_image",
        "image_file_not_found",
    }
)

# --- JSON codec -------------------------------------------------------------------------------


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON (orjson); never contains a raw newline, so it fits one SSE ``data:`` line."""
    return orjson.dumps(obj)


def loads(
    data: bytes | bytearray | memoryview | str, *, strict_utf8: bool = False
) -> dict[str, Any]:
    """Parse one JSON object; raise :class:`ProtocolError` on invalid JSON or a non-object.

    ``strict_utf8``: invalid UTF-8 is invalid JSON (a WebSocket text message must be UTF-8,
    and its edge closes with 1007); otherwise it is replaced, as an SSE stream's text is.
    """
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if not strict_utf8 and not isinstance(data, str):
            # Invalid UTF-8 in a string is replaced, not fatal (as in the SSE decoder's text):
            # decoded on this rare path only, so valid bytes are parsed without a copy.
            return loads(bytes(data).decode("utf-8", "replace"))
        raise ProtocolError(f"invalid JSON: {exc}; got {_preview(data)}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"expected a JSON object, got {type(obj).__name__}: {_preview(data)}")
    return obj


def _preview(data: bytes | bytearray | memoryview | str, limit: int = 80) -> str:
    text = data if isinstance(data, str) else bytes(data).decode("utf-8", "replace")
    return repr(text if len(text) <= limit else text[:limit] + "…")


# --- ids, usage, error bodies -----------------------------------------------------------------


def new_id(prefix: str, rng: random.Random) -> str:
    """``<prefix>_<32 hex digits>`` drawn from ``rng`` (e.g. ``resp_…``, ``msg_…``, ``fc_…``, ``call_…``)."""
    return f"{prefix}_{rng.getrandbits(128):032x}"


def usage(
    input_tokens: int,
    cached_tokens: int,
    output_tokens: int,
    *,
    cache_write_tokens: int = 0,
    reasoning_tokens: int = 0,
) -> dict[str, Any]:
    """A ``usage`` object with every field the SDK requires (docs/protocol.md §1.2)."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {
            "cached_tokens": cached_tokens,
            "cache_write_tokens": cache_write_tokens,
        },
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": input_tokens + output_tokens,
    }


def error_type_for_status(status: int) -> str:
    """The OpenAI error ``type`` conventionally paired with an HTTP status."""
    if status == 429:
        return "requests"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def error_body(
    status: int, code: str | None, message: str, param: str | None = None, type_: str | None = None
) -> dict[str, Any]:
    """HTTP error body ``{"error": {message, type, param, code}}`` (docs/protocol.md §1.5).

    ``type_`` defaults to :func:`error_type_for_status`; ``status`` itself is sent by
    the caller as the HTTP status line.
    """
    return {
        "error": {
            "message": message,
            "type": type_ or error_type_for_status(status),
            "param": param,
            "code": code,
        }
    }


def ws_error_event(
    status: int,
    code: str | None,
    message: str,
    param: str | None = None,
    stream_id: str | None = None,
    sequence_number: int | None = None,
    type_: str | None = None,
) -> dict[str, Any]:
    """WebSocket ``error`` event (docs/protocol.md §2.3).

    ``sequence_number`` only for errors inside a response's stream; ``stream_id``
    only when the error belongs to a named lane.  Absent keys are omitted, not null,
    because that is how the lane echo is specified.
    """
    ev: dict[str, Any] = {"type": ERROR, "status": status}
    if sequence_number is not None:
        ev["sequence_number"] = sequence_number
    if stream_id is not None:
        ev["stream_id"] = stream_id
    ev["error"] = error_body(status, code, message, param, type_)["error"]
    return ev


# --- the builder ------------------------------------------------------------------------------

# Request fields echoed into the response object, with the value used when the request omits them.
_ECHO_DEFAULTS: tuple[tuple[str, Any], ...] = (
    ("background", False),
    ("instructions", None),
    ("max_output_tokens", None),
    ("max_tool_calls", None),
    ("parallel_tool_calls", True),
    ("previous_response_id", None),
    ("reasoning", {"effort": None, "summary": None}),
    ("service_tier", "default"),
    ("store", True),
    ("temperature", 1.0),
    ("text", {"format": {"type": "text"}}),
    ("tool_choice", "auto"),
    ("tools", []),
    ("top_p", 1.0),
    ("truncation", "disabled"),
    ("user", None),
    ("metadata", {}),
)


class ResponseBuilder:
    """Build the events of one response in exactly the docs/protocol.md §1.3 order.

    Usage (a text answer)::

        b = ResponseBuilder("resp_1", model="sim", created_at=1700000000, request=body)
        events = b.start()                      # response.created, response.in_progress
        events += b.begin_message()             # output_item.added, content_part.added
        events.append(b.text_delta(" the"))     # response.output_text.delta
        events += b.end_message()               # output_text.done, content_part.done, output_item.done
        events.append(b.complete(usage(20, 0, 1)))

    Function calls use :meth:`begin_function_call` / :meth:`arguments_delta` /
    :meth:`end_function_call`; items are sequential (one open at a time) and get
    ``output_index`` 0, 1, 2… across the whole response.  ``sequence_number`` starts
    at 0 and grows by one per event, also across :meth:`pause` (the append prototype
    resumes the same response by simply calling more methods).  With ``stream_id``
    every event carries it (WebSocket lane echo).

    The terminal methods (:meth:`complete`, :meth:`incomplete`, :meth:`fail`) fix the
    final state; afterwards :meth:`response_object` returns the non-streaming body.
    Misuse (a delta with no open item, two terminals) raises :class:`ValueError`:
    that is a bug in the caller, not a protocol error from a peer.
    """

    def __init__(
        self,
        response_id: str,
        *,
        model: str | None = None,
        created_at: int,
        request: dict[str, Any] | None = None,
        stream_id: str | None = None,
    ) -> None:
        req = request or {}
        self.response_id = response_id
        self.model: str = model if model is not None else str(req.get("model", ""))
        self.created_at = created_at
        self.stream_id = stream_id
        self._echo: dict[str, Any] = {}
        for key, default in _ECHO_DEFAULTS:
            value = req.get(key)
            self._echo[key] = default if value is None else value
        self._seq = 0
        self._output: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None
        self._open_index = -1
        self._open_text: list[str] = []
        self._keep_text = True
        self._status = "in_progress"
        self._usage: dict[str, Any] | None = None
        self._completed_at: int | None = None
        self._error: dict[str, Any] | None = None
        self._incomplete: dict[str, Any] | None = None
        self._extra: dict[str, Any] = {}
        self._ended = False

    # -- state ------------------------------------------------------------------------------

    @property
    def open_item_id(self) -> str | None:
        """The id of the item now open, if any."""
        return None if self._open is None else str(self._open["id"])

    @property
    def output(self) -> list[dict[str, Any]]:
        """The completed output items so far (the response's ``output``)."""
        return self._output

    def _event(self, type_: str, **fields: Any) -> dict[str, Any]:
        ev: dict[str, Any] = {"type": type_, "sequence_number": self._seq}
        ev.update(fields)
        if self.stream_id is not None:
            ev["stream_id"] = self.stream_id
        self._seq += 1
        return ev

    def _require_open(self, kind: str, method: str) -> dict[str, Any]:
        if self._open is None or self._open["type"] != kind:
            raise ValueError(f"ResponseBuilder.{method}(): no open {kind} item")
        return self._open

    def _item_event(self, type_: str, **fields: Any) -> dict[str, Any]:
        """An event of the open item: its ``item_id`` and ``output_index``, then ``fields``."""
        assert self._open is not None
        return self._event(type_, item_id=self._open["id"], output_index=self._open_index, **fields)

    def _require_idle(self, method: str) -> None:
        if self._ended:
            raise ValueError(f"ResponseBuilder.{method}(): response already ended ({self._status})")
        if self._open is not None:
            raise ValueError(
                f"ResponseBuilder.{method}(): output item {self._open_index} is still open"
            )

    # -- response object ---------------------------------------------------------------------

    def response_object(
        self, status: str | None = None, *, extra: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The full response object (every field of docs/protocol.md §1.2).

        ``status`` defaults to the builder's current status (``in_progress`` until a
        terminal method ran).  ``output`` holds the items completed so far; ``extra``
        (e.g. ``{"sim_timing": {...}}``) is merged at top level, after any ``extra``
        given to the terminal method.
        """
        st = self._status if status is None else status
        obj: dict[str, Any] = {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created_at,
            "status": st,
            "completed_at": self._completed_at if st == "completed" else None,
            "error": self._error,
            "incomplete_details": self._incomplete,
            "model": self.model,
            "output": list(self._output),
        }
        obj.update(self._echo)
        obj["usage"] = self._usage
        if self._extra:
            obj.update(self._extra)
        if extra:
            obj.update(extra)
        return obj

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> list[dict[str, Any]]:
        """``response.created`` and ``response.in_progress`` (status in_progress, no output/usage)."""
        if self._seq != 0:
            raise ValueError("ResponseBuilder.start(): already started")
        snapshot = self.response_object("in_progress")
        return [
            self._event(CREATED, response=snapshot),
            self._event(IN_PROGRESS, response=dict(snapshot)),
        ]

    def begin_message(
        self, item_id: str | None = None, *, keep_text: bool = True
    ) -> list[dict[str, Any]]:
        """``output_item.added`` + ``content_part.added`` for a new assistant message.

        ``keep_text=False``: the deltas are not kept, and :meth:`end_message` must be
        given the whole text (a caller that can regenerate it saves holding it twice).
        """
        self._require_idle("begin_message")
        self._keep_text = keep_text
        item_id = item_id or self._item_id("msg", len(self._output))
        added = self._begin(
            {
                "id": item_id,
                "type": "message",
                "status": "in_progress",
                "content": [],
                "role": "assistant",
            }
        )
        return [*added, self._item_event(CONTENT_PART_ADDED, content_index=0, part=_text_part(""))]

    def text_delta(self, text: str) -> dict[str, Any]:
        """One ``response.output_text.delta`` of the open message."""
        self._require_open("message", "text_delta")
        if self._keep_text:
            self._open_text.append(text)
        return self._item_event(TEXT_DELTA, content_index=0, delta=text, logprobs=[])

    def end_message(
        self, status: str = "completed", text: str | None = None
    ) -> list[dict[str, Any]]:
        """``output_text.done``, ``content_part.done``, ``output_item.done``.

        ``status="incomplete"`` marks a message cut short (``max_output_tokens``).
        ``text`` is the message's whole text when the deltas were not kept.
        """
        item = self._require_open("message", "end_message")
        text = self._whole("end_message", "text", text)
        done_item = dict(item, status=status, content=[_text_part(text)])
        events = [
            self._item_event(TEXT_DONE, content_index=0, text=text, logprobs=[]),
            self._item_event(CONTENT_PART_DONE, content_index=0, part=_text_part(text)),
            self._event(OUTPUT_ITEM_DONE, output_index=self._open_index, item=done_item),
        ]
        self._close_item(done_item)
        return events

    def begin_function_call(
        self, name: str, call_id: str, item_id: str | None = None, *, keep_text: bool = True
    ) -> list[dict[str, Any]]:
        """``output_item.added`` for a new ``function_call`` item (arguments empty).

        ``keep_text=False`` as for :meth:`begin_message`: :meth:`end_function_call`
        is then given the whole arguments.
        """
        self._require_idle("begin_function_call")
        self._keep_text = keep_text
        index = len(self._output)
        return self._begin(
            {
                "id": item_id or self._item_id("fc", index),
                "type": "function_call",
                "status": "in_progress",
                "arguments": "",
                "call_id": call_id,
                "name": name,
            }
        )

    def arguments_delta(self, text: str) -> dict[str, Any]:
        """One ``response.function_call_arguments.delta`` of the open call."""
        self._require_open("function_call", "arguments_delta")
        if self._keep_text:
            self._open_text.append(text)
        return self._item_event(ARGUMENTS_DELTA, delta=text)

    def end_function_call(self, arguments: str | None = None) -> list[dict[str, Any]]:
        """``function_call_arguments.done`` + ``output_item.done`` (status completed, full arguments)."""
        item = self._require_open("function_call", "end_function_call")
        arguments = self._whole("end_function_call", "arguments", arguments)
        done_item = dict(item, status="completed", arguments=arguments)
        events = [
            self._item_event(ARGUMENTS_DONE, arguments=arguments),
            self._event(OUTPUT_ITEM_DONE, output_index=self._open_index, item=done_item),
        ]
        self._close_item(done_item)
        return events

    def begin_reasoning(self, item_id: str | None = None) -> list[dict[str, Any]]:
        """``output_item.added`` for a new ``reasoning`` item (summary empty).

        The reasoning tokens themselves are never streamed (as on the real API);
        only an asked-for summary is, through :meth:`summary_part_added`,
        :meth:`summary_delta` and :meth:`summary_done`.
        """
        self._require_idle("begin_reasoning")
        self._keep_text = True
        item_id = item_id or self._item_id("rs", len(self._output))
        return self._begin({"id": item_id, "type": "reasoning", "summary": []})

    def summary_part_added(self) -> dict[str, Any]:
        """``response.reasoning_summary_part.added`` (summary_index 0) of the open reasoning item."""
        self._require_open("reasoning", "summary_part_added")
        return self._item_event(
            REASONING_SUMMARY_PART_ADDED, summary_index=0, part=_summary_part("")
        )

    def summary_delta(self, text: str) -> dict[str, Any]:
        """One ``response.reasoning_summary_text.delta`` of the open reasoning item."""
        self._require_open("reasoning", "summary_delta")
        self._open_text.append(text)
        return self._item_event(REASONING_SUMMARY_TEXT_DELTA, summary_index=0, delta=text)

    def summary_done(self) -> list[dict[str, Any]]:
        """``reasoning_summary_text.done`` + ``reasoning_summary_part.done`` with the whole summary."""
        item = self._require_open("reasoning", "summary_done")
        text = "".join(self._open_text)
        self._open_text = [text]
        item["summary"] = [_summary_part(text)]
        return [
            self._item_event(REASONING_SUMMARY_TEXT_DONE, summary_index=0, text=text),
            self._item_event(
                REASONING_SUMMARY_PART_DONE, summary_index=0, part=_summary_part(text)
            ),
        ]

    def end_reasoning(self, encrypted_content: str | None = None) -> list[dict[str, Any]]:
        """``output_item.done`` of the reasoning item, with ``encrypted_content`` when given."""
        item = self._require_open("reasoning", "end_reasoning")
        done_item = dict(item, summary=list(item["summary"]))
        if encrypted_content is not None:
            done_item["encrypted_content"] = encrypted_content
        events = [self._event(OUTPUT_ITEM_DONE, output_index=self._open_index, item=done_item)]
        self._close_item(done_item)
        return events

    def complete(
        self,
        usage: dict[str, Any],
        extra: dict[str, Any] | None = None,
        *,
        completed_at: int | None = None,
    ) -> dict[str, Any]:
        """``response.completed`` with full output, usage and ``completed_at``.

        ``completed_at`` (epoch seconds) defaults to ``created_at`` because the
        builder reads no clock.  ``extra`` is merged top-level into the response.
        """
        self._require_idle("complete")
        self._finish("completed", usage, extra)
        self._completed_at = self.created_at if completed_at is None else completed_at
        return self._event(COMPLETED, response=self.response_object())

    def incomplete(
        self, reason: str, usage: dict[str, Any], extra: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """``response.incomplete`` with ``incomplete_details.reason`` (e.g. ``max_output_tokens``)."""
        self._require_idle("incomplete")
        self._finish("incomplete", usage, extra)
        self._incomplete = {"reason": reason}
        return self._event(INCOMPLETE, response=self.response_object())

    def fail(
        self,
        code: str,
        message: str,
        *,
        nested: bool = True,
        usage: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """An ``error`` event then ``response.failed`` (docs/protocol.md §1.5, "after streaming has started").

        ``nested=True`` gives ``{"type":"error","error":{type,code,message,param}}``,
        ``nested=False`` the flat SDK-typed ``{"type":"error","code","message","param"}``.
        May be called with an item open (a failure mid-item): that item is dropped
        from ``output``.  ``response.error.code`` is ``code`` when the SDK's closed list
        allows it, else ``server_error``; the ``error`` event always carries ``code``.
        """
        if self._ended:
            raise ValueError(f"ResponseBuilder.fail(): response already ended ({self._status})")
        self._open = None
        if nested:
            err = self._event(
                ERROR,
                error={"type": "server_error", "code": code, "message": message, "param": None},
            )
        else:
            err = self._event(ERROR, code=code, message=message, param=None)
        self._finish("failed", usage, extra)
        self._error = {
            "code": code if code in RESPONSE_ERROR_CODES else "server_error",
            "message": message,
        }
        return [err, self._event(FAILED, response=self.response_object())]

    def pause(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Append prototype (docs/protocol.md §5): ``response.done`` with the response still ``in_progress``.

        The builder stays open: after the client's ``response.append`` the caller
        continues with more items, and sequence numbers continue.
        """
        self._require_idle("pause")
        return self._event(DONE, response=self.response_object("in_progress", extra=extra))

    # -- helpers -----------------------------------------------------------------------------

    def _finish(
        self, status: str, usage: dict[str, Any] | None, extra: dict[str, Any] | None
    ) -> None:
        self._status = status
        self._usage = usage
        self._extra = dict(extra) if extra else {}
        self._ended = True

    def _begin(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        """Open ``item`` as the next output item: its ``output_item.added``."""
        self._open = item
        self._open_index = len(self._output)
        self._open_text = []
        return [self._event(OUTPUT_ITEM_ADDED, output_index=self._open_index, item=dict(item))]

    def _whole(self, method: str, what: str, given: str | None) -> str:
        """The open item's whole text: ``given``, else the deltas kept."""
        if given is not None:
            return given
        if not self._keep_text:
            raise ValueError(f"ResponseBuilder.{method}(): {what} not kept and not given")
        return "".join(self._open_text)

    def _close_item(self, item: dict[str, Any]) -> None:
        self._output.append(item)
        self._open = None
        self._open_text = []

    def _item_id(self, prefix: str, index: int) -> str:
        # Derived from the response id so ids are unique across a conversation without an rng.
        suffix = self.response_id.split("_", 1)[-1]
        return f"{prefix}_{suffix}{index:04x}"


def _summary_part(text: str) -> dict[str, Any]:
    return {"type": "summary_text", "text": text}


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
