"""Recorded agent sessions: the generic JSONL trace format, versions 1 and 2 (docs/traces.md,
"The generic trace format" and "Trace format version 2", which describe every field).

A scenario with ``rollout.trace: FILE`` replays these rollouts instead of drawing them from
distributions, so every transport sends the same recorded work (paired).

Parsing is pure (text in, models out); :func:`read_trace` is the one
file-reading helper, like :func:`~harness.workload.scenario.load_scenario`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal

import orjson
from pydantic import AfterValidator, Field, ValidationError
from pydantic import model_validator as _model_validator

from harness.wire.errors import ScenarioError
from harness.wire.validation import describe_error, invalid
from harness.workload.distributions import DIST_KINDS, StrictModel
from harness.workload.jsonl import json_lines
from harness.workload.plan import RolloutPlan, SubagentPlan, TurnPlan, derive_seed

#: the version :func:`dump_trace` writes when a rollout uses a version 2 field
TRACE_VERSION: Literal[2] = 2


class TraceToolCall(StrictModel):
    """One tool the client ran: how long it took and how many tokens it returned (v2:
    ``subagent``, the turn's sub-agent that answered it)."""

    latency_ms: float = Field(ge=0.0)
    output_tokens: int = Field(ge=0)
    subagent: int | None = Field(default=None, ge=0)


class TraceRecovery(StrictModel):
    """How the client got this turn answered after its first request failed (v2;
    informational: the replay sends the turn once)."""

    failed_attempts: int = Field(ge=0)
    status: int | None = Field(default=None, ge=100, le=599)
    lost_ms: float = Field(default=0.0, ge=0.0)


class TraceWarmup(StrictModel):
    """A ``generate: false`` request that prepared the rollout's connection (v2; replayed by
    the WebSocket transports only)."""

    input_tokens: int | None = Field(default=None, ge=0)


class TraceClient(StrictModel):
    """What the recorded client did with its conversation's context (v2), as the recording
    saw it; ``None``: not seen (the replay does what its transport does)."""

    ws_chains: bool | None = None
    resends_reasoning: bool | None = None

    @property
    def known(self) -> bool:
        return self.ws_chains is not None or self.resends_reasoning is not None


def _v1_default(value: object) -> bool:
    # a v2 field at its default is not written, so a v1 trace stays as v1 wrote it
    return not value


class TraceTurn(StrictModel):
    """One model call: its output tokens and the tool calls it asked for (none: final answer)."""

    output_tokens: int = Field(ge=1)
    tool_calls: list[TraceToolCall] = Field(default_factory=list)
    think_ms: float = Field(default=0.0, ge=0.0)
    reasoning_tokens: int = Field(default=0, ge=0, exclude_if=_v1_default)
    #: what the recorded endpoint reported (informational: the replay computes its own)
    input_tokens: int | None = Field(default=None, ge=0)
    cached_tokens: int | None = Field(default=None, ge=0)
    subagents: list[TraceSubagent] = Field(default_factory=list, exclude_if=_v1_default)
    #: set when the recorded client got this turn answered only after failed attempts
    recovery: TraceRecovery | None = None

    @_model_validator(mode="after")
    def _calls_name_subagents(self) -> TraceTurn:
        # Each sub-agent answers exactly one call: that call is where the replay forks it
        # and where its result re-enters the parent's conversation.
        named: dict[int, int] = {}
        for j, call in enumerate(self.tool_calls):
            if call.subagent is None:
                continue
            if call.subagent >= len(self.subagents):
                raise invalid(
                    f"tool_calls[{j}].subagent",
                    f"an index into this turn's subagents (0 to {len(self.subagents) - 1})"
                    if self.subagents
                    else "no subagent index (this turn has no subagents)",
                    call.subagent,
                )
            if call.subagent in named:
                raise invalid(
                    f"tool_calls[{j}].subagent",
                    f"a sub-agent no other call names (tool_calls[{named[call.subagent]}] "
                    "already does)",
                    call.subagent,
                )
            named[call.subagent] = j
            result = self.subagents[call.subagent].result_tokens
            if call.output_tokens != result:
                raise invalid(
                    f"tool_calls[{j}].output_tokens",
                    f"the sub-agent's result_tokens ({result})",
                    call.output_tokens,
                )
        for k in range(len(self.subagents)):
            if k not in named:
                raise invalid(
                    f"subagents[{k}]",
                    "a sub-agent named by one of this turn's tool_calls (its subagent field)",
                    None,
                )
        return self


def _check_turns(turns: list[TraceTurn]) -> list[TraceTurn]:
    # The agent loop stops at the first turn without tool calls, so one in the
    # middle would silently cut the replay short.
    *steps, final = turns
    for i, turn in enumerate(steps):
        if not turn.tool_calls:
            raise invalid(f"[{i}].tool_calls", "at least one tool call before the last turn", [])
    if final.tool_calls:
        raise invalid(
            f"[{len(steps)}].tool_calls",
            "no tool calls on the last turn (the final answer)",
            len(final.tool_calls),
        )
    return turns


#: a conversation's turns: tool-calling turns, then the final answer
Turns = Annotated[list[TraceTurn], Field(min_length=1), AfterValidator(_check_turns)]


class TraceSubagent(StrictModel):
    """A conversation a turn forked (v2): its own prompt and turns, and the result it returns."""

    id: str = ""
    join: Literal["wait", "detach"] = "wait"
    system_tokens: int = Field(ge=0)
    tool_schema_tokens: int = Field(default=0, ge=0)
    user_prompt_tokens: int = Field(ge=1)
    result_tokens: int = Field(ge=0)
    turns: Turns
    #: what the recorded client did with this conversation's context (v2)
    client: TraceClient | None = None
    meta: dict[str, Any] = Field(default_factory=dict)


class TraceRollout(StrictModel):
    """One recorded task, from the prompt to the final answer."""

    type: Literal["rollout"]
    id: str = ""
    system_tokens: int = Field(ge=0)
    tool_schema_tokens: int = Field(default=0, ge=0)
    user_prompt_tokens: int = Field(ge=1)
    turns: Turns
    #: the recorded client warmed its connection up before the first turn (v2)
    warmup: TraceWarmup | None = None
    #: what the recorded client did with the context: chained or re-sent, reasoning kept (v2)
    client: TraceClient | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @property
    def uses_v2(self) -> bool:
        """Whether this rollout needs a version 2 reader (a v1 header would misdescribe it)."""
        return (
            self.warmup is not None
            or self.client is not None
            or any(_turn_uses_v2(t) for t in self.turns)
        )

    @property
    def subagent_count(self) -> int:
        return sum(_count_subagents(t) for t in self.turns)

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


def _turn_uses_v2(turn: TraceTurn) -> bool:
    return bool(
        turn.subagents
        or turn.reasoning_tokens
        or turn.input_tokens is not None
        or turn.cached_tokens is not None
        or turn.recovery is not None
    )


def _count_subagents(turn: TraceTurn) -> int:
    return sum(1 + sum(_count_subagents(t) for t in s.turns) for s in turn.subagents)


TraceTurn.model_rebuild()


class TraceHeader(StrictModel):
    type: Literal["trace"]
    version: Literal[1, 2]
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
            field, message = describe_error(exc.errors(include_url=False)[0], tags=DIST_KINDS)
            raise _line_error(source, lineno, field, message) from None
        if isinstance(parsed, TraceRollout):
            rollouts.append(parsed)
        else:
            seen_header = True
    if not rollouts:
        raise ScenarioError(source, "", "expected at least one rollout line, got none")
    return rollouts


def dump_trace(rollouts: Sequence[TraceRollout], header: TraceHeader | None = None) -> str:
    """The JSONL text of a trace (header first), one rollout per line.

    The header states the lowest version that describes the rollouts, and fields left
    at their v2 defaults are omitted (``None``, and the turn fields marked ``exclude_if``):
    a trace that uses no v2 feature is written exactly as version 1 wrote it (older
    readers keep reading it).  Fields are written in declaration order.
    """
    out = []
    if header is not None:
        version = TRACE_VERSION if any(r.uses_v2 for r in rollouts) else 1
        header = header.model_copy(update={"version": version})
        out.append(orjson.dumps(header.model_dump(mode="json")).decode())
    for r in rollouts:
        out.append(orjson.dumps(r.model_dump(mode="json", exclude_none=True)).decode())
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


def read_trace_header(path: str | os.PathLike[str]) -> TraceHeader | None:
    """The header of the trace at ``path`` (``None``: it has none, or the file cannot be read
    or its first line is not a valid header; :func:`read_trace` says why)."""
    try:
        with open(path, encoding="utf-8") as fh:
            first = fh.readline()
        data = orjson.loads(first)
    except (OSError, UnicodeDecodeError, orjson.JSONDecodeError):
        return None
    if not isinstance(data, dict) or data.get("type") != "trace":
        return None
    try:
        return TraceHeader.model_validate(data)
    except ValidationError:
        return None


def recording_gaps(path: str | os.PathLike[str]) -> list[str]:
    """Why the recording that wrote the trace at ``path`` missed exchanges: its header's
    ``meta.lost`` (``loopbench record`` writes it when its observer fell behind, hung or
    died). Empty for a whole trace, one without a header, or a file that cannot be read
    (:func:`read_trace` says why)."""
    header = read_trace_header(path)
    lost = header.meta.get("lost") if header is not None else None
    return [str(why) for why in lost] if isinstance(lost, list) else []


def trace_plan(
    rollout: TraceRollout, rollout_id: int, seed: int, start_offset_ns: int, tags: dict[str, str]
) -> RolloutPlan:
    """The replayable plan of one recorded rollout (content text still comes from ``seed``);
    sub-agents are numbered and seeded as docs/traces.md "Trace format version 2" says."""
    counter = [0]
    turns = _turn_plans(rollout.turns, seed, counter)
    if rollout.warmup is not None:
        turns = (dataclasses.replace(turns[0], warmup=True), *turns[1:])
    return RolloutPlan(
        rollout_id=rollout_id,
        seed=seed,
        system_tokens=rollout.system_tokens,
        tool_schema_tokens=rollout.tool_schema_tokens,
        user_prompt_tokens=rollout.user_prompt_tokens,
        turns=turns,
        start_offset_ns=start_offset_ns,
        tags=tags,
        ws_chains=_client(rollout.client).ws_chains,
        resends_reasoning=_client(rollout.client).resends_reasoning,
    )


def _client(client: TraceClient | None) -> TraceClient:
    return client if client is not None else TraceClient()


def _turn_plans(turns: Sequence[TraceTurn], seed: int, counter: list[int]) -> tuple[TurnPlan, ...]:
    plans = []
    for i, t in enumerate(turns):
        call_of = {c.subagent: j for j, c in enumerate(t.tool_calls) if c.subagent is not None}
        subs = []
        for k, sub in enumerate(t.subagents):
            counter[0] += 1
            sid = counter[0]
            sub_seed = derive_seed(seed, f"subagent:{sid}")
            subs.append(
                SubagentPlan(
                    subagent_id=sid,
                    seed=sub_seed,
                    system_tokens=sub.system_tokens,
                    tool_schema_tokens=sub.tool_schema_tokens,
                    user_prompt_tokens=sub.user_prompt_tokens,
                    turns=_turn_plans(sub.turns, seed, counter),
                    call_index=call_of[k],
                    result_tokens=sub.result_tokens,
                    join=sub.join,
                    ws_chains=_client(sub.client).ws_chains,
                    resends_reasoning=_client(sub.client).resends_reasoning,
                )
            )
        plans.append(
            TurnPlan(
                index=i,
                output_tokens=t.output_tokens,
                tool_calls=len(t.tool_calls),
                tool_latency_ms=tuple(c.latency_ms for c in t.tool_calls),
                tool_output_tokens=tuple(c.output_tokens for c in t.tool_calls),
                think_ms=t.think_ms,
                reasoning_tokens=t.reasoning_tokens,
                subagents=tuple(subs),
            )
        )
    return tuple(plans)
