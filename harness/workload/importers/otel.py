"""OpenTelemetry GenAI spans (OTLP JSON) → loopbench trace rollouts.

An OTLP exporter writes ``{"resourceSpans": [{"scopeSpans": [{"spans": [...]}]}]}``, one
such object per file or one per line (the collector's file exporter).  Model calls
(``chat``, ``text_completion``, ``generate_content``, or spans reporting
``gen_ai.usage.*_tokens``) are the turns, ``execute_tool`` spans the tool calls, an
``invoke_agent`` under another agent a sub-agent (trace v2): docs/traces.md has the
mapping.  Parsing is pure over text; only :func:`import_otel_files` reads files.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from harness.workload.importers.common import SessionImportError, import_files, split_tokens
from harness.workload.trace import TraceRollout, TraceSubagent, TraceToolCall, TraceTurn

MODEL_OPERATIONS = ("chat", "text_completion", "generate_content")
_INPUT_KEYS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
_OUTPUT_KEYS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
_CACHED_KEYS = ("gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.input_tokens.cached")
_REASONING_KEYS = ("gen_ai.usage.reasoning.output_tokens", "gen_ai.usage.output_tokens.reasoning")


@dataclass(slots=True)
class _Span:
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    attrs: dict[str, Any]
    where: str  # for error messages

    @property
    def operation(self) -> str:
        return str(self.attrs.get("gen_ai.operation.name", ""))

    @property
    def is_model(self) -> bool:
        return self.operation in MODEL_OPERATIONS or (
            self.operation not in ("invoke_agent", "execute_tool", "create_agent")
            and any(k in self.attrs for k in _INPUT_KEYS + _OUTPUT_KEYS)
        )

    def usage(self, keys: tuple[str, ...]) -> int | None:
        for key in keys:
            value = self.attrs.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
                return int(value)
        return None


@dataclass(slots=True)
class _Conversation:
    key: str
    agent: _Span | None
    models: list[_Span] = field(default_factory=list)
    calls: list[_Span] = field(default_factory=list)  # execute_tool and direct sub-agent spans
    parent: str | None = None  # key of the conversation a sub-agent ran under
    parent_call: str = ""  # span id of the parent's call it answered
    fork_at: tuple[int, int] | None = None  # (turn, call index) of that call in the parent


def _attr_value(value: Any) -> Any:
    if not isinstance(value, dict):
        return None
    for kind in ("stringValue", "boolValue", "doubleValue"):
        if kind in value:
            return value[kind]
    if "intValue" in value:
        raw = value["intValue"]
        # OTLP JSON writes 64-bit integers as strings.
        try:
            return int(raw)
        except (TypeError, ValueError):
            return None
    return None


def _nanos(span: dict[str, Any], key: str, where: str, source: str) -> int:
    raw = span.get(key)
    value = -1
    # A string in OTLP JSON, a number from some exporters.
    if isinstance(raw, str | int) and not isinstance(raw, bool):
        with contextlib.suppress(ValueError):
            value = int(raw)
    if value < 0:
        raise SessionImportError(
            f"{source}: {where}.{key}: expected nanoseconds since the epoch, got {raw!r}"
        )
    return value


def _spans_of(doc: Any, source: str, where: str) -> list[_Span]:
    if not isinstance(doc, dict) or not isinstance(doc.get("resourceSpans"), list):
        raise SessionImportError(
            f"{source}: {where}expected an OTLP JSON object with resourceSpans, got "
            f"{orjson.dumps(doc).decode()[:60]}"
        )
    out: list[_Span] = []
    for r, resource in enumerate(doc["resourceSpans"]):
        scopes = resource.get("scopeSpans", []) if isinstance(resource, dict) else None
        if not isinstance(scopes, list):
            raise SessionImportError(
                f"{source}: {where}resourceSpans[{r}].scopeSpans: expected a list of scopes"
            )
        for s, scope in enumerate(scopes):
            spans = scope.get("spans", []) if isinstance(scope, dict) else None
            if not isinstance(spans, list):
                raise SessionImportError(
                    f"{source}: {where}resourceSpans[{r}].scopeSpans[{s}].spans: expected a "
                    "list of spans"
                )
            for k, span in enumerate(spans):
                at = f"{where}resourceSpans[{r}].scopeSpans[{s}].spans[{k}]"
                out.append(_span(span, at, source))
    return out


def _span(span: Any, at: str, source: str) -> _Span:
    if not isinstance(span, dict):
        raise SessionImportError(f"{source}: {at}: expected a span object")
    for key in ("traceId", "spanId"):
        if not isinstance(span.get(key), str) or not span[key]:
            raise SessionImportError(
                f"{source}: {at}.{key}: expected a hex id string, got {span.get(key)!r}"
            )
    start = _nanos(span, "startTimeUnixNano", at, source)
    end = _nanos(span, "endTimeUnixNano", at, source)
    if end < start:
        raise SessionImportError(
            f"{source}: {at}.endTimeUnixNano: expected a time at or after startTimeUnixNano "
            f"({start}), got {end}"
        )
    attrs: dict[str, Any] = {}
    raw_attrs = span.get("attributes", [])
    if not isinstance(raw_attrs, list):
        raise SessionImportError(f"{source}: {at}.attributes: expected a list of key/value pairs")
    for item in raw_attrs:
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            attrs[item["key"]] = _attr_value(item.get("value"))
    return _Span(
        trace_id=span["traceId"],
        span_id=span["spanId"],
        parent_id=str(span.get("parentSpanId") or ""),
        start_ns=start,
        end_ns=end,
        attrs=attrs,
        where=at,
    )


def _documents(text: str, source: str) -> list[_Span]:
    lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not lines:
        return []
    try:
        first = orjson.loads(lines[0][1])
    except orjson.JSONDecodeError:
        first = None
    if len(lines) > 1 and isinstance(first, dict):
        # One export per line (the collector's file exporter).
        spans: list[_Span] = []
        for n, line in lines:
            try:
                doc = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise SessionImportError(f"{source}: line {n}: invalid JSON: {exc}") from None
            spans += _spans_of(doc, source, f"line {n}: ")
        return spans
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise SessionImportError(f"{source}: invalid JSON: {exc}") from None
    return _spans_of(doc, source, "")


def _conversations(spans: list[_Span]) -> list[_Conversation]:
    by_id = {(s.trace_id, s.span_id): s for s in spans}

    def ancestors(span: _Span) -> list[_Span]:
        chain: list[_Span] = []
        seen = {span.span_id}
        parent = by_id.get((span.trace_id, span.parent_id))
        while parent is not None and parent.span_id not in seen:
            chain.append(parent)
            seen.add(parent.span_id)
            parent = by_id.get((parent.trace_id, parent.parent_id))
        return chain

    def agent_of(chain: list[_Span]) -> _Span | None:
        return next((a for a in chain if a.operation == "invoke_agent"), None)

    convs: dict[str, _Conversation] = {}

    def conv_for(span: _Span, chain: list[_Span]) -> _Conversation:
        agent = agent_of(chain)
        if agent is not None:
            key = f"{agent.trace_id}:{agent.span_id}"
        elif span.attrs.get("gen_ai.conversation.id"):
            key = str(span.attrs["gen_ai.conversation.id"])
        else:
            key = span.trace_id
        if key not in convs:
            convs[key] = _Conversation(key=key, agent=agent)
        return convs[key]

    for span in sorted(spans, key=lambda s: (s.start_ns, s.end_ns)):
        chain = ancestors(span)
        if span.is_model:
            conv_for(span, chain).models.append(span)
        elif span.operation == "execute_tool":
            conv_for(span, chain).calls.append(span)
        elif span.operation == "invoke_agent" and agent_of(chain) is not None:
            parent = conv_for(span, chain)
            child = conv_for(span, [span])
            child.parent = parent.key
            # A sub-agent started by a tool span is that tool call; one started directly
            # by the agent is a call of its own in the parent's turn.
            upto_agent = chain[: chain.index(agent_of(chain))]  # type: ignore[arg-type]
            tool = next((a for a in upto_agent if a.operation == "execute_tool"), None)
            if tool is None:
                parent.calls.append(span)
                child.parent_call = span.span_id
            else:
                child.parent_call = tool.span_id
    return [c for c in convs.values() if c.models]


def _calls_by_turn(conv: _Conversation) -> tuple[list[list[_Span]], int]:
    """Each model call's tool calls (those that started after it, before the next), and how
    many ran before the first model call (nothing asked for them)."""
    calls_of: list[list[_Span]] = [[] for _ in conv.models]
    early = 0
    for call in conv.calls:
        owner = None
        for i, model in enumerate(conv.models):
            if model.start_ns <= call.start_ns:
                owner = i
        if owner is None:
            early += 1
        else:
            calls_of[owner].append(call)
    return calls_of, early


def _rollout(conv: _Conversation, label: str) -> TraceRollout:
    models = conv.models
    calls_of, early = _calls_by_turn(conv)
    turns: list[TraceTurn] = []
    synthetic = 0
    usage_complete = True
    think_ms = 0.0
    for i, model in enumerate(models):
        output = model.usage(_OUTPUT_KEYS)
        usage_complete &= output is not None and model.usage(_INPUT_KEYS) is not None
        calls = calls_of[i]
        next_think_ms = 0.0
        if i == len(models) - 1:
            latencies = [(c.end_ns - c.start_ns) / 1e6 for c in calls]
            returned = [0] * len(calls)
        else:
            nxt = models[i + 1]
            this_in, next_in = model.usage(_INPUT_KEYS), nxt.usage(_INPUT_KEYS)
            grown = 0
            if this_in is not None and next_in is not None:
                grown = max(0, next_in - this_in - (output or 0))
            if calls:
                latencies = [(c.end_ns - c.start_ns) / 1e6 for c in calls]
                ready_ns = max(model.end_ns, *(c.end_ns for c in calls))
            else:
                # Another model call followed without a tool span: the client's time in between.
                synthetic += 1
                latencies = [max(0.0, (nxt.start_ns - model.end_ns) / 1e6)]
                ready_ns = nxt.start_ns
            returned = split_tokens(grown, [1] * len(latencies))
            # Client time between the last tool's end and the next request.
            next_think_ms = round(max(0.0, (nxt.start_ns - ready_ns) / 1e6), 3)
        tool_calls = [
            TraceToolCall(latency_ms=round(lat, 3), output_tokens=tokens)
            for lat, tokens in zip(latencies, returned, strict=True)
        ]
        turns.append(
            TraceTurn(
                output_tokens=max(1, output or 0),
                tool_calls=tool_calls,
                think_ms=think_ms,
                input_tokens=model.usage(_INPUT_KEYS),
                cached_tokens=model.usage(_CACHED_KEYS),
                reasoning_tokens=model.usage(_REASONING_KEYS) or 0,
            )
        )
        think_ms = next_think_ms
    truncated = bool(turns[-1].tool_calls)
    if truncated:
        turns.append(TraceTurn(output_tokens=1))
    first_in = models[0].usage(_INPUT_KEYS)
    meta: dict[str, Any] = {
        "source": "otel",
        "file": label,
        "trace_id": models[0].trace_id,
        "usage": usage_complete,
    }
    if conv.agent is not None:
        name = conv.agent.attrs.get("gen_ai.agent.name")
        if name:
            meta["agent"] = str(name)
    if conv.parent is not None and conv.fork_at is None:
        # No call of the parent's turns holds it (it started before the parent's first
        # model call): kept as a conversation of its own, naming the parent.
        meta["subagent_of"] = conv.parent
    counts = {"tool_calls_from_gaps": synthetic, "tools_before_first_call": early}
    meta |= {k: n for k, n in counts.items() if n} | ({"truncated": True} if truncated else {})
    model_name = models[0].attrs.get("gen_ai.request.model") or models[0].attrs.get(
        "gen_ai.response.model"
    )
    if model_name:
        meta["model"] = str(model_name)
    return TraceRollout(
        type="rollout",
        id=conv.key,
        system_tokens=0,
        user_prompt_tokens=max(1, first_in or 0),
        turns=turns,
        meta=meta,
    )


def parse_otel(text: str, source: str = "<otel>") -> list[TraceRollout]:
    """The rollouts of one OTLP JSON file (one export, or one export per line)."""
    convs = _conversations(_documents(text, source))
    where: dict[str, tuple[int, int]] = {}
    for conv in convs:
        for turn, calls in enumerate(_calls_by_turn(conv)[0]):
            for index, call in enumerate(calls):
                where[call.span_id] = (turn, index)
    for conv in convs:
        conv.fork_at = where.get(conv.parent_call) if conv.parent_call else None
    label = os.path.basename(source)
    rollouts = {c.key: _rollout(c, label) for c in convs}
    children: dict[str, list[_Conversation]] = {}
    for conv in convs:
        if conv.parent in rollouts and conv.fork_at is not None:
            children.setdefault(conv.parent, []).append(conv)

    def nested(key: str) -> list[TraceTurn]:
        turns = list(rollouts[key].turns)
        for child in children.get(key, []):
            turn_i, call_i = child.fork_at  # type: ignore[misc]
            turn = turns[turn_i]
            sub = rollouts[child.key]
            result = turn.tool_calls[call_i].output_tokens
            calls = [
                c.model_copy(update={"subagent": len(turn.subagents)}) if j == call_i else c
                for j, c in enumerate(turn.tool_calls)
            ]
            subagent = TraceSubagent(
                id=sub.id,
                system_tokens=sub.system_tokens,
                user_prompt_tokens=sub.user_prompt_tokens,
                # What the parent's call returned is what the sub-agent answered.
                result_tokens=result,
                turns=nested(child.key),
                meta={k: v for k, v in sub.meta.items() if k not in ("source", "file")},
            )
            turns[turn_i] = TraceTurn.model_validate(
                {**turn.model_dump(), "tool_calls": [c.model_dump() for c in calls]}
                | {"subagents": [s.model_dump() for s in turn.subagents] + [subagent.model_dump()]}
            )
        return turns

    nested_keys = {c.key for kids in children.values() for c in kids}
    out = []
    for conv in convs:
        if conv.key in nested_keys:
            continue
        rollout = rollouts[conv.key]
        if conv.key in children:
            rollout = rollout.model_copy(update={"turns": nested(conv.key)})
        out.append(rollout)
    return out


def import_otel_files(paths: Sequence[str]) -> list[TraceRollout]:
    """Every conversation of every file, in file order (spans do not join across files)."""
    return import_files(paths, lambda fh, path: parse_otel(fh.read(), path), "JSON")
