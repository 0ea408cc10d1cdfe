"""What the probe sends and how it reads the answers, with the run's own pieces (sans I/O).

The requests are the transports' bodies (:mod:`harness.client.bodies`, ``chat_api``,
``messages_api``) of a one-message turn; the answers are read one wire message at a time by
a run's :class:`~harness.client.stream.ResponseStream`, a Chat Completions or Messages stream
through its translator (:mod:`harness.client.translate`), so an event order a run would reject
fails the probe's check too.  What the answers mean is :mod:`harness.client.probe`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.client.api_errors import body_start, error_state, error_text
from harness.client.bodies import compact_body, http_body
from harness.client.bodies import ws_create as ws_body
from harness.client.chat_api import ChatTranslator, chat_body
from harness.client.messages_api import MessagesTranslator, messages_body
from harness.client.stream import FUNCTION_NAME_TOKEN, ResponseStream
from harness.wire.errors import LoopbenchError
from harness.wire.events import (
    ARGUMENTS_DELTA,
    COMPLETED,
    ERROR,
    FAILED,
    INCOMPLETE,
    OUTPUT_ITEM_DONE,
    loads,
)
from harness.wire.sse import SSEDecoder, SSEMessage
from harness.wire.transports import APIS, BY_NAME
from harness.workload.agent import TurnInput
from harness.workload.plan import TurnPlan

#: the three APIs (:data:`harness.wire.transports.APIS`)
RESPONSES_API, CHAT_API, MESSAGES_API = APIS

#: what every probe request asks for: a few tokens, so probing costs next to nothing
#: (16 is the smallest max_output_tokens some hosted endpoints accept)
PROBE_INPUT = "loopbench probe: answer with one short word."
PROBE_MAX_OUTPUT_TOKENS = 16
PROBE_LANE = "loopbench-probe"
#: the tool of the Chat Completions tool-call check; a call needs a few more tokens than a word
PROBE_TOOL = "loopbench_probe"
PROBE_TOOL_INPUT = f"loopbench probe: call {PROBE_TOOL} with the text 'ok'."
#: a cap, not a plan: a model echoing 'ok' writes ~15 tokens; the reference server, sent no hint,
#: draws a call's length (median 60, docs/model.md §11), and 48 cut a third of its calls
PROBE_TOOL_MAX_TOKENS = 512
#: the Messages API caches no prompt shorter than 1024 tokens (2048 on some models), so the
#: prompt-caching check sends a system prompt just over that, twice: the one large probe request
PROBE_CACHE_LINES = 230

# -- requests: the run's own body builders, fed a one-message turn -------------------------


def probe_turn(
    model: str,
    text: str = PROBE_INPUT,
    *,
    max_tokens: int = PROBE_MAX_OUTPUT_TOKENS,
    tools: Sequence[dict[str, Any]] = (),
    tool_choice: str = "auto",
    instructions: str = "",
) -> TurnInput:
    """The probe's one-message turn: no history, no ``loopbench.*`` hints."""
    item = {"type": "message", "role": "user", "content": text}
    return TurnInput(
        turn=TurnPlan(index=0, output_tokens=max_tokens, tool_calls=1 if tools else 0),
        history=[item],
        new_items=[item],
        instructions=instructions,
        tools=list(tools),
        tool_choice=tool_choice,
        metadata={},
        max_output_tokens=max_tokens,
        model=model,
    )


def http_create(
    model: str, *, store: bool, previous_response_id: str | None = None
) -> dict[str, Any]:
    """A tiny streamed ``POST /responses``: ``http``'s body, ``http-chained``'s when stored."""
    spec = BY_NAME["http-chained" if store else "http"]
    return http_body(spec, probe_turn(model), previous_response_id)


def ws_create(
    model: str,
    *,
    previous_response_id: str | None = None,
    generate: bool = True,
    stream_id: str | None = None,
) -> dict[str, Any]:
    """``ws``'s ``response.create``; ``generate``/``stream_id`` only when they are what is probed."""
    body = ws_body(BY_NAME["ws"], probe_turn(model), previous_response_id)
    if not generate:
        body["generate"] = False
    if stream_id is not None:
        body["stream_id"] = stream_id
    return body


#: the function of the tool-call check, in the Responses shape the transcript keeps
PROBE_FUNCTION: dict[str, Any] = {
    "type": "function",
    "name": PROBE_TOOL,
    "description": "Echo a short text (a loopbench probe).",
    "parameters": {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
}


def chat_create(model: str, *, tools: bool = False) -> dict[str, Any]:
    """The ``chat`` transport's body; with ``tools``, one tool and ``tool_choice: "required"``,
    as the transport sends a turn that calls tools: a server that cannot force a call refuses
    or ignores it here, not on every turn of the run."""
    if not tools:
        return chat_body(probe_turn(model))
    return chat_body(
        probe_turn(
            model,
            PROBE_TOOL_INPUT,
            max_tokens=PROBE_TOOL_MAX_TOKENS,
            tools=[PROBE_FUNCTION],
            tool_choice="required",
        )
    )


def messages_create(model: str, *, cached: bool = False) -> dict[str, Any]:
    """The ``messages`` transport's body; ``cached`` adds a long system prompt marked with
    ``cache_control`` (the prompt-caching check sends it twice)."""
    if cached:
        lines = range(PROBE_CACHE_LINES)
        prompt = " ".join(f"Line {i} of the loopbench prompt-cache probe." for i in lines)
        return messages_body(probe_turn(model, instructions=prompt), "system")
    return messages_body(probe_turn(model), "none")


def background_create(model: str) -> dict[str, Any]:
    """A tiny non-streamed ``background: true`` create (needs ``store: true``)."""
    return {**http_create(model, store=True), "stream": False, "background": True}


def compact_request(model: str) -> dict[str, Any]:
    return compact_body(probe_turn(model))


# -- reading answers: the run's stream state machine, through its translators -----------------


@dataclass(slots=True)
class ToolCall:
    """A function call the stream completed, and how many wire messages carried it."""

    name: str
    arguments: str
    pieces: int


@dataclass(slots=True)
class StreamReading:
    """What one response showed, read by a run's :class:`ResponseStream` (a Chat Completions
    or Messages stream through its translator, :mod:`harness.client.translate`).

    Fed one wire message at a time (an SSE message, a WebSocket message); each message's
    index stands for its arrival time, so the pieces of a tool call can be told apart.
    """

    api: str = RESPONSES_API
    #: the messages that carried an event (an SSE ``[DONE]`` does not count)
    events: int = 0
    stream: ResponseStream = field(default_factory=lambda: ResponseStream(sent_ns=0))
    #: an error event's or a protocol violation's text
    problem: str | None = None
    #: why the error the stream ended with says nothing of the feature, or None
    server_state: str | None = None
    #: the ``stream_id`` values the events carried (``None`` for events without one)
    stream_ids: set[str | None] = field(default_factory=set)
    #: the API's own end of the answer: a chat ``finish_reason``, a Messages ``stop_reason``
    reason: str | None = None
    #: ``data: [DONE]`` ended a Chat Completions stream
    done: bool = False
    #: the API's own usage object (a chat usage chunk's; Messages' merged), None without one
    usage: dict[str, Any] | None = None
    calls: list[ToolCall] = field(default_factory=list)
    _error_status: int = 0
    _pieces: dict[int, set[int]] = field(default_factory=dict)
    _translator: ChatTranslator | MessagesTranslator | None = None

    def __post_init__(self) -> None:
        if self.api == CHAT_API:
            self._translator = ChatTranslator()
        elif self.api == MESSAGES_API:
            self._translator = MessagesTranslator()

    def feed(self, msg: SSEMessage | str | bytes) -> bool:
        """One wire message; True once the answer has ended (or broke)."""
        if self.stream.done or self.problem is not None:
            return True
        try:
            if self._translator is not None:
                assert isinstance(msg, SSEMessage)
                events = self._translator.feed(msg)
                self.reason = self._translator.reason
                self.usage = self._translator.usage or None
            elif isinstance(msg, SSEMessage):
                events = [] if msg.raw.startswith(b"[DONE]") else [loads(msg.raw)]
            else:
                events = [loads(msg)]
            if isinstance(msg, SSEMessage) and msg.data.startswith("[DONE]"):
                self.done = True
            else:
                self.events += 1
            for event in events:
                self._observe(event)
                self.stream.feed(event, self.events)
        except LoopbenchError as exc:
            self.problem = f"the events broke the protocol: {exc}"
            return True
        if self.stream.error_message is not None:
            self._error()
        return self.stream.done

    def _observe(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        sid = event.get("stream_id")
        self.stream_ids.add(sid if isinstance(sid, str) else None)
        if kind == ERROR and isinstance(event.get("status"), int):
            self._error_status = event["status"]
        elif kind in (FUNCTION_NAME_TOKEN, ARGUMENTS_DELTA):
            self._pieces.setdefault(event.get("output_index", 0), set()).add(self.events)
        elif kind == OUTPUT_ITEM_DONE:
            item = event.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                pieces = len(self._pieces.get(event.get("output_index", 0), ()))
                self.calls.append(
                    ToolCall(str(item.get("name")), str(item.get("arguments")), pieces)
                )

    def _error(self) -> None:
        stream = self.stream
        if self.api == CHAT_API:
            self.problem = f"the stream carried an error: {stream.error_message}"
        elif self.api == MESSAGES_API:
            self.problem = (
                f"the stream carried an error event ({stream.error_code}): {stream.error_message}"
            )
        else:
            code = f" ({stream.error_code})" if stream.error_code else ""
            self.problem = f"the server answered with an error{code}: {stream.error_message}"
        self.server_state = error_state(self._error_status, stream.error_code)

    @property
    def finished(self) -> bool:
        """The answer ended as its API ends one (a chat stream at its ``finish_reason``)."""
        if self.problem is not None:
            return False
        if self.api == CHAT_API:
            return self.reason is not None
        return self.stream.status in ("completed", "incomplete")

    @property
    def terminal(self) -> str | None:
        """The terminal event's type (``response.completed`` …), None if the stream did not end."""
        return _TERMINALS.get(self.stream.status)

    @property
    def response_id(self) -> str | None:
        return self.stream.response_id

    @property
    def input_tokens(self) -> int | None:
        return _int((self.stream.usage or {}).get("input_tokens"))

    @property
    def output_tokens(self) -> int | None:
        return _int((self.stream.usage or {}).get("output_tokens"))

    def used(self, key: str) -> int | None:
        """An integer of the API's own usage object (``prompt_tokens``, ``cache_read_…``)."""
        return _int((self.usage or {}).get(key))

    @property
    def prompt_tokens(self) -> int | None:
        return self.used("prompt_tokens")

    @property
    def cached_tokens(self) -> int | None:
        details = (self.usage or {}).get("prompt_tokens_details")
        return _int(details.get("cached_tokens")) if isinstance(details, dict) else None


_TERMINALS = {"completed": COMPLETED, "incomplete": INCOMPLETE, "failed": FAILED, "error": ERROR}


def read_body(api: str, body: bytes) -> StreamReading:
    """A whole SSE body of ``api`` (``responses``, ``chat``, ``messages``), read message by
    message by the one SSE decoder."""
    reading = StreamReading(api)
    for msg in SSEDecoder().feed(body + b"\n\n"):
        if reading.feed(msg):
            break
    return reading


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def answer_of(status: int, body: bytes) -> dict[str, Any] | str:
    """A JSON answer's object, or the error message of an error (or non-JSON) answer."""
    if status >= 400:
        return error_text(status, body)
    try:
        doc = loads(body)
    except LoopbenchError:
        return f"HTTP {status} with a body that is not JSON: {body_start(body)}"
    if not isinstance(doc, dict):
        return f"HTTP {status} with a JSON body that is not an object"
    return doc
