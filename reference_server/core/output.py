"""What the simulated model answers: the output policy of docs/model.md.

Pure and seeded.  ``tool_choice`` decides between function calls and a text
answer; the length comes from the ``loopbench.output_tokens`` metadata hint,
then ``max_output_tokens``, then the server default.  Function-call arguments are
valid JSON that conforms to the tool's ``parameters`` schema (required
properties, types, enums), so real tool-dispatch code accepts them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import orjson

from harness.wire import events as ev
from harness.wire.tokens import CHARS_PER_TOKEN, count_tokens, token_pieces

HINT_OUTPUT_TOKENS = "loopbench.output_tokens"
HINT_TOOL_CALLS = "loopbench.tool_calls"
HINT_PARALLEL_CALLS = "loopbench.parallel_calls"
# Hints are clamped so that no metadata value can make one response unboundedly large:
# the output bound is the one validation.py puts on max_output_tokens.
MAX_HINT_OUTPUT_TOKENS = 1_000_000
MAX_PARALLEL_CALLS = 128
# Schema-driven arguments: arrays at most this long, nested at most this deep.
MAX_SAMPLED_ITEMS = 64
MAX_SAMPLED_DEPTH = 8


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

    @property
    def output_tokens(self) -> int:
        return self.text_tokens + sum(c.tokens for c in self.calls)


def _int_hint(metadata: dict[str, str], key: str, limit: int | None = None) -> int | None:
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


def _bound(schema: dict[str, Any], key: str, default: float) -> float:
    """A numeric schema keyword, or ``default`` when it is missing, not a number or not finite."""
    value = schema.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    if not -1e15 < value < 1e15:  # also false for NaN
        return default
    return float(value)


def _sample_value(schema: dict[str, Any], rng: random.Random, depth: int = 0) -> Any:
    if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"]:
        return rng.choice(schema["enum"])
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "integer":
        lo, hi = sorted((_bound(schema, "minimum", 0), _bound(schema, "maximum", 100)))
        return rng.randint(int(lo), int(hi))
    if kind == "number":
        return round(rng.uniform(_bound(schema, "minimum", 0), _bound(schema, "maximum", 100)), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        raw_items = schema.get("items")
        items: dict[str, Any] = raw_items if isinstance(raw_items, dict) else {"type": "string"}
        if depth >= MAX_SAMPLED_DEPTH:
            return []
        n = max(0, min(MAX_SAMPLED_ITEMS, int(_bound(schema, "minItems", 1))))
        return [_sample_value(items, rng, depth + 1) for _ in range(n)]
    if kind == "object" and depth < 4:
        return _sample_object(schema, rng, depth + 1)
    if kind == "null":
        return None
    return "".join(token_pieces(2, rng)).strip()


def _sample_object(schema: dict[str, Any], rng: random.Random, depth: int = 0) -> dict[str, Any]:
    raw_props = schema.get("properties")
    props: dict[str, Any] = raw_props if isinstance(raw_props, dict) else {}
    raw_required = schema.get("required")
    required: list[Any] = raw_required if isinstance(raw_required, list) else list(props)
    out: dict[str, Any] = {}
    for name in required:
        sub = props.get(name, {"type": "string"})
        out[name] = _sample_value(sub if isinstance(sub, dict) else {"type": "string"}, rng, depth)
    return out


def _padding_key(schema: dict[str, Any], args: dict[str, Any]) -> str | None:
    """A free-text string property we may lengthen without breaking the schema."""
    raw_props = schema.get("properties")
    props: dict[str, Any] = raw_props if isinstance(raw_props, dict) else {}
    for name, sub in props.items():
        free_text = isinstance(sub, dict) and sub.get("type") == "string" and "enum" not in sub
        if free_text and "const" not in sub and name in args:
            return str(name)
    if not props and schema.get("additionalProperties", True) is not False:
        return "content"
    return None


def make_arguments(tool: dict[str, Any], n_tokens: int, rng: random.Random) -> str:
    """JSON arguments conforming to ``tool['parameters']``, close to ``n_tokens`` tokens long."""
    raw_schema = tool.get("parameters")
    schema: dict[str, Any] = raw_schema if isinstance(raw_schema, dict) else {}
    args = _sample_object(schema, rng)
    base = orjson.dumps(args).decode()
    key = _padding_key(schema, args)
    target_chars = n_tokens * CHARS_PER_TOKEN
    if key is not None and len(base) < target_chars:
        current = args.get(key, "")
        current_s = current if isinstance(current, str) else ""
        missing_tokens = (target_chars - len(base)) // CHARS_PER_TOKEN
        args[key] = current_s + "".join(token_pieces(missing_tokens, rng))
        base = orjson.dumps(args).decode()
    return base


def plan_output(
    *,
    tools: list[dict[str, Any]],
    tool_choice: Any,
    parallel_tool_calls: bool,
    metadata: dict[str, str],
    max_output_tokens: int | None,
    chain_function_calls: int,
    default_output_tokens: int,
    default_auto_tool_calls: int,
    rng: random.Random,
) -> OutputPlan:
    """Decide this response's output.  ``chain_function_calls`` counts calls already made in the chain."""
    function_tools = [t for t in tools if t.get("type") == "function"]
    hint = _int_hint(metadata, HINT_OUTPUT_TOKENS, MAX_HINT_OUTPUT_TOKENS)
    want = hint if hint is not None else (max_output_tokens or default_output_tokens)
    want = max(1, want)
    limit = max_output_tokens if max_output_tokens is not None else None

    call: bool
    chosen: list[dict[str, Any]] = function_tools
    if isinstance(tool_choice, dict):
        name = tool_choice.get("name")
        chosen = [t for t in function_tools if t.get("name") == name] or function_tools
        call = bool(chosen)
    elif tool_choice == "required":
        call = bool(function_tools)
    elif tool_choice == "none":
        call = False
    else:  # auto: a scripted agent makes K calls along the chain, then answers
        k = _int_hint(metadata, HINT_TOOL_CALLS)
        k = default_auto_tool_calls if k is None else k
        call = bool(function_tools) and chain_function_calls < k

    if not call:
        tokens = want if limit is None else min(want, limit)
        return OutputPlan((), tokens, truncated=limit is not None and want > limit)

    n_calls = 1
    if parallel_tool_calls:
        n_calls = max(1, _int_hint(metadata, HINT_PARALLEL_CALLS, MAX_PARALLEL_CALLS) or 1)
    per_call = max(1, want // n_calls)
    calls: list[PlannedCall] = []
    budget = limit
    for _ in range(n_calls):
        tool = rng.choice(chosen)
        args = make_arguments(tool, per_call, rng)
        toks = count_tokens(args)
        if budget is not None and toks > budget:
            # The call would be cut mid-JSON: the response ends incomplete without it.
            return OutputPlan(tuple(calls), 0, truncated=True)
        if budget is not None:
            budget -= toks
        calls.append(PlannedCall(str(tool.get("name")), args, toks))
    return OutputPlan(tuple(calls), 0, truncated=False)


class OutputCursor:
    """Turns "k more tokens are due" into delta events walking through the planned items."""

    def __init__(self, builder: ev.ResponseBuilder, plan: OutputPlan, rng: random.Random) -> None:
        self.b = builder
        self.truncated = plan.truncated
        self.segments: list[tuple[str, str, list[str]]] = []  # (kind, name, pieces)
        for call in plan.calls:
            text = call.arguments
            pieces = [text[i : i + CHARS_PER_TOKEN] for i in range(0, len(text), CHARS_PER_TOKEN)]
            self.segments.append(("call", call.name, pieces))
        if plan.text_tokens:
            self.segments.append(("text", "", token_pieces(plan.text_tokens, rng)))
        self.rng = rng
        self.seg = 0
        self.pos = 0
        self.open = False

    def emit(self, k: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while k > 0 and self.seg < len(self.segments):
            kind, name, pieces = self.segments[self.seg]
            if not self.open:
                if kind == "call":
                    out.extend(self.b.begin_function_call(name, ev.new_id("call", self.rng)))
                else:
                    out.extend(self.b.begin_message())
                self.open = True
            take = min(k, len(pieces) - self.pos)
            chunk = "".join(pieces[self.pos : self.pos + take])
            self.pos += take
            k -= take
            if chunk:
                out.append(
                    self.b.arguments_delta(chunk) if kind == "call" else self.b.text_delta(chunk)
                )
            if self.pos >= len(pieces):
                if kind == "call":
                    out.extend(self.b.end_function_call())
                else:
                    # A message cut by max_output_tokens is itself incomplete.
                    out.extend(self.b.end_message("incomplete" if self.truncated else "completed"))
                self.seg += 1
                self.pos = 0
                self.open = False
        return out

    def finish(self) -> list[dict[str, Any]]:
        """Close whatever is still open (the engine emitted fewer tokens than planned)."""
        out: list[dict[str, Any]] = []
        while self.seg < len(self.segments):
            out.extend(self.emit(len(self.segments[self.seg][2]) - self.pos or 1))
        return out
