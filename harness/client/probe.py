"""What ``loopbench probe`` checks and how it judges the answers (sans I/O).

The asyncio edge (:mod:`harness.run.probe`) sends the requests of
:mod:`harness.client.probe_answers` and hands back what came: a status, a content type, the
answer read by a run's stream state machine (:class:`StreamReading`).  Every verdict is a
:class:`Finding` with its evidence in one human sentence, so a refused run and the
probe table say the same thing.  Which features a transport needs is read from its
:class:`~harness.wire.transports.TransportSpec`, never from its name.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.client.api_errors import answered, server_state
from harness.client.chat_api import INCOMPLETE_REASONS as CHAT_CUT_SHORT
from harness.client.probe_answers import (
    CHAT_API,
    MESSAGES_API,
    PROBE_LANE,
    PROBE_TOOL_MAX_TOKENS,
    RESPONSES_API,
    StreamReading,
)
from harness.wire.transports import TransportSpec

REACHABLE = "reachable"
SSE = "sse"
CHAINING = "chaining"
WEBSOCKET = "websocket"
WS_CHAINING = "ws_chaining"
WARMUP = "warmup"
LANES = "lanes"
BACKGROUND = "background"
COMPACTION = "compaction"
RETRIEVE = "retrieve"
# the features that say whether the endpoint speaks an API at all are named for it
CHAT = CHAT_API
CHAT_USAGE = "chat_usage"
CHAT_TOOLS = "chat_tools"
CHAT_CACHED = "chat_cached"
MESSAGES = MESSAGES_API
MESSAGES_CACHE = "messages_cache"

#: the three APIs, each with the feature that says whether the endpoint has it at all
API_NAMES: dict[str, str] = {
    RESPONSES_API: "Responses API",
    CHAT_API: "Chat Completions API",
    MESSAGES_API: "Anthropic Messages API",
}
API_FEATURE: dict[str, str] = {RESPONSES_API: SSE, CHAT_API: CHAT, MESSAGES_API: MESSAGES}

#: every feature the probe checks, in the order the table shows them, with its label; the
#: first feature of each API is the API itself, the others are indented under it
FEATURES: tuple[tuple[str, str], ...] = (
    (REACHABLE, "reachable (TCP/TLS connect)"),
    (SSE, "Responses API: POST /responses, SSE"),
    (CHAINING, "store + previous_response_id (HTTP)"),
    (WEBSOCKET, "WebSocket mode"),
    (WS_CHAINING, "previous_response_id on a WebSocket"),
    (WARMUP, "generate: false (warm-up)"),
    (LANES, "lanes (stream_id)"),
    (BACKGROUND, "background: true, polled with GET"),
    (COMPACTION, "compaction (POST /responses/compact)"),
    (RETRIEVE, "GET and DELETE /responses/{id}"),
    (CHAT, "Chat Completions: POST /chat/completions"),
    (CHAT_USAGE, "usage in the stream (include_usage)"),
    (CHAT_TOOLS, "tool calls streamed"),
    (CHAT_CACHED, "cached tokens reported"),
    (MESSAGES, "Anthropic Messages: POST /messages"),
    (MESSAGES_CACHE, "prompt caching (cache_control)"),
)
LABELS: dict[str, str] = dict(FEATURES)
#: the API each feature belongs to (None: the connection itself)
API_OF: dict[str, str | None] = {
    REACHABLE: None,
    **dict.fromkeys((SSE, CHAINING, WEBSOCKET, WS_CHAINING, WARMUP, LANES), RESPONSES_API),
    **dict.fromkeys((BACKGROUND, COMPACTION, RETRIEVE), RESPONSES_API),
    **dict.fromkeys((CHAT, CHAT_USAGE, CHAT_TOOLS, CHAT_CACHED), CHAT_API),
    **dict.fromkeys((MESSAGES, MESSAGES_CACHE), MESSAGES_API),
}


#: what an "unknown" that stops a run was about, as a check that builds on it says it: the
#: endpoint refused the credentials (401); it answered 403 (a key without access to the model
#: or the API, a gateway's policy); it does not serve the model the requests named; it failed
#: the request (5xx), was too busy for it (429, 408) or gave no answer in time
STOPPED_BY = {
    "credentials": "the server refused the credentials at {url}",
    "forbidden": "the server answered forbidden at {url}",
    "model": "the server does not serve the model the probe named at {url}",
    "server": "the check it builds on got no answer about it at {url} (a server error, a rate "
    "limit or a time-out)",
}


@dataclass(frozen=True, slots=True)
class Finding:
    """One row of the probe table: ``supported`` is None when it could not be told."""

    feature: str
    supported: bool | None
    evidence: str
    #: False when an earlier finding made this check pointless (its answer is "-")
    checked: bool = True
    #: why an "unknown" still stops a run, a key of :data:`STOPPED_BY` (None: it does not):
    #: the answer was about who asked, the model they named or the server's state, not
    #: about the feature, and a run now would meet the same
    stopped_by: str | None = None
    #: a "no" a run still goes ahead with (a tool call that arrives whole: its turns are
    #: measured for what they are)
    runs_anyway: bool = False

    @property
    def answer(self) -> str:
        if not self.checked:
            return "-"
        return {True: "yes", False: "no", None: "unknown"}[self.supported]

    @property
    def label(self) -> str:
        return LABELS[self.feature]


def needed_features(spec: TransportSpec, *, compaction: bool = False) -> tuple[str, ...]:
    """What an endpoint must support for ``spec`` to run against it; ``compaction``: the
    scenario compacts (``rollout.compact_at_tokens``), which a Responses transport does with
    ``POST /responses/compact``."""
    api = spec.api
    if api == CHAT_API:
        # agent turns force their tool calls with tool_choice "required"
        return (REACHABLE, CHAT, CHAT_TOOLS)
    if api == MESSAGES_API:
        return (REACHABLE, MESSAGES)
    if spec.websocket:
        needed = (REACHABLE, WEBSOCKET, WS_CHAINING) if spec.chained else (REACHABLE, WEBSOCKET)
    else:
        needed = (REACHABLE, SSE, CHAINING) if spec.chained else (REACHABLE, SSE)
    return (*needed, COMPACTION) if compaction else needed


def features_for(specs: Iterable[TransportSpec], *, compaction: bool = False) -> list[str]:
    """The union of :func:`needed_features`, in table order (each checked once per run)."""
    wanted = {f for spec in specs for f in needed_features(spec, compaction=compaction)}
    return [f for f, _ in FEATURES if f in wanted]


def refusal(
    findings: Sequence[Finding],
    specs: Sequence[TransportSpec],
    target: str,
    *,
    compaction: bool = False,
) -> str | None:
    """The one-line reason not to run ``specs`` against ``target``, or None.

    A feature known to be missing refuses, and so does an "unknown" that came from refused
    credentials, a 403, a model the endpoint does not serve or a server that failed or did not
    answer (the run would fail the same way); any other "unknown" (e.g. no usage to compare)
    lets the run go ahead, as the measurement itself will show.
    """
    by_feature = {f.feature: f for f in findings}
    reach = by_feature.get(REACHABLE)
    if reach is not None and reach.supported is False:
        return f"target {target} is unreachable: {reach.evidence}"
    # Every transport that cannot run, each with its first missing feature: one probe, one
    # message, not one re-run per gap.
    gaps: list[tuple[str, str]] = []
    for spec in specs:
        for feature in needed_features(spec, compaction=compaction):
            found = by_feature.get(feature)
            if found is not None and (
                (found.supported is False and not found.runs_anyway) or found.stopped_by is not None
            ):
                gaps.append((spec.name, found.evidence))
                break
    if not gaps:
        return None
    if len(gaps) == 1:
        return f"transport {gaps[0][0]} cannot run against {target}: {gaps[0][1]}"
    names = ", ".join(name for name, _ in gaps)
    shortened = [(name, *_without_hint(why)) for name, why in gaps]
    reasons = "; ".join(f"{name}: {why}" for name, why, _ in shortened)
    hint = f"; {KEY_HINT}" if any(had for _, _, had in shortened) else ""
    return f"transports {names} cannot run against {target}: {reasons}{hint}"


def _not_finished(feature: str, evidence: str, state: str | None) -> Finding:
    """A check that failed: "no", unless it failed for the server's ``state``
    (:func:`server_state`, :func:`error_state`), which says nothing of the feature."""
    if state is not None:
        return not_an_answer(feature, evidence, state)
    return Finding(feature, False, evidence)


#: how each API's stream ends: (what its messages are called, the end that did not come)
_ENDS = {
    RESPONSES_API: ("events", "response.completed"),
    CHAT_API: ("chunks", "a finish_reason"),
    MESSAGES_API: ("events", "message_stop"),
}


def _ended(reading: StreamReading) -> str:
    if reading.problem:
        return reading.problem
    if reading.terminal is None or reading.api != RESPONSES_API:
        noun, end = _ENDS[reading.api]
        return f"the stream ended after {reading.events} {noun} without {end}"
    return f"the response ended with {reading.terminal}"


# -- verdicts -------------------------------------------------------------------------------


def judge_connect(authority: str, error: str | None, connect_ms: float) -> Finding:
    if error is not None:
        return Finding(REACHABLE, False, f"connect to {authority}: {error}")
    return Finding(REACHABLE, True, f"connected to {authority} in {connect_ms:.1f} ms")


def http_failure(url: str, status: int, message: str) -> str:
    """``POST url answered HTTP 500: …`` (the server's error message when it sent one)."""
    return f"POST {url} answered {answered(status, message)}"


#: the statuses of a route the server does not have (405: a path it serves for another method)
NO_ROUTE = (404, 405)
#: credentials refused
UNAUTHORIZED = 401
#: the request refused for who sent it (the credentials were read, not accepted for this)
FORBIDDEN = 403
#: the statuses that are about the client, not the route: the API may well be there
AUTH_REFUSED = (UNAUTHORIZED, FORBIDDEN)


def not_an_answer(feature: str, evidence: str, why: str) -> Finding:
    """An "unknown" from a server that failed or did not answer: ``evidence — why, …``."""
    api = API_OF.get(feature)
    if api is not None and API_FEATURE[api] == feature:
        about = f"the {API_NAMES[api]}"
    else:
        about = "WebSocket mode" if feature == WEBSOCKET else "the feature"
    return Finding(
        feature,
        None,
        f"{evidence} ({why}, not an answer about {about}; try again later)",
        stopped_by="server",
    )


#: how to give a key, added to a 401 or 403 that answered loopbench's placeholder key
KEY_HINT = (
    "give the endpoint's key with --api-key-env NAME (without it loopbench sends a placeholder key)"
)


def _without_hint(evidence: str) -> tuple[str, bool]:
    """``evidence`` without :data:`KEY_HINT`, and whether it had it: a table or a refusal of
    several rows says it once."""
    short = evidence.removesuffix(f"; {KEY_HINT}")
    return short, short != evidence


def refused(
    feature: str, url: str, status: int, message: str, *, placeholder_key: bool = False
) -> Finding:
    """An HTTP error answer to the request that checks ``feature``.

    For the request that asks whether an API is there at all, 404 and 405 say it is not:
    ``no Chat Completions API at URL: HTTP 404 …``.  ``placeholder_key``: the request went
    out with loopbench's placeholder key (the user gave none), so a 401 or 403 says how to
    give one; a key the user gave was not a forgotten option, and the hint would mislead.
    """
    api = API_OF.get(feature)
    if status in (400, 404) and _names_the_model(message):
        # vLLM and SGLang answer an unknown model with 404 on a route they do have: the API
        # may well be there, only not this model.
        return Finding(
            feature,
            None,
            f"{url} does not serve the model the probe named ({answered(status, message)}); "
            "give --model (or the scenario's model:) one of the server's models, listed by "
            "GET /models",
            stopped_by="model",
        )
    # Not "no": a gateway answers 401 and 403 before it routes, so the API may well be there.
    hint = f"; {KEY_HINT}" if placeholder_key else ""
    if status == UNAUTHORIZED:
        return Finding(
            feature,
            None,
            f"{url} refused the credentials ({answered(status, message)}){hint}",
            stopped_by="credentials",
        )
    if status == FORBIDDEN:
        return Finding(
            feature,
            None,
            f"{url} answered forbidden ({answered(status, message)}){hint}",
            stopped_by="forbidden",
        )
    if status in NO_ROUTE and api is not None and API_FEATURE[api] == feature:
        return Finding(feature, False, f"no {API_NAMES[api]} at {url}: {answered(status, message)}")
    return error_answer(feature, status, http_failure(url, status, message))


def error_answer(feature: str, status: int, evidence: str) -> Finding:
    """An error answer to a feature's check: "no", unless the server failed or was too busy."""
    return _not_finished(feature, evidence, server_state(status))


def _names_the_model(message: str) -> bool:
    """An error about the requested model ("The model `x` does not exist", "model_not_found")."""
    text = message.lower()
    return "model" in text and any(
        w in text for w in ("does not exist", "not found", "not_found", "unknown", "no such")
    )


def _not_sse(feature: str, url: str, status: int, content_type: str) -> Finding | None:
    media = content_type.split(";")[0].strip().lower() or "no content type"
    if media != "text/event-stream":
        return Finding(feature, False, f"POST {url} answered {status} {media}, not an SSE stream")
    return None


def _streamed(
    feature: str, url: str, status: int, content_type: str, reading: StreamReading, shown: str
) -> Finding:
    """An API's streamed answer: an SSE stream the API ends as it should (``shown``: what it
    held), else what it was instead."""
    not_sse = _not_sse(feature, url, status, content_type)
    if not_sse is not None:
        return not_sse
    if not reading.finished:
        return _not_finished(
            feature,
            f"POST {url} answered {status} text/event-stream, but {_ended(reading)}",
            reading.server_state,
        )
    return Finding(feature, True, f"POST {url} answered {status} text/event-stream: {shown}")


def judge_sse(url: str, status: int, content_type: str, reading: StreamReading) -> Finding:
    """``stream: true`` must come back as ``text/event-stream`` ending in a terminal event."""
    shown = f"{reading.events} events ending with {reading.terminal}"
    return _streamed(SSE, url, status, content_type, reading, shown)


def judge_chain(feature: str, where: str, first: StreamReading, second: StreamReading) -> Finding:
    """Was a request chained on ``first`` accepted, and did the server prepend the history?

    The second request repeats the first's input, so a server that ignored
    ``previous_response_id`` counts about as many input tokens as the first; one that
    honoured it counts at least the first's input and output more.
    """
    if first.response_id is None:
        return Finding(feature, None, f"{where}: the first response carried no id to chain on")
    if not second.finished:
        return _not_finished(
            feature,
            f"{where}: a request with previous_response_id was not served: {_ended(second)}",
            second.server_state,
        )
    a, b = first.input_tokens, second.input_tokens
    if a is None or b is None:
        return Finding(
            feature,
            None,
            f"{where}: previous_response_id was accepted, but without usage.input_tokens "
            "nothing shows whether the history was used",
        )
    history = a + (first.output_tokens or 0)
    if b >= history + 1:
        return Finding(
            feature,
            True,
            f"{where}: previous_response_id accepted and honoured: input_tokens {a} -> {b} "
            f"(history {history} + the new input)",
        )
    return Finding(
        feature,
        False,
        f"{where}: previous_response_id was accepted but ignored: input_tokens {a} -> {b}, "
        f"expected at least {history + 1} with the history",
    )


def ws_refused(url: str, status: int | None, reason: str) -> str:
    """The one line for a failed upgrade: ``no Responses API WebSocket mode at URL: …``;
    with a ``status``, ``reason`` is the message of its body (may be empty)."""
    if status is not None:
        return (
            f"no Responses API WebSocket mode at {url}: the upgrade was answered with "
            f"{answered(status, reason)}"
        )
    return f"no Responses API WebSocket mode at {url}: {reason}"


def judge_upgrade(
    url: str,
    status: int,
    message: str,
    *,
    placeholder_key: bool = False,
    key_accepted: bool = False,
) -> Finding:
    """An upgrade answered with HTTP ``status`` (``message``: its body's, "" for none).

    ``key_accepted``: HTTP requests with the same credentials were answered, so a 403 with
    nothing to say is a server without WebSocket mode (Starlette's answer to every upgrade
    on a route it does not serve as one), not a refused key.
    """
    if status in AUTH_REFUSED and not (status == FORBIDDEN and not message and key_accepted):
        return refused(WEBSOCKET, url, status, message, placeholder_key=placeholder_key)
    state = server_state(status)
    if state is not None:
        return not_an_answer(
            WEBSOCKET, f"the upgrade at {url} was answered with {answered(status, message)}", state
        )
    if status == FORBIDDEN:
        message = "with no body, while HTTP requests with the same key were answered"
    return Finding(WEBSOCKET, False, ws_refused(url, status, message))


def judge_ws(url: str, reading: StreamReading) -> Finding:
    if not reading.finished:
        return _not_finished(
            WEBSOCKET,
            f"{url} upgraded, but a response.create failed: {_ended(reading)}",
            reading.server_state,
        )
    return Finding(
        WEBSOCKET,
        True,
        f"{url} upgraded; response.create answered with {reading.events} events ending "
        f"with {reading.terminal}",
    )


def judge_warmup(reading: StreamReading) -> Finding:
    """``generate: false`` must complete with no output (docs/protocol.md §2.4)."""
    if not reading.finished:
        return _not_finished(
            WARMUP,
            f"a response.create with generate: false failed: {_ended(reading)}",
            reading.server_state,
        )
    items = len(reading.stream.output_items)
    if items or reading.stream.delta_events or (reading.output_tokens or 0) > 0:
        return Finding(
            WARMUP,
            False,
            f"generate: false was ignored: the response generated {items} "
            f"output items and {reading.output_tokens or 0} output tokens",
        )
    return Finding(
        WARMUP,
        True,
        f"generate: false ended with {reading.terminal}, no output, "
        f"input_tokens {reading.input_tokens}",
    )


def judge_lanes(reading: StreamReading, lane: str = PROBE_LANE) -> Finding:
    """A create on a named lane must echo its ``stream_id`` in every event."""
    if not reading.finished:
        return Finding(
            LANES, False, f"a response.create with stream_id {lane!r} failed: {_ended(reading)}"
        )
    if reading.stream_ids != {lane}:
        return Finding(
            LANES,
            False,
            f"stream_id {lane!r} was not echoed in every event (the events carried "
            f"{sorted(map(repr, reading.stream_ids))}): no lanes",
        )
    return Finding(LANES, True, f"stream_id {lane!r} echoed in all {reading.events} events")


def judge_chat(url: str, status: int, content_type: str, reading: StreamReading) -> Finding:
    """A streamed chat completion: chunks, a finish_reason, then ``data: [DONE]``."""
    end = "then data: [DONE]" if reading.done else "no data: [DONE]"
    shown = f"{reading.events} chunks, finish_reason {reading.reason}, {end}"
    return _streamed(CHAT, url, status, content_type, reading, shown)


def judge_chat_usage(reading: StreamReading) -> Finding:
    """``stream_options.include_usage`` must bring a chunk with the usage (what TTFT and
    token counts are compared on)."""
    if reading.usage is None:
        return Finding(
            CHAT_USAGE, False, "stream_options.include_usage was sent, but no chunk carried usage"
        )
    prompt = reading.prompt_tokens
    if prompt is None:
        return Finding(CHAT_USAGE, False, "a chunk carried usage, but without prompt_tokens")
    completion = reading.used("completion_tokens")
    return Finding(
        CHAT_USAGE,
        True,
        f"a chunk carried usage: prompt_tokens {prompt}, completion_tokens {completion}",
    )


def judge_chat_cached(reading: StreamReading) -> Finding:
    """Whether usage says how much of the prompt the server's prefix cache served."""
    if reading.usage is None:
        return not_checked(CHAT_CACHED, "no usage in the stream")
    cached = reading.cached_tokens
    if cached is None:
        return Finding(
            CHAT_CACHED,
            False,
            "usage carried no prompt_tokens_details.cached_tokens: cache hits cannot be counted",
        )
    return Finding(
        CHAT_CACHED,
        True,
        f"usage.prompt_tokens_details.cached_tokens reported: {cached} of "
        f"{reading.prompt_tokens} prompt tokens",
    )


def judge_chat_tools(url: str, status: int, content_type: str, got: StreamReading | str) -> Finding:
    """A request with one tool and ``tool_choice: "required"``: yes when a complete call came
    in two or more deltas.  A call that arrives whole in one delta is "no" (its turns have no
    tool-call stream to time), which a run still goes ahead with; a call cut off by the token
    limit cannot tell either way."""
    asked = 'a request with a tool and tool_choice "required"'
    if isinstance(got, str):
        return error_answer(
            CHAT_TOOLS, status, f"{asked} was refused: {http_failure(url, status, got)}"
        )
    not_sse = _not_sse(CHAT_TOOLS, url, status, content_type)
    if not_sse is not None:
        return not_sse
    if not got.finished:
        return _not_finished(CHAT_TOOLS, f"{asked} failed: {_ended(got)}", got.server_state)
    if not got.calls:
        return Finding(
            CHAT_TOOLS,
            False,
            f"{asked} was answered in text (finish_reason {got.reason}): no tool call was streamed",
        )
    call, end = got.calls[0], f"finish_reason {got.reason}"
    if got.reason in CHAT_CUT_SHORT:
        return Finding(
            CHAT_TOOLS,
            None,
            f"a call to {call.name} was cut off by {end} after {call.pieces} tool-call deltas: "
            f"no complete call within {PROBE_TOOL_MAX_TOKENS} tokens, so whether calls are "
            "streamed cannot be told",
        )
    if call.pieces < 2:
        return Finding(
            CHAT_TOOLS,
            False,
            f"a call to {call.name} arrived whole in one tool-call delta, {end}: "
            "not streamed (arrives whole)",
            runs_anyway=True,
        )
    return Finding(
        CHAT_TOOLS, True, f"a call to {call.name} streamed in {call.pieces} tool-call deltas, {end}"
    )


def judge_messages(url: str, status: int, content_type: str, reading: StreamReading) -> Finding:
    """A streamed message: ``message_start`` … ``message_stop``."""
    shown = (
        f"message_start ... message_stop in {reading.events} events, stop_reason {reading.reason}"
    )
    return _streamed(MESSAGES, url, status, content_type, reading, shown)


def judge_prompt_cache(
    url: str, first: tuple[int, StreamReading | str], second: tuple[int, StreamReading | str]
) -> Finding:
    """The same request twice, its long system prompt marked with ``cache_control``: the
    repeat must read the prompt from the cache (``cache_read_input_tokens``)."""
    for status, got in (first, second):
        if isinstance(got, str):
            return error_answer(
                MESSAGES_CACHE,
                status,
                f"a system prompt with cache_control was refused: {http_failure(url, status, got)}",
            )
        if not got.finished:
            return _not_finished(
                MESSAGES_CACHE,
                f"a system prompt with cache_control failed: {_ended(got)}",
                got.server_state,
            )
    a, b = first[1], second[1]
    assert isinstance(a, StreamReading) and isinstance(b, StreamReading)
    if "cache_read_input_tokens" not in (b.usage or {}):
        return Finding(
            MESSAGES_CACHE, False, "usage carried no cache_read_input_tokens: no prompt caching"
        )
    written = a.used("cache_creation_input_tokens") or 0
    read = b.used("cache_read_input_tokens") or 0
    total = sum(
        a.used(k) or 0
        for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    if read > 0:
        return Finding(
            MESSAGES_CACHE,
            True,
            f"a repeated {total}-token prompt marked with cache_control was read from the cache: "
            f"cache_creation_input_tokens {written}, then cache_read_input_tokens {read}",
        )
    if written > 0:
        return Finding(
            MESSAGES_CACHE,
            False,
            f"the prompt was written to the cache (cache_creation_input_tokens {written}), "
            "but the repeat read nothing from it (cache_read_input_tokens 0)",
        )
    return Finding(
        MESSAGES_CACHE,
        None,
        f"cache_control was accepted, but a {total}-token prompt was neither written nor read "
        "(the model may cache only longer prompts)",
    )


#: the statuses of a background response that has ended (docs/server.md, "Background mode")
BACKGROUND_DONE = ("completed", "incomplete", "failed", "cancelled")


def judge_background(
    url: str,
    status: int,
    created: dict[str, Any] | str,
    final: dict[str, Any] | str | None,
    polls: int,
) -> Finding:
    """``background: true``: answered at once (queued), then polled to its end with GET."""
    if isinstance(created, str):
        return error_answer(
            BACKGROUND,
            status,
            f"background: true was refused: {http_failure(url, status, created)}",
        )
    first = created.get("status")
    if created.get("background") is not True and first not in ("queued", "in_progress"):
        return Finding(
            BACKGROUND,
            False,
            f"background: true was ignored: the create answered a {first} response at once",
        )
    rid = created.get("id")
    where = f"GET /responses/{rid}"
    if final is None:
        return Finding(BACKGROUND, False, f"background: true answered {first}, but carried no id")
    if isinstance(final, str):
        return Finding(BACKGROUND, False, f"background: true answered {first}, but {final}")
    last = final.get("status")
    if last in ("completed", "incomplete"):
        return Finding(
            BACKGROUND,
            True,
            f"background: true answered {first}, then {last} after {polls} polls of {where}",
        )
    return Finding(
        BACKGROUND, False, f"background: true answered {first}, then {where} saw it {last}"
    )


def judge_compaction(url: str, status: int, got: dict[str, Any] | str) -> Finding:
    """``POST /responses/compact`` must answer a ``compaction`` item."""
    if isinstance(got, str):
        if status in NO_ROUTE:
            return Finding(COMPACTION, False, f"no compaction at {url}: {answered(status, got)}")
        return error_answer(COMPACTION, status, http_failure(url, status, got))
    output = got.get("output")
    items = [i for i in output if isinstance(i, dict)] if isinstance(output, list) else []
    item = next((i for i in items if i.get("type") == "compaction"), None)
    if item is None:
        kinds = sorted({str(i.get("type")) for i in items}) or ["nothing"]
        return Finding(
            COMPACTION,
            False,
            f"POST {url} answered {status}, but its output held {', '.join(kinds)}, "
            "no compaction item",
        )
    usage = got.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    content = item.get("encrypted_content")
    size = len(content) if isinstance(content, str) else 0
    return Finding(
        COMPACTION,
        True,
        f"POST {url} answered a compaction item ({size} characters of encrypted_content), "
        f"input_tokens {usage.get('input_tokens')}, output_tokens {usage.get('output_tokens')}",
    )


def judge_retrieve(
    url: str,
    response_id: str,
    got: tuple[int, dict[str, Any] | str],
    deleted: tuple[int, dict[str, Any] | str] | None,
) -> Finding:
    """``GET /responses/{id}`` answers the stored response; ``DELETE`` deletes it."""
    status, doc = got
    if isinstance(doc, str):
        return error_answer(RETRIEVE, status, f"GET {url} answered {answered(status, doc)}")
    if doc.get("id") != response_id:
        return Finding(RETRIEVE, False, f"GET {url} answered a response with id {doc.get('id')!r}")
    if deleted is None:
        return Finding(RETRIEVE, True, f"GET {url} answered the stored response")
    status, doc = deleted
    if isinstance(doc, str):
        return Finding(
            RETRIEVE,
            False,
            f"GET {url} answered the stored response, but DELETE answered {answered(status, doc)}",
        )
    if doc.get("deleted") is not True:
        return Finding(
            RETRIEVE,
            False,
            f"GET {url} answered the stored response, but DELETE did not say deleted: true",
        )
    return Finding(
        RETRIEVE, True, f"GET {url} answered the stored response; DELETE answered deleted: true"
    )


def not_checked(feature: str, why: str) -> Finding:
    return Finding(feature, None, f"not checked: {why}", checked=False)


def not_checked_after(feature: str, earlier: Finding, url: str, otherwise: str) -> Finding:
    """``feature`` not asked for because ``earlier`` (the check it builds on, at ``url``) did
    not pass: the cause that answer gave, ``otherwise`` (``no Chat Completions API``) only
    when the earlier answer was about the API and not about who asked."""
    why = otherwise
    if earlier.stopped_by is not None:
        why = STOPPED_BY[earlier.stopped_by].format(url=url)
    return not_checked(feature, why)


#: the probe table's width: evidence wraps under its row at this many columns
TABLE_WIDTH = 80


def _row_label(f: Finding) -> str:
    api = API_OF.get(f.feature)
    # an API's own row starts its group; its features are indented under it
    return f.label if api is None or API_FEATURE[api] == f.feature else f"  {f.label}"


def apis(findings: Sequence[Finding]) -> dict[str, Finding]:
    """The findings that say whether each API is there, for the APIs that were checked."""
    by_feature = {f.feature: f for f in findings}
    return {api: by_feature[f] for api, f in API_FEATURE.items() if f in by_feature}


def table(target: str, findings: Sequence[Finding], width: int = TABLE_WIDTH) -> str:
    """The probe's console table: one row per feature (grouped by API) with its answer,
    its evidence wrapped under it, so the table stays ``width`` columns wide."""
    label_width = max(len(_row_label(f)) for f in findings)
    lines = [f"probe of {target}"]
    found = apis(findings)
    if found:
        lines.append("APIs: " + ", ".join(f"{API_NAMES[a]} {f.answer}" for a, f in found.items()))
    lines.append(f"{'feature':<{label_width}}  answer (evidence below each row)")
    hinted = False
    for f in findings:
        api = API_OF.get(f.feature)
        if api is not None and API_FEATURE[api] == f.feature:
            lines.append("")
        lines.append(f"{_row_label(f):<{label_width}}  {f.answer}")
        evidence, had = _without_hint(f.evidence)
        hinted = hinted or had
        lines += textwrap.wrap(
            evidence,
            width,
            initial_indent="      ",
            subsequent_indent="      ",
            break_long_words=False,
            break_on_hyphens=False,
        )
    if hinted:  # once, not under every refused row
        lines += ["", *textwrap.wrap(f"{KEY_HINT[0].upper()}{KEY_HINT[1:]}.", width)]
    return "\n".join(lines)


def as_json(target: str, findings: Sequence[Finding]) -> dict[str, Any]:
    return {
        "target": target,
        "apis": {
            api: {"supported": f.supported, "answer": f.answer} for api, f in apis(findings).items()
        },
        "features": {
            f.feature: {
                "api": API_OF.get(f.feature),
                "supported": f.supported,
                "answer": f.answer,
                "evidence": f.evidence,
            }
            for f in findings
        },
    }
