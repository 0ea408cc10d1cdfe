"""Recorded agent sessions: the generic JSONL trace format (docs/traces.md).

A trace file holds one JSON object per line: an optional header
``{"type": "trace", "version": 1, ...}`` and then one ``{"type": "rollout",
...}`` per recorded task, each with its turns (model calls) and, per turn, the
tool calls the client ran after it.  A scenario with ``rollout.trace: FILE``
replays these rollouts instead of drawing them from distributions, so every
transport sends the same recorded work (paired, as with generated rollouts).

Parsing is pure (text in, models out); :func:`read_trace` is the one
file-reading helper, like :func:`~harness.workload.scenario.load_scenario`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import orjson
from pydantic import Field, ValidationError
from pydantic import model_validator as _model_validator

from harness.wire.errors import ScenarioError
from harness.workload.distributions import StrictModel, invalid
from harness.workload.jsonl import json_lines
from harness.workload.plan import RolloutPlan, TurnPlan
from harness.workload.scenario import describe_error

__all__ = [
    "TRACE_VERSION",
    "TraceHeader",
    "TraceRollout",
    "TraceToolCall",
    "TraceTurn",
    "dump_trace",
    "parse_trace",
    "read_trace",
    "resolve_trace_path",
    "trace_plan",
]

TRACE_VERSION: Literal[1] = 1


class TraceToolCall(StrictModel):
    """One tool the client ran: how long it took and how many tokens it returned."""

    latency_ms: float = Field(ge=0.0)
    output_tokens: int = Field(ge=0)


class TraceTurn(StrictModel):
    """One model call: its output tokens and the tool calls it asked for (none: final answer)."""

    output_tokens: int = Field(ge=1)
    tool_calls: list[TraceToolCall] = Field(default_factory=list)
    think_ms: float = Field(default=0.0, ge=0.0)


class TraceRollout(StrictModel):
    """One recorded task, from the prompt to the final answer."""

    type: Literal["rollout"]
    id: str = ""
    system_tokens: int = Field(ge=0)
    tool_schema_tokens: int = Field(default=0, ge=0)
    user_prompt_tokens: int = Field(ge=1)
    turns: list[TraceTurn] = Field(min_length=1)
    meta: dict[str, Any] = Field(default_factory=dict)

    @_model_validator(mode="after")
    def _ends_with_answer(self) -> TraceRollout:
        # The agent loop stops at the first turn without tool calls, so one in the
        # middle would silently cut the replay short.
        *steps, final = self.turns
        for i, turn in enumerate(steps):
            if not turn.tool_calls:
                raise invalid(
                    f"turns[{i}].tool_calls", "at least one tool call before the last turn", []
                )
        if final.tool_calls:
            raise invalid(
                f"turns[{len(steps)}].tool_calls",
                "no tool calls on the last turn (the final answer)",
                len(final.tool_calls),
            )
        return self

    @property
    def output_tokens(self) -> int:
        return sum(t.output_tokens for t in self.turns)

    @property
    def tool_call_count(self) -> int:
        return sum(len(t.tool_calls) for t in self.turns)

    @property
    def final_history_tokens(self) -> int:
        """Input tokens of the last turn (what stateless HTTP re-sends at the end)."""
        total = self.system_tokens + self.tool_schema_tokens + self.user_prompt_tokens
        for turn in self.turns[:-1]:
            total += turn.output_tokens + sum(c.output_tokens for c in turn.tool_calls)
        return total


class TraceHeader(StrictModel):
    type: Literal["trace"]
    version: Literal[1]
    source: str = ""
    meta: dict[str, Any] = Field(default_factory=dict)


def _line_error(source: str, lineno: int, field: str, message: str) -> ScenarioError:
    where = f"line {lineno}" + (f": {field}" if field else "")
    return ScenarioError(source, where, message)


def parse_trace(lines: Iterable[str], source: str = "<trace>") -> list[TraceRollout]:
    """Validate trace lines; raises one :class:`ScenarioError` naming the line and field."""
    rollouts: list[TraceRollout] = []
    seen_header = False
    for lineno, text, data in json_lines(lines, lambda n, why: _line_error(source, n, "", why)):
        if not isinstance(data, dict):
            raise _line_error(source, lineno, "", f"expected a JSON object, got {text[:40]}")
        kind = data.get("type")
        model: type[StrictModel]
        if kind == "trace":
            if seen_header or rollouts:
                raise _line_error(source, lineno, "type", "expected the header only on line 1")
            model = TraceHeader
        elif kind == "rollout":
            model = TraceRollout
        else:
            raise _line_error(source, lineno, "type", f"expected trace or rollout, got {kind!r}")
        try:
            parsed = model.model_validate(data)
        except ValidationError as exc:
            field, message = describe_error(exc.errors(include_url=False)[0])
            raise _line_error(source, lineno, field, message) from None
        if isinstance(parsed, TraceRollout):
            rollouts.append(parsed)
        else:
            seen_header = True
    if not rollouts:
        raise ScenarioError(source, "", "expected at least one rollout line, got none")
    return rollouts


def dump_trace(rollouts: Sequence[TraceRollout], header: TraceHeader | None = None) -> str:
    """The JSONL text of a trace (header first), one rollout per line."""
    out = []
    if header is not None:
        out.append(orjson.dumps(header.model_dump(mode="json")).decode())
    for r in rollouts:
        out.append(orjson.dumps(r.model_dump(mode="json")).decode())
    return "\n".join(out) + "\n"


def resolve_trace_path(trace: str, scenario_source: str) -> str:
    """Where ``rollout.trace`` points: relative to the scenario file, else to the working directory."""
    if os.path.isabs(trace):
        return trace
    candidates = []
    if scenario_source and not scenario_source.startswith("<"):
        candidates.append(os.path.join(os.path.dirname(scenario_source), trace))
    candidates.append(trace)
    for path in candidates:
        if os.path.isfile(path):
            return path
    raise ScenarioError(
        scenario_source,
        "rollout.trace",
        f"expected an existing trace file, got {trace!r} (looked in {', '.join(candidates)})",
    )


def read_trace(path: str | os.PathLike[str]) -> list[TraceRollout]:
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as fh:
            return parse_trace(fh, source)
    except FileNotFoundError:
        raise ScenarioError(source, "", "file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(source, "", f"cannot read file: {exc}") from None


def trace_plan(
    rollout: TraceRollout, rollout_id: int, seed: int, start_offset_ns: int, tags: dict[str, str]
) -> RolloutPlan:
    """The replayable plan of one recorded rollout (content text still comes from ``seed``)."""
    turns = tuple(
        TurnPlan(
            index=i,
            output_tokens=t.output_tokens,
            tool_calls=len(t.tool_calls),
            tool_latency_ms=tuple(c.latency_ms for c in t.tool_calls),
            tool_output_tokens=tuple(c.output_tokens for c in t.tool_calls),
            think_ms=t.think_ms,
        )
        for i, t in enumerate(rollout.turns)
    )
    return RolloutPlan(
        rollout_id=rollout_id,
        seed=seed,
        system_tokens=rollout.system_tokens,
        tool_schema_tokens=rollout.tool_schema_tokens,
        user_prompt_tokens=rollout.user_prompt_tokens,
        turns=turns,
        start_offset_ns=start_offset_ns,
        tags=tags,
    )
