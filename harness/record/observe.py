"""What the recording proxy learns from one exchange, and the trace it builds from all of them.

Pure: bytes and timestamps in, :class:`Exchange` summaries and trace rollouts out.  The
proxy (:mod:`harness.record.proxy`) forwards the bytes first and hands a copy here only
when the response has ended, so none of this sits between a chunk and the client.

An :class:`Exchange` keeps no content unless asked to: the request's items are reduced to
hashes (to tell which conversation a request continues) and token counts (text length / 4,
the project's token convention), the response to its id, usage, the tool calls it asked
for and a hash of its final text (to tell which tool call a sub-agent's answer fed).
Which conversation a request continues, forks or starts, which are sub-agents, warm-ups
and recoveries: the rules of docs/traces.md, "Lineage", "Warm-ups" and "Recoveries".
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from harness.client.api_conversation import PATHS
from harness.client.chat_api import ChatTranslator
from harness.client.messages_api import MessagesTranslator
from harness.client.stream import ResponseStream
from harness.client.translate import TranslatedFeed
from harness.wire.errors import LoopbenchError
from harness.wire.events import TERMINAL_TYPES, loads
from harness.wire.json_tree import without_key
from harness.wire.sse import SSEDecoder
from harness.wire.tokens import count_tokens
from harness.wire.transports import APIS
from harness.wire.ws_frames import OP_CLOSE, Deflate, FrameError, FrameReader
from harness.workload.importers.codex import CALL_ITEMS, OUTPUT_ITEMS, TEXT_KEYS, content_text
from harness.workload.trace import (
    TRACE_VERSION,
    TraceClient,
    TraceHeader,
    TraceRecovery,
    TraceRollout,
    TraceSubagent,
    TraceToolCall,
    TraceTurn,
    TraceWarmup,
)

RESPONSES, CHAT, MESSAGES = APIS


@dataclass(slots=True)
class RequestHead:
    method: str
    target: str
    #: lower-case names, values as sent (never logged: they hold credentials)
    headers: dict[str, str]


def parse_request_head(raw: bytes) -> RequestHead:
    """The request line and headers of ``raw`` (the head without its final blank line)."""
    lines = raw.split(b"\r\n")
    parts = lines[0].decode("latin-1").split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ValueError(
            f"request line: expected 'METHOD /path HTTP/1.1', got {lines[0][:60].decode('latin-1')!r}"
        )
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name:
            raise ValueError(f"request header: expected 'name: value', got {line[:40]!r}")
        key = name.decode("latin-1").strip().lower()
        text = value.strip().decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return RequestHead(parts[0], parts[1], headers)


def api_of(path: str) -> str | None:
    """Which API a request path speaks (``None``: not one the proxy records)."""
    path = path.split("?", 1)[0].rstrip("/")
    return next((api for api, end in PATHS.items() if path.endswith(end)), None)


# --- WebSocket frames ---------------------------------------------------------------------


class WsDecoder:
    """Complete data messages out of one direction's frames (a copy: the bytes are already sent).

    The frames are read by the project's codec (:mod:`harness.wire.ws_frames`): masking,
    fragmentation and permessage-deflate (``deflate``: that direction's settings, when the
    extension was agreed); control frames are skipped.  A direction whose framing broke is
    read no further: ``broken`` says why (its requests in flight end failed at the close).
    """

    __slots__ = ("_reader", "broken")

    def __init__(self, *, masked: bool, deflate: Deflate | None = None) -> None:
        # No limit of its own: the relay forwarded the bytes already, whatever their size.
        self._reader = FrameReader(1 << 62, masked=masked, deflate=deflate)
        self.broken: str | None = None

    def feed(self, data: bytes) -> list[bytes]:
        if self.broken is not None:
            return []
        try:
            frames = self._reader.feed(data)
        except FrameError as exc:
            self.broken = exc.reason
            frames = exc.before
        return [payload for op, payload in frames if op < OP_CLOSE]


# --- one exchange -------------------------------------------------------------------------


@dataclass(slots=True)
class Exchange:
    """One request and its response, reduced to what the trace needs."""

    api: str
    transport: str  # "http" or "ws"
    connection: int
    t_start_ns: int
    t_end_ns: int
    status: int = 200
    model: str = ""
    previous_response_id: str | None = None
    #: hash of the instructions / system prompt and tools, then one hash per input item
    head_hash: str = ""
    item_hashes: tuple[str, ...] = ()
    instructions_tokens: int = 0
    tool_schema_tokens: int = 0
    #: tokens of the user messages in the request (the prompt, on a conversation's first)
    user_tokens: int = 0
    #: tool outputs the request carries: call id → (tokens, hash of the text)
    outputs: dict[str, tuple[int, str]] = field(default_factory=dict)
    response_id: str = ""
    calls: tuple[str, ...] = ()
    input_tokens: int | None = None
    cached_tokens: int | None = None
    output_tokens: int = 0
    reasoning_tokens: int = 0
    answer_hash: str = ""
    content: dict[str, Any] | None = None
    #: a ``generate: false`` request: it prepares a connection, it is no turn of its own
    warmup: bool = False
    #: what each request item and each output item stands for in the conversation, in a
    #: form that survives a client re-sending it (:func:`_item_key`): which conversation a
    #: request that re-sends the whole context on a new connection continues
    item_keys: tuple[str, ...] = ()
    output_keys: tuple[str, ...] = ()
    #: reasoning items the request's input carries with their content (``encrypted_content``),
    #: and reasoning items in the response's output (Responses): whether the client sends
    #: the model's reasoning back when it re-sends the context
    reasoning_items: int = 0
    output_reasoning: int = 0

    @property
    def ok(self) -> bool:
        if self.warmup:
            return self.status < 400 and bool(self.response_id)
        return self.status < 400 and bool(self.response_id or self.output_tokens or self.calls)


def _h(value: Any) -> str:
    data = value if isinstance(value, bytes) else orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def _text_of(value: Any) -> str:
    """All the text in a content value (string, or parts with ``text``/``output``); "" for
    anything else."""
    return content_text(value, (*TEXT_KEYS, "input_text", "output_text"), opaque=False)


def summarize(
    api: str,
    transport: str,
    connection: int,
    request_body: bytes,
    status: int,
    response_body: bytes,
    response_headers: dict[str, str],
    times: tuple[int, int],
    keep_content: bool = False,
) -> Exchange | None:
    """The :class:`Exchange` of one request/response (``None``: the request is not JSON).

    ``response_body`` is the whole body (an SSE stream, a JSON object) or, over WebSocket,
    the event messages joined by newlines; ``times`` is (request start, response end) in
    nanoseconds.
    """
    try:
        req = orjson.loads(request_body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(req, dict):
        return None
    ex = Exchange(api, transport, connection, *times, status)
    ex.model = str(req.get("model") or "")
    try:
        _summarize_request(ex, req)
    except (TypeError, AttributeError, ValueError):
        # A request the upstream will refuse (input: 7): recorded as failed, not guessed at.
        ex.status = max(status, 400)
        return ex
    encoding = response_headers.get("content-encoding", "")
    if "gzip" in encoding or "deflate" in encoding:
        try:
            response_body = zlib.decompress(response_body, 47)
        except zlib.error:
            response_body = b""
    stream = None
    if status < 400:
        try:
            stream = _read_response(api, transport, response_body)
        except (LoopbenchError, TypeError, AttributeError, ValueError):
            ex.status = 502  # a body that is not what the API defines: not replayable
        else:
            _summarize_response(ex, stream)
    if keep_content:
        ex.content = {"request": req, "output": stream and stream.output_items}
    return ex


def _summarize_request(ex: Exchange, req: dict[str, Any]) -> None:
    api = ex.api
    tools = req.get("tools") or []
    ex.tool_schema_tokens = count_tokens(orjson.dumps(tools).decode()) if tools else 0
    items: list[Any]
    if api == RESPONSES:
        if req.get("type") == "response.create":
            req = {k: v for k, v in req.items() if k != "type"}
        ex.warmup = req.get("generate") is False
        ex.previous_response_id = req.get("previous_response_id") or None
        instructions = req.get("instructions") or ""
        raw = req.get("input")
        items = [{"role": "user", "content": raw}] if isinstance(raw, str) else list(raw or [])
        ex.instructions_tokens = count_tokens(_text_of(instructions))
        ex.head_hash = _h([instructions, tools])
    elif api == CHAT:
        items = list(req.get("messages") or [])
        ex.instructions_tokens = sum(
            count_tokens(_text_of(m.get("content")))
            for m in items
            if isinstance(m, dict) and m.get("role") in ("system", "developer")
        )
        ex.head_hash = _h([tools])
    else:
        # Cache breakpoints move to the newest message each turn: not part of the history.
        # Nor are the system messages inside `messages` (Claude Code rewrites them from turn
        # to turn) or the tools (it loads deferred ones mid-session): matched on neither.
        items = [
            m
            for m in without_key(list(req.get("messages") or []), "cache_control")
            if not (isinstance(m, dict) and m.get("role") == "system")
        ]
        prompt = without_key(req.get("system") or "", "cache_control")
        ex.instructions_tokens = count_tokens(_text_of(prompt))
        ex.head_hash = _h([prompt])
    ex.item_hashes = tuple(_h(i) for i in items)
    if api == RESPONSES:
        ex.item_keys = tuple(k for k in map(_item_key, items) if k)
        # An item sent back by its id alone (the openai-agents SDK asks for no content:
        # include: []) carries none of the reasoning: not counted.
        ex.reasoning_items = sum(
            1 for i in items if _is_reasoning(i) and i.get("encrypted_content")
        )
    for item in items:
        if not isinstance(item, dict):
            continue
        kind, role = item.get("type"), item.get("role")
        if api == RESPONSES and kind in OUTPUT_ITEMS:
            _add_output(ex, item.get("call_id"), item.get("output"))
        elif api == CHAT and role == "tool":
            _add_output(ex, item.get("tool_call_id"), item.get("content"))
        elif api == MESSAGES and role == "user" and isinstance(item.get("content"), list):
            for part in item["content"]:
                if isinstance(part, dict) and part.get("type") == "tool_result":
                    _add_output(ex, part.get("tool_use_id"), part.get("content"))
                elif isinstance(part, dict) and part.get("type") == "text":
                    ex.user_tokens += count_tokens(str(part.get("text", "")))
        elif role == "user" and (kind in (None, "message")):
            ex.user_tokens += count_tokens(_text_of(item.get("content")))


def _add_output(ex: Exchange, call_id: Any, content: Any) -> None:
    text = _text_of(content)
    ex.outputs[str(call_id)] = (count_tokens(text), _h(text.encode()))


def _is_reasoning(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "reasoning"


def _item_key(item: Any) -> str:
    """What a Responses item stands for, whoever sends it ("" for an item that proves nothing).

    A client that re-sends a conversation does not send the server's output items back as
    they came (no ``id`` or ``status``, reasoning dropped or kept): a call is its
    ``call_id``, an output that call id and its text, a message its role and text.
    """
    if not isinstance(item, dict):
        return _h(item)
    kind = item.get("type")
    if kind == "reasoning":
        return ""
    if kind in CALL_ITEMS:
        return f"call:{item.get('call_id') or item.get('id')}"
    if kind in OUTPUT_ITEMS:
        return f"out:{item.get('call_id')}:{_h(_text_of(item.get('output')).encode())}"
    if kind in (None, "message"):
        return f"msg:{item.get('role')}:{_h(_text_of(item.get('content')).encode())}"
    return _h({k: v for k, v in item.items() if k not in ("id", "status")})


_TERMINAL = tuple(t.encode() for t in TERMINAL_TYPES)


def _read_response(api: str, transport: str, body: bytes) -> ResponseStream:
    """The response read by the client's own machinery: a Chat or Messages stream through its
    translator (harness/client/translate.py), a whole JSON body as one such stream, into the
    Responses state machine.  Raises what the client would (an unreadable response).

    A Responses stream is read at its terminal event alone, which carries the whole response:
    of a long stream only that event is decoded (the observer shares the relay's cores).
    """
    stream = ResponseStream(0)
    whole = body.lstrip().startswith(b"{") and transport == "http"
    if api == RESPONSES:
        if whole:
            stream.whole(orjson.loads(body), 0)
            return stream
        sse = transport == "http"
        raws = [m.raw for m in SSEDecoder().feed(body)] if sse else body.split(b"\n")
        ends = [m for m in raws if any(t in m for t in _TERMINAL)]
        terminal = [e for e in map(loads, ends) if e.get("type") in TERMINAL_TYPES]
        if terminal:
            stream.whole(terminal[-1]["response"], 0)
        return stream
    if whole:
        body = _as_sse(api, orjson.loads(body))
    translator = ChatTranslator() if api == CHAT else MessagesTranslator()
    TranslatedFeed(stream, translator).feed(body, 0)
    if api == CHAT and stream.usage and "prompt_tokens_details" not in (translator.usage or {}):
        stream.usage["input_tokens_details"] = {}  # no cache reported: unknown, not 0
    return stream


def _as_sse(api: str, obj: dict[str, Any]) -> bytes:
    """A whole Chat completion or Messages message as the stream that would have carried it."""
    events: list[Any]
    if api == CHAT:
        # a whole message's tool calls carry no index; a stream's deltas are told apart by it
        choices = [
            {**c, "delta": _indexed_calls(c.get("message"))} for c in obj.get("choices") or []
        ]
        events = [{**obj, "choices": choices}, "[DONE]"]
    else:
        events = [{"type": "message_start", "message": {**obj, "content": []}}]
        for i, block in enumerate(obj.get("content") or []):
            events += _block_events(i, block) if isinstance(block, dict) else []
            events.append({"type": "content_block_stop", "index": i})
        stop = {"stop_reason": obj.get("stop_reason")}
        events += [{"type": "message_delta", "delta": stop}, {"type": "message_stop"}]
    return b"".join(
        b"data: " + (e.encode() if isinstance(e, str) else orjson.dumps(e)) + b"\n\n"
        for e in events
    )


def _indexed_calls(message: object) -> object:
    if not isinstance(message, dict) or not isinstance(message.get("tool_calls"), list):
        return message
    calls = [{**c, "index": j} for j, c in enumerate(message["tool_calls"]) if isinstance(c, dict)]
    return {**message, "tool_calls": calls}


def _block_events(i: int, block: dict[str, Any]) -> list[dict[str, Any]]:
    """A whole content block as its start and the delta a stream carries its body in (a tool
    call's input, a thinking block's text and signature come only as deltas)."""
    kind = block.get("type")
    if kind == "tool_use":
        start = {**block, "input": {}}
        deltas = [
            {
                "type": "input_json_delta",
                "partial_json": orjson.dumps(block.get("input", {})).decode(),
            }
        ]
    elif kind == "thinking":
        start = {**block, "thinking": "", "signature": ""}
        deltas = [
            {"type": "thinking_delta", "thinking": str(block.get("thinking") or "")},
            {"type": "signature_delta", "signature": str(block.get("signature") or "")},
        ]
    else:
        start, deltas = block, []
    return [
        {"type": "content_block_start", "index": i, "content_block": start},
        *({"type": "content_block_delta", "index": i, "delta": d} for d in deltas),
    ]


def _summarize_response(ex: Exchange, stream: ResponseStream) -> None:
    if stream.response is None:
        return  # it never ended: nothing the trace can replay
    output = stream.output_items
    ex.response_id = stream.response_id or ""
    if ex.api == RESPONSES:  # the items a Responses client may send back as they came
        ex.output_keys = tuple(k for k in map(_item_key, output) if k)
        ex.output_reasoning = sum(1 for i in output if _is_reasoning(i))
    calls = [i.get("call_id") or i.get("id") for i in output if i.get("type") in CALL_ITEMS]
    ex.calls = tuple(str(c) for c in calls if c)  # a call without an id: nothing can answer it
    text = "".join(_text_of(i.get("content")) for i in output if i.get("type") == "message")
    ex.answer_hash = _h(text.encode()) if text else ""  # an empty answer proves nothing
    usage = stream.usage or {}
    ex.input_tokens = usage.get("input_tokens")
    ex.cached_tokens = (usage.get("input_tokens_details") or {}).get("cached_tokens")
    ex.reasoning_tokens = int(
        (usage.get("output_tokens_details") or {}).get("reasoning_tokens") or 0
    )
    ex.output_tokens = int(usage.get("output_tokens") or 0) - ex.reasoning_tokens


# --- conversations → trace ------------------------------------------------------------------


@dataclass(eq=False)
class _Conv:
    number: int
    turns: list[Exchange] = field(default_factory=list)
    parent: _Conv | None = None
    #: the parent's turn index this conversation was forked during
    fork_turn: int = -1
    children: list[_Conv] = field(default_factory=list)
    #: (conversation, its turn) that may have forked this one, the likeliest first
    candidates: list[tuple[_Conv, int]] = field(default_factory=list)
    #: it chains from or extends a candidate's history (a fork, rule 2)
    forked: bool = False
    #: conversations that were waiting for tools when it started, without evidence of lineage
    overlapped_with: list[int] = field(default_factory=list)
    #: the conversation whose answer this one's first request followed with a new user
    #: message (the next question of a chat session), and that message's tokens
    follows: _Conv | None = None
    question_tokens: int = 0
    #: the ``generate: false`` request the conversation's first request followed on its
    #: connection (chained from it, or next on it)
    warmup: Exchange | None = None
    #: item keys of the whole context its latest request had (chained items included)
    context: tuple[str, ...] = ()
    #: turn index -> the failed requests before it that it re-sent the context after
    recovered: dict[int, list[Exchange]] = field(default_factory=dict)
    #: failed requests after its last turn (the session ended on them)
    failed_after: list[Exchange] = field(default_factory=list)
    #: per turn, how its request carried the context: "first" (the conversation's first),
    #: "chain" (it named the previous response, or its connection held the rest), "resend"
    #: (it re-sent the history and extended it), "recovery" (the whole context again, after
    #: a failure)
    links: list[str] = field(default_factory=list)

    @property
    def last(self) -> Exchange:
        return self.turns[-1]

    def waiting_at(self, t_ns: int) -> bool:
        """Whether this conversation was running its tools at ``t_ns``."""
        last = [x for x in self.turns if x.t_start_ns <= t_ns]
        return bool(last and last[-1].calls and last[-1].t_end_ns <= t_ns)


def _continues(conv: _Conv, ex: Exchange) -> bool:
    last = conv.last
    if last.t_end_ns > ex.t_start_ns:
        return False  # one response in flight per conversation
    return all(c in ex.outputs for c in last.calls)


def _resent(convs: Sequence[_Conv], ex: Exchange) -> _Conv | None:
    """The conversation whose whole context ``ex`` re-sends and extends without a chain.

    A client whose connection broke mid-response (Codex CLI over WebSocket) opens another
    and sends everything again: the chained items it sent before, the outputs it got, and
    the outputs of the calls still pending.  The longest such context wins.
    """
    if ex.api != RESPONSES or ex.previous_response_id or not ex.item_keys:
        return None
    return _extended(convs, ex, ex.item_keys, lambda c: (*c.context, *c.last.output_keys))


def _extended(
    convs: Sequence[_Conv],
    ex: Exchange,
    items: tuple[str, ...],
    history: Callable[[_Conv], tuple[str, ...]],
) -> _Conv | None:
    """The conversation of ``ex``'s API and head whose ``history`` ``items`` extends; the
    longest wins (an empty history is shared by everything: no evidence)."""
    best: _Conv | None = None
    best_len = 0
    for c in convs:
        seen = history(c)
        if (
            c.last.api == ex.api
            and c.last.head_hash == ex.head_hash
            and best_len < len(seen) < len(items)
            and items[: len(seen)] == seen
        ):
            best, best_len = c, len(seen)
    return best


def _assign(exchanges: Sequence[Exchange], failed: Sequence[Exchange] = ()) -> list[_Conv]:
    convs: list[_Conv] = []
    by_response: dict[str, tuple[_Conv, int]] = {}
    #: warm-ups not yet followed, by their response id and by their connection
    warm_ids: dict[str, Exchange] = {}
    warm_on: dict[int, Exchange] = {}
    for ex in sorted(exchanges, key=lambda x: x.t_start_ns):
        if ex.warmup:
            warm_ids[ex.response_id] = warm_on[ex.connection] = ex
            continue
        conv: _Conv | None = None
        fork_of: _Conv | None = None
        recovery = False
        chained: _Conv | None = None  # the conversation whose context ex only adds to
        warmup = warm_ids.pop(ex.previous_response_id or "", None)
        if warmup is not None:
            pass  # the first request after a warm-up: a new conversation (below)
        elif ex.previous_response_id and ex.previous_response_id in by_response:
            prev, index = by_response[ex.previous_response_id]
            chained = prev
            if index == len(prev.turns) - 1 and _continues(prev, ex):
                conv = prev
            else:
                fork_of = prev
        elif not ex.previous_response_id:
            best = _extended(convs, ex, ex.item_hashes, lambda c: c.last.item_hashes)
            if best is not None:
                if _continues(best, ex):
                    conv = best
                else:
                    fork_of = best
            elif ex.transport == "ws":
                # Only new items, no chain: the connection carries the conversation (the
                # latest one on it whose pending calls this request answers).
                same = [
                    c
                    for c in convs
                    if c.last.transport == "ws"
                    and c.last.connection == ex.connection
                    and c.last.calls
                    and _continues(c, ex)
                ]
                if same:
                    conv = chained = max(same, key=lambda c: c.last.t_end_ns)
            if conv is None and fork_of is None:
                resent = _resent(convs, ex)
                if resent is not None and _continues(resent, ex):
                    conv, recovery = resent, bool(resent.last.calls)
        if conv is None and fork_of is None and warmup is None and ex.transport == "ws":
            warmup = warm_on.get(ex.connection)
        if warmup is not None:
            warm_ids.pop(warmup.response_id, None)
            if warm_on.get(warmup.connection) is warmup:
                del warm_on[warmup.connection]
        if conv is not None and not conv.last.calls:
            # The conversation had answered: this is the session's next question.  The
            # trace's turns end at an answer, so it becomes a rollout of its own that
            # carries the history so far as its system prompt (docs/traces.md).
            earlier = conv.last.user_tokens if not ex.previous_response_id else 0
            follows = conv
            conv = _Conv(len(convs) + 1, follows=follows)
            conv.question_tokens = max(1, ex.user_tokens - earlier)
            convs.append(conv)
        if conv is None:
            conv = _Conv(len(convs) + 1, warmup=warmup)
            if fork_of is not None:
                conv.candidates = [(fork_of, _turn_at(fork_of, ex.t_start_ns))]
                conv.forked = True
            else:
                waiting = [
                    (c, _turn_at(c, ex.t_start_ns)) for c in convs if c.waiting_at(ex.t_start_ns)
                ]
                # latest-ended first: the default when no answer names the parent
                conv.candidates = sorted(waiting, key=lambda ci: -ci[0].turns[ci[1]].t_end_ns)
            convs.append(conv)
        # The whole context this request had: a chained one (or one that only adds to its
        # connection's conversation) sends only what it adds.
        if warmup is not None and conv.warmup is warmup and not conv.turns:
            conv.context = (*warmup.item_keys, *warmup.output_keys, *ex.item_keys)
        elif chained is not None:
            conv.context = (*chained.context, *chained.last.output_keys, *ex.item_keys)
        else:
            conv.context = ex.item_keys
        if recovery:
            conv.recovered[len(conv.turns)] = _failed_between(conv, ex, failed)
        if not conv.turns:
            link = "first"
        elif recovery:
            link = "recovery"
        elif chained is not None:
            link = "chain"
        else:
            link = "resend"
        conv.links.append(link)
        conv.turns.append(ex)
        if ex.response_id:
            by_response[ex.response_id] = (conv, len(conv.turns) - 1)
    for conv in convs:
        # A session that ended on failed requests (no re-send answered them).  Only one
        # still waiting for its tools' turn: after an answer, a failed request on the same
        # connection is another conversation's start.
        if conv.last.calls:
            conv.failed_after = _failed_between(conv, None, failed)
    for conv in convs:
        # Among conversations waiting for tools when this one started, its parent is the
        # one whose next request carries this one's final answer as a tool output.  A fork
        # has its parent already (it shares that history); any other conversation that
        # merely overlapped one in time is a rollout of its own: concurrent independent
        # agents look exactly like that.
        if not conv.candidates:
            continue
        answer = conv.last.answer_hash
        chosen: tuple[_Conv, int] | None = conv.candidates[0] if conv.forked else None
        for cand, turn in conv.candidates:
            nxt = cand.turns[turn + 1] if turn + 1 < len(cand.turns) else None
            if answer and nxt is not None and any(h == answer for _, h in nxt.outputs.values()):
                chosen = (cand, turn)
                break
        if chosen is None:
            conv.overlapped_with = [c.number for c, _ in conv.candidates]
            continue
        conv.parent, conv.fork_turn = chosen
        conv.parent.children.append(conv)
    return convs


def _id(conv: _Conv) -> str:
    return f"conv-{conv.number}"


def _failed_between(
    conv: _Conv, nxt: Exchange | None, failed: Sequence[Exchange]
) -> list[Exchange]:
    """The failed requests on the connection of ``conv``'s latest turn after it, before ``nxt``."""
    last = conv.last
    until = nxt.t_start_ns if nxt is not None else None
    return [
        f
        for f in failed
        if f.connection == last.connection
        and f.transport == last.transport
        and f.api == last.api
        and f.t_start_ns >= last.t_end_ns
        and (until is None or f.t_start_ns < until)
    ]


def _turn_at(conv: _Conv, t_ns: int) -> int:
    return max(i for i, x in enumerate(conv.turns) if x.t_start_ns <= t_ns)


def _prompt_tokens(conv: _Conv) -> tuple[int, int, int]:
    """(system, tool schema, user prompt) tokens of a conversation's first request."""
    first = conv.turns[0]
    user = conv.question_tokens or max(1, first.user_tokens)
    schema = first.tool_schema_tokens
    if first.input_tokens is not None:
        system = max(0, first.input_tokens - user - schema)
    else:
        system = first.instructions_tokens
    return system, schema, user


def _turns(conv: _Conv, embedded: set[int]) -> list[TraceTurn]:
    """The conversation's turns; adds the children it embeds as sub-agents to ``embedded``."""
    turns: list[TraceTurn] = []
    for i, ex in enumerate(conv.turns):
        nxt = conv.turns[i + 1] if i + 1 < len(conv.turns) else None
        children = [c for c in conv.children if c.fork_turn == i]
        # The tools ran until the client asked again: its first attempt, when that failed.
        failed = conv.recovered.get(i + 1)
        asked = failed[0].t_start_ns if failed else nxt.t_start_ns if nxt else 0
        gap_ms = round(max(0, asked - ex.t_end_ns) / 1e6, 3) if nxt else 0.0
        calls = [
            TraceToolCall(
                latency_ms=gap_ms,
                output_tokens=(nxt.outputs.get(c, (0, ""))[0] if nxt else 0),
            )
            for c in ex.calls
        ]
        subagents: list[TraceSubagent] = []
        taken: set[int] = set()
        for child in children:
            j = _call_for(child, ex, nxt, taken)
            if j is None:
                continue  # more forks than calls: the child stays a rollout of its own
            taken.add(j)
            embedded.add(child.number)
            result = calls[j].output_tokens if nxt else child.last.output_tokens
            calls[j] = TraceToolCall(latency_ms=0.0, output_tokens=result, subagent=len(subagents))
            subagents.append(_subagent(child, embedded, result, nxt))
        turns.append(
            TraceTurn(
                output_tokens=max(1, ex.output_tokens),
                reasoning_tokens=ex.reasoning_tokens,
                input_tokens=ex.input_tokens,
                cached_tokens=ex.cached_tokens,
                tool_calls=calls,
                subagents=subagents,
                recovery=_recovery(conv.recovered[i], ex) if i in conv.recovered else None,
            )
        )
    return turns


def _client(conv: _Conv) -> TraceClient | None:
    """What the client did with the context, where its requests showed it (docs/traces.md).

    ``ws_chains``: a WebSocket conversation's later turns (recoveries aside) all chained, or
    all re-sent the history.  ``resends_reasoning``: every request that sent the context
    whole after a response with reasoning items carried reasoning items back, or none did.
    Mixed evidence, or none, says nothing (``None``).
    """
    links = list(zip(conv.turns, conv.links, strict=True))
    later = {link for _, link in links if link in ("chain", "resend")}
    ws_chains = None
    if conv.turns[0].transport == "ws" and len(later) == 1:
        ws_chains = later == {"chain"}
    kept = [
        ex.reasoning_items > 0
        for i, (ex, link) in enumerate(links)
        if link in ("resend", "recovery") and any(x.output_reasoning for x in conv.turns[:i])
    ]
    resends = kept[0] if kept and len(set(kept)) == 1 else None
    client = TraceClient(ws_chains=ws_chains, resends_reasoning=resends)
    return client if client.known else None


def _recovery(failed: list[Exchange], ex: Exchange) -> TraceRecovery:
    if not failed:
        # Re-sent without a failure the proxy saw (the client gave up on a response
        # it was still waiting for, or the failure never reached the upstream).
        return TraceRecovery(failed_attempts=0)
    return TraceRecovery(
        failed_attempts=len(failed),
        status=failed[-1].status,
        lost_ms=round(max(0, ex.t_start_ns - failed[0].t_start_ns) / 1e6, 3),
    )


def _call_for(child: _Conv, ex: Exchange, nxt: Exchange | None, taken: set[int]) -> int | None:
    answer = child.last.answer_hash
    if nxt is not None and answer:
        for j, call in enumerate(ex.calls):
            out = nxt.outputs.get(call)
            if j not in taken and out is not None and out[1] == answer:
                return j
    if not child.forked:
        return None  # its answer fed no call of this turn: it replaces none of them
    return next((j for j in range(len(ex.calls)) if j not in taken), None)


def _finish(turns: list[TraceTurn]) -> tuple[list[TraceTurn], bool]:
    """Turns that validate: cut at the first answer, close an open tool loop."""
    for i, turn in enumerate(turns):
        if not turn.tool_calls:
            return turns[: i + 1], i + 1 < len(turns)
    # Stopped on a tool call (interrupted, or still running at Ctrl-C): close it with a
    # one-token answer so the replay ends where the recording did.
    return [*turns, TraceTurn(output_tokens=1)], True


def _subagent(child: _Conv, embedded: set[int], result: int, nxt: Exchange | None) -> TraceSubagent:
    detach = nxt is not None and child.last.t_end_ns > nxt.t_start_ns
    meta: dict[str, Any] = {"api": child.turns[0].api, "transport": child.turns[0].transport}
    return TraceSubagent(
        join="detach" if detach else "wait",
        result_tokens=result,
        **_body(child, embedded, meta),
    )


def _body(conv: _Conv, embedded: set[int], meta: dict[str, Any]) -> dict[str, Any]:
    """What a rollout and a sub-agent share: id, prompt tokens, turns, client and ``meta``
    (which gains ``truncated`` and the kept ``content``)."""
    system, schema, user = _prompt_tokens(conv)
    turns, cut = _finish(_turns(conv, embedded))
    if cut:
        meta["truncated"] = True
    kept = [x.content for x in conv.turns if x.content is not None]
    if kept:
        meta["content"] = kept
    return {
        "id": _id(conv),
        "system_tokens": system,
        "tool_schema_tokens": schema,
        "user_prompt_tokens": user,
        "turns": turns,
        "client": _client(conv),
        "meta": meta,
    }


def build_trace(
    exchanges: Sequence[Exchange],
    source: str = "loopbench-record",
    meta: dict[str, Any] | None = None,
) -> tuple[TraceHeader, list[TraceRollout]]:
    """The trace of the recorded exchanges (failed ones are counted in the header, not replayed)."""
    good = [x for x in exchanges if x.ok]
    convs = _assign(good, [x for x in exchanges if not x.ok])
    rollouts: list[TraceRollout] = []
    # A parent comes before its children: its turns embed those that become its sub-agents.
    embedded: set[int] = set()
    began = min((x.t_start_ns for x in exchanges), default=0)
    for conv in convs:
        if conv.number in embedded:
            continue
        first = conv.turns[0]
        rmeta: dict[str, Any] = {
            "api": first.api,
            "transport": first.transport,
            "model": first.model,
            # when the session started, after the recording began (its warm-up, if any):
            # `loopbench run TRACE.jsonl` starts the replayed rollouts at these times
            "start_ms": round(((conv.warmup or first).t_start_ns - began) / 1e6, 3),
        }
        if conv.parent is not None:
            rmeta["forked_from"] = _id(conv.parent)
        if conv.overlapped_with:
            rmeta["overlapped_with"] = [f"conv-{n}" for n in conv.overlapped_with]
        if conv.follows is not None:
            rmeta["follows"] = _id(conv.follows)
        if conv.failed_after:
            # Closed where its last request failed: the replay ends there too.
            rmeta["ended_on_failure"] = {
                "requests": len(conv.failed_after),
                "status": conv.failed_after[-1].status,
            }
        warm = conv.warmup
        rollouts.append(
            TraceRollout(
                type="rollout",
                warmup=None if warm is None else TraceWarmup(input_tokens=warm.input_tokens),
                **_body(conv, embedded, rmeta),
            )
        )
    header_meta = dict(meta or {})
    header_meta["exchanges"] = len(exchanges)
    header_meta["failed"] = len(exchanges) - len(good)
    warmups = sum(1 for x in good if x.warmup)
    used = sum(1 for c in convs if c.warmup is not None)
    if warmups:
        header_meta["warmups"] = warmups
    if warmups > used:
        # A warm-up no request followed on its connection: no work to replay.
        header_meta["warmups_unfollowed"] = warmups - used
    header = TraceHeader(type="trace", version=TRACE_VERSION, source=source, meta=header_meta)
    return header, rollouts
