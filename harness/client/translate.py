"""Another API's stream as Responses events, so one state machine measures every transport.

Chat Completions chunks (:mod:`harness.client.chat_api`) and Anthropic Messages events
(:mod:`harness.client.messages_api`) are translated, sans I/O, into the Responses events
:class:`~harness.client.stream.ResponseStream` consumes: one ``response.created``, an
``output_item.added`` / ``output_item.done`` pair per output item (a message, a function
call, a reasoning item) with the deltas in between, then a terminal event carrying the usage
and the server's ``sim_timing``.  TTFT, TTFOT, ITL, bursts, usage and the honesty checks are
then computed by the same code for all three APIs (docs/protocol.md §7).

Why a translator rather than a second state machine: the metrics are defined once
(docs/metrics.md §1) and the Responses state machine already checks ordering and handles
reasoning; a sibling would duplicate every timing rule and drift.  The translation costs a
few small dicts per event, which is what decoding a Responses event costs anyway.

:class:`TranslatedFeed` is :class:`~harness.client.receive.SseFeed`'s sibling: SSE body bytes
in, translated events into the stream, each stamped with the time its chunk arrived.
"""

from __future__ import annotations

from typing import Any, Protocol

from harness.client.receive import SseFeed
from harness.client.stream import FUNCTION_NAME_TOKEN, ResponseStream
from harness.wire.events import (
    ARGUMENTS_DELTA,
    COMPLETED,
    CONTENT_PART_ADDED,
    CONTENT_PART_DONE,
    CREATED,
    ERROR,
    INCOMPLETE,
    OUTPUT_ITEM_ADDED,
    OUTPUT_ITEM_DONE,
    REASONING_TEXT_DELTA,
    TEXT_DELTA,
)
from harness.wire.sse import SSEMessage

Event = dict[str, Any]


class Translator(Protocol):
    """One API's stream, one SSE message at a time, as Responses events."""

    def feed(self, msg: SSEMessage) -> list[Event]: ...

    @property
    def ended(self) -> bool:
        """The stream's own end marker arrived (``[DONE]``, ``message_stop``, an error)."""
        ...


class ResponsesEmitter:
    """The Responses events of one response, built from another API's pieces in arrival order.

    Items are keyed by the source API's index (a chat tool call's ``index``, a Messages
    content block's ``index``; the chat text and reasoning use their own keys) and get
    ``output_index`` values in the order they open.
    """

    __slots__ = (
        "_chunks",
        "_items",
        "_open",
        "_output",
        "model",
        "reasoning_chars",
        "response_id",
        "sim_timing",
        "visible_chars",
    )

    def __init__(self) -> None:
        self.response_id = ""
        self._output: list[Event] = []  # finished items, in output_index order once sorted
        self._items: dict[object, tuple[int, Event]] = {}  # open items by key
        self._chunks: dict[object, list[str]] = {}  # their streamed text
        self._open: list[object] = []
        #: streamed characters of the visible output (text, arguments) and of reasoning text
        self.visible_chars = 0
        self.reasoning_chars = 0
        #: the source's model name and the reference server's ``sim_timing``, for the terminal
        self.model: object = None
        self.sim_timing: object = None

    @property
    def started(self) -> bool:
        return bool(self.response_id)

    def created(self, response_id: str, model: object = None) -> list[Event]:
        self.response_id = response_id
        self.model = model
        return [{"type": CREATED, "response": self._response("in_progress")}]

    def is_open(self, key: object) -> bool:
        return key in self._items

    def _add(self, key: object, item: Event) -> list[Event]:
        index = len(self._output) + len(self._items)
        self._items[key] = (index, item)
        self._chunks[key] = []
        self._open.append(key)
        return [{"type": OUTPUT_ITEM_ADDED, "output_index": index, "item": dict(item)}]

    def open_message(self, key: object) -> list[Event]:
        item = {"type": "message", "role": "assistant", "status": "in_progress", "content": []}
        index = len(self._output) + len(self._items)
        part = {"type": "output_text", "text": "", "annotations": []}
        return [
            *self._add(key, item),
            {"type": CONTENT_PART_ADDED, "output_index": index, "content_index": 0, "part": part},
        ]

    def open_call(self, key: object, call_id: str, name: str) -> list[Event]:
        item = {
            "type": "function_call",
            "status": "in_progress",
            "call_id": call_id,
            "name": name,
            "arguments": "",
        }
        return self._add(key, item)

    def open_reasoning(self, key: object) -> list[Event]:
        return self._add(key, {"type": "reasoning", "summary": [], "content": []})

    def name_token(self, key: object) -> list[Event]:
        return [{"type": FUNCTION_NAME_TOKEN, "output_index": self._items[key][0]}]

    def delta(self, key: object, text: str) -> list[Event]:
        """Text, arguments or reasoning text of the open item ``key`` (empty text: nothing)."""
        if not text:
            return []
        index, item = self._items[key]
        self._chunks[key].append(text)
        kind = item["type"]
        if kind == "reasoning":
            self.reasoning_chars += len(text)
        else:
            self.visible_chars += len(text)
        if kind == "message":
            return [{"type": TEXT_DELTA, "output_index": index, "content_index": 0, "delta": text}]
        etype = ARGUMENTS_DELTA if kind == "function_call" else REASONING_TEXT_DELTA
        return [{"type": etype, "output_index": index, "delta": text}]

    def set_field(self, key: object, name: str, value: object) -> None:
        """A field of the open item that is not streamed text (a thinking block's signature)."""
        self._items[key][1][name] = value

    def close(self, key: object) -> list[Event]:
        if key not in self._items:
            return []
        index, item = self._items.pop(key)
        self._open.remove(key)
        text = "".join(self._chunks.pop(key))
        done = {**item, "status": "completed"}
        kind = item["type"]
        events: list[Event] = []
        if kind == "message":
            part = {"type": "output_text", "text": text, "annotations": []}
            done["content"] = [part]
            events.append(
                {"type": CONTENT_PART_DONE, "output_index": index, "content_index": 0, "part": part}
            )
        elif kind == "function_call":
            done["arguments"] = text
        else:
            done["content"] = [{"type": "reasoning_text", "text": text}] if text else []
        self._output.append(done)
        events.append({"type": OUTPUT_ITEM_DONE, "output_index": index, "item": done})
        return events

    def close_all(self) -> list[Event]:
        events: list[Event] = []
        for key in list(self._open):
            events.extend(self.close(key))
        return events

    def terminal(self, incomplete: bool, usage: Event | None) -> list[Event]:
        """Close what is open, then ``response.completed`` (or ``.incomplete``)."""
        events = self.close_all()
        status = "incomplete" if incomplete else "completed"
        resp = self._response(status)
        resp["output"] = list(self._output)
        if usage is not None:
            resp["usage"] = usage
        if isinstance(self.sim_timing, dict):
            resp["sim_timing"] = self.sim_timing
        events.append({"type": INCOMPLETE if incomplete else COMPLETED, "response": resp})
        return events

    @staticmethod
    def error(code: object, message: object) -> list[Event]:
        return [
            {
                "type": ERROR,
                "code": str(code) if code else None,
                "message": str(message) if message is not None else "",
            }
        ]

    def _response(self, status: str) -> Event:
        resp: Event = {"id": self.response_id, "object": "response", "status": status}
        if isinstance(self.model, str):
            resp["model"] = self.model
        return resp


def responses_usage(
    input_tokens: int, cached: int, output: int, reasoning: int | None, cache_write: int = 0
) -> Event:
    """Another API's usage in the Responses shape :meth:`ResponseStream.fill` reads."""
    usage: Event = {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": cache_write},
        "output_tokens": output,
        "total_tokens": input_tokens + output,
    }
    if reasoning is not None:
        usage["output_tokens_details"] = {"reasoning_tokens": reasoning}
    return usage


def int_field(doc: object, key: str) -> int:
    """``doc[key]`` when it is a non-negative integer, else 0 (usage fields a server left out)."""
    value = doc.get(key) if isinstance(doc, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


class TranslatedFeed(SseFeed):
    """SSE body bytes in, the translator's Responses events into ``stream``."""

    __slots__ = ("translator",)

    def __init__(self, stream: ResponseStream, translator: Translator) -> None:
        super().__init__(stream)
        self.translator = translator

    def feed(self, chunk: bytes, t_ns: int, user_ns: int = 0) -> int:
        """Feed one chunk; returns how many SSE messages it completed (the idle timeout's count).
        ``user_ns`` as for :meth:`SseFeed.feed`."""
        stream = self.stream
        translate = self.translator.feed
        msgs = self.decoder.feed(chunk)
        waiting = user_ns and not stream.rec.first_token_ns
        for msg in msgs:
            for event in translate(msg):
                stream.feed(event, t_ns)
        if user_ns:
            stream.rx_kernel = True
            if waiting and stream.rec.first_token_ns:
                stream.first_token_user_ns = user_ns
        return len(msgs)
