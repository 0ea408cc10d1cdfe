"""What ``loopbench probe`` asks an endpoint and how it judges the answers (sans I/O).

The asyncio edge (:mod:`harness.run.probe`) sends the requests built here and hands
back what came: a status, a content type, the decoded events.  Every verdict is a
:class:`Finding` with its evidence in one human sentence, so a refused run and the
probe table say the same thing.  Which features a transport needs is read from its
:class:`~harness.wire.transports.TransportSpec`, never from its name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.client.stream import ResponseStream
from harness.wire.errors import LoopbenchError
from harness.wire.transports import TransportSpec

REACHABLE = "reachable"
SSE = "sse"
CHAINING = "chaining"
WEBSOCKET = "websocket"
WS_CHAINING = "ws_chaining"
WARMUP = "warmup"
LANES = "lanes"

#: every feature the probe checks, in the order the table shows them, with its label
FEATURES: tuple[tuple[str, str], ...] = (
    (REACHABLE, "reachable (TCP/TLS connect)"),
    (SSE, "SSE streaming (POST /responses)"),
    (CHAINING, "store + previous_response_id (HTTP)"),
    (WEBSOCKET, "WebSocket mode"),
    (WS_CHAINING, "previous_response_id on a WebSocket"),
    (WARMUP, "generate: false (warm-up)"),
    (LANES, "lanes (stream_id)"),
)
LABELS: dict[str, str] = dict(FEATURES)

#: what every probe request asks for: a few tokens, so probing costs next to nothing
#: (16 is the smallest max_output_tokens some hosted endpoints accept)
PROBE_INPUT = "loopbench probe: answer with one short word."
PROBE_MAX_OUTPUT_TOKENS = 16
PROBE_LANE = "loopbench-probe"


@dataclass(frozen=True, slots=True)
class Finding:
    """One row of the probe table: ``supported`` is None when it could not be told."""

    feature: str
    supported: bool | None
    evidence: str
    #: False when an earlier finding made this check pointless (its answer is "-")
    checked: bool = True

    @property
    def answer(self) -> str:
        if not self.checked:
            return "-"
        return {True: "yes", False: "no", None: "unknown"}[self.supported]

    @property
    def label(self) -> str:
        return LABELS[self.feature]


def needed_features(spec: TransportSpec) -> tuple[str, ...]:
    """What an endpoint must support for ``spec`` to run against it."""
    if spec.websocket:
        return (REACHABLE, WEBSOCKET, WS_CHAINING) if spec.chained else (REACHABLE, WEBSOCKET)
    return (REACHABLE, SSE, CHAINING) if spec.chained else (REACHABLE, SSE)


def features_for(specs: Iterable[TransportSpec]) -> list[str]:
    """The union of :func:`needed_features`, in table order (each checked once per run)."""
    wanted = {f for spec in specs for f in needed_features(spec)}
    return [f for f, _ in FEATURES if f in wanted]


def refusal(findings: Sequence[Finding], specs: Sequence[TransportSpec], target: str) -> str | None:
    """The one-line reason not to run ``specs`` against ``target``, or None.

    Only a feature known to be missing refuses; "unknown" (e.g. no usage to compare)
    lets the run go ahead, as the measurement itself will show.
    """
    by_feature = {f.feature: f for f in findings}
    reach = by_feature.get(REACHABLE)
    if reach is not None and reach.supported is False:
        return f"target {target} is unreachable: {reach.evidence}"
    for spec in specs:
        for feature in needed_features(spec):
            found = by_feature.get(feature)
            if found is not None and found.supported is False:
                return f"transport {spec.name} cannot run against {target}: {found.evidence}"
    return None


# -- requests -------------------------------------------------------------------------------


def http_create(
    model: str, *, store: bool, previous_response_id: str | None = None
) -> dict[str, Any]:
    """A tiny streamed ``POST /responses`` body."""
    body: dict[str, Any] = {
        "model": model,
        "input": PROBE_INPUT,
        "stream": True,
        "store": store,
        "max_output_tokens": PROBE_MAX_OUTPUT_TOKENS,
    }
    if previous_response_id is not None:
        body["previous_response_id"] = previous_response_id
    return body


def ws_create(
    model: str,
    *,
    previous_response_id: str | None = None,
    generate: bool = True,
    stream_id: str | None = None,
) -> dict[str, Any]:
    """A tiny ``response.create``; ``generate``/``stream_id`` only when they are what is probed."""
    body: dict[str, Any] = {
        "type": "response.create",
        "model": model,
        "input": PROBE_INPUT,
        "store": False,
        "max_output_tokens": PROBE_MAX_OUTPUT_TOKENS,
    }
    if previous_response_id is not None:
        body["previous_response_id"] = previous_response_id
    if not generate:
        body["generate"] = False
    if stream_id is not None:
        body["stream_id"] = stream_id
    return body


# -- reading answers ------------------------------------------------------------------------


@dataclass(slots=True)
class StreamReading:
    """What one response's events showed, read through the client's own state machine."""

    events: int = 0
    #: the terminal event's type (``response.completed`` …), None if the stream did not end
    terminal: str | None = None
    response_id: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    output_items: int = 0
    deltas: int = 0
    #: an ``error`` event's or a protocol violation's text
    problem: str | None = None
    #: the ``stream_id`` values the events carried (``None`` for events without one)
    stream_ids: set[str | None] = field(default_factory=set)

    @property
    def finished(self) -> bool:
        return self.terminal in ("response.completed", "response.incomplete")


def read_stream(events: Sequence[dict[str, Any]]) -> StreamReading:
    """Judge one response's events with :class:`ResponseStream` (ordering, usage, output)."""
    out = StreamReading()
    stream = ResponseStream(sent_ns=0)
    for i, event in enumerate(events, start=1):
        out.events += 1
        sid = event.get("stream_id")
        out.stream_ids.add(sid if isinstance(sid, str) else None)
        try:
            stream.feed(event, i)
        except LoopbenchError as exc:
            out.problem = f"the events broke the protocol: {exc}"
            break
        if stream.done:
            out.terminal = str(event.get("type"))
            break
    out.response_id = stream.response_id
    usage = stream.usage or {}
    if isinstance(usage.get("input_tokens"), int):
        out.input_tokens = usage["input_tokens"]
    if isinstance(usage.get("output_tokens"), int):
        out.output_tokens = usage["output_tokens"]
    out.output_items = len(stream.output_items)
    out.deltas = stream.delta_events
    if out.problem is None and stream.error_message is not None:
        code = f" ({stream.error_code})" if stream.error_code else ""
        out.problem = f"the server answered with an error{code}: {stream.error_message}"
    return out


def _ended(reading: StreamReading) -> str:
    if reading.problem:
        return reading.problem
    if reading.terminal is None:
        return f"the stream ended after {reading.events} events without response.completed"
    return f"the response ended with {reading.terminal}"


# -- verdicts -------------------------------------------------------------------------------


def judge_connect(authority: str, error: str | None, connect_ms: float) -> Finding:
    if error is not None:
        return Finding(REACHABLE, False, f"connect to {authority}: {error}")
    return Finding(REACHABLE, True, f"connected to {authority} in {connect_ms:.1f} ms")


def http_failure(url: str, status: int, message: str) -> str:
    """``POST url answered HTTP 500: …`` (the server's error message when it sent one)."""
    # the error parser already says "HTTP 500 with the body …" for a body that is not JSON
    message = message.removeprefix(f"HTTP {status} ")
    detail = (
        "" if not message else (f" {message}" if message.startswith("with ") else f": {message}")
    )
    return f"POST {url} answered HTTP {status}{detail}"


def judge_sse(url: str, status: int, content_type: str, reading: StreamReading) -> Finding:
    """``stream: true`` must come back as ``text/event-stream`` ending in a terminal event."""
    media = content_type.split(";")[0].strip().lower() or "no content type"
    if media != "text/event-stream":
        return Finding(SSE, False, f"POST {url} answered {status} {media}, not an SSE stream")
    if not reading.finished:
        return Finding(
            SSE, False, f"POST {url} answered {status} text/event-stream, but {_ended(reading)}"
        )
    return Finding(
        SSE,
        True,
        f"POST {url} answered {status} text/event-stream: {reading.events} events ending "
        f"with {reading.terminal}",
    )


def judge_chain(feature: str, where: str, first: StreamReading, second: StreamReading) -> Finding:
    """Was a request chained on ``first`` accepted, and did the server prepend the history?

    The second request repeats the first's input, so a server that ignored
    ``previous_response_id`` counts about as many input tokens as the first; one that
    honoured it counts at least the first's input and output more.
    """
    if first.response_id is None:
        return Finding(feature, None, f"{where}: the first response carried no id to chain on")
    if not second.finished:
        return Finding(
            feature,
            False,
            f"{where}: a request with previous_response_id was not served: {_ended(second)}",
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
    """The one line for a failed upgrade: ``no WebSocket mode at URL: …``."""
    if status is not None:
        return f"no WebSocket mode at {url}: the upgrade was answered with HTTP {status}"
    return f"no WebSocket mode at {url}: {reason}"


def judge_ws(url: str, reading: StreamReading) -> Finding:
    if not reading.finished:
        return Finding(
            WEBSOCKET, False, f"{url} upgraded, but a response.create failed: {_ended(reading)}"
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
        return Finding(
            WARMUP, False, f"a response.create with generate: false failed: {_ended(reading)}"
        )
    if reading.output_items or reading.deltas or (reading.output_tokens or 0) > 0:
        return Finding(
            WARMUP,
            False,
            f"generate: false was ignored: the response generated {reading.output_items} "
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


def not_checked(feature: str, why: str) -> Finding:
    return Finding(feature, None, f"not checked: {why}", checked=False)


def table(target: str, findings: Sequence[Finding]) -> str:
    """The probe's console table: feature, answer, evidence."""
    width = max(len(f.label) for f in findings)
    lines = [f"probe of {target}", f"{'feature':<{width}}  {'answer':<7}  evidence"]
    lines += [f"{f.label:<{width}}  {f.answer:<7}  {f.evidence}" for f in findings]
    return "\n".join(lines)


def as_json(target: str, findings: Sequence[Finding]) -> dict[str, Any]:
    return {
        "target": target,
        "features": {
            f.feature: {"supported": f.supported, "answer": f.answer, "evidence": f.evidence}
            for f in findings
        },
    }
