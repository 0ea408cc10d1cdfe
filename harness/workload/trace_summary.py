"""What a trace holds, as ``loopbench trace show`` prints it (docs/traces.md).

Pure: validated rollouts (and the header, if any) in, lines of text out.  Per rollout its
turns, tool calls, tokens, tool time, warm-up, recoveries and sub-agents, then the totals:
enough to tell, before replaying it, whether a recording holds the sessions that were run
(one rollout per session, not a warm-up or a reconnect split off as rollouts of their own).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

from harness.wire.plural import counted
from harness.workload.trace import TraceHeader, TraceRollout, TraceTurn

#: rollout meta keys worth a note, in the order they are printed
_NOTES = ("follows", "forked_from", "overlapped_with", "truncated", "ended_on_failure")


@dataclass(frozen=True, slots=True)
class RolloutSummary:
    id: str
    turns: int
    tool_calls: int
    output_tokens: int
    reasoning_tokens: int
    #: the first and the last turn's input as the recorded endpoint reported it (else planned)
    first_input_tokens: int
    last_input_tokens: int
    #: the client's tool time: per turn the longest of its parallel calls, summed
    tool_ms: float
    warmup: bool
    recoveries: int
    failed_attempts: int
    subagents: int
    notes: tuple[str, ...]


def _all_turns(turns: Sequence[TraceTurn]) -> Iterator[TraceTurn]:
    for t in turns:
        yield t
        for s in t.subagents:
            yield from _all_turns(s.turns)


def summarize_rollout(r: TraceRollout) -> RolloutSummary:
    turns = list(_all_turns(r.turns))
    first = r.turns[0].input_tokens
    if first is None:
        first = r.system_tokens + r.tool_schema_tokens + r.user_prompt_tokens
    last = r.turns[-1].input_tokens
    if last is None:
        last = r.final_history_tokens
    notes = []
    for key in _NOTES:
        value = r.meta.get(key)
        if value in (None, False, [], {}):
            continue
        if value is True:
            notes.append(key)
        elif isinstance(value, list):
            notes.append(f"{key} {', '.join(map(str, value))}")
        elif isinstance(value, dict):
            notes.append(f"{key} " + " ".join(f"{k}={v}" for k, v in value.items()))
        else:
            notes.append(f"{key} {value}")
    client = r.client
    if client is not None and client.ws_chains is not None:
        notes.append("ws chains" if client.ws_chains else "ws re-sends the input")
    if client is not None and client.resends_reasoning is not None:
        notes.append("reasoning re-sent" if client.resends_reasoning else "no reasoning back")
    return RolloutSummary(
        id=r.id,
        turns=len(turns),
        tool_calls=sum(len(t.tool_calls) for t in turns),
        output_tokens=sum(t.output_tokens for t in turns),
        reasoning_tokens=sum(t.reasoning_tokens for t in turns),
        first_input_tokens=first,
        last_input_tokens=last,
        tool_ms=sum(max((c.latency_ms for c in t.tool_calls), default=0.0) for t in turns),
        warmup=r.warmup is not None,
        recoveries=sum(1 for t in turns if t.recovery is not None),
        failed_attempts=sum(t.recovery.failed_attempts for t in turns if t.recovery is not None),
        subagents=r.subagent_count,
        notes=tuple(notes),
    )


_COLUMNS = (
    ("rollout", "<"),
    ("turns", ">"),
    ("tool calls", ">"),
    ("output tok", ">"),
    ("reasoning tok", ">"),
    ("input tok first→last", ">"),
    ("tool time ms", ">"),
    ("warm-up", ">"),
    ("recoveries", ">"),
    ("sub-agents", ">"),
    ("notes", "<"),
)


def _row(s: RolloutSummary) -> tuple[str, ...]:
    recoveries = f"{s.recoveries} ({s.failed_attempts} failed)" if s.recoveries else "0"
    return (
        s.id or "-",
        f"{s.turns:,}",
        f"{s.tool_calls:,}",
        f"{s.output_tokens:,}",
        f"{s.reasoning_tokens:,}",
        f"{s.first_input_tokens:,}→{s.last_input_tokens:,}",
        f"{s.tool_ms:,.1f}",
        "yes" if s.warmup else "-",
        recoveries,
        f"{s.subagents:,}",
        "; ".join(s.notes),
    )


def trace_summary_lines(
    source: str, rollouts: Sequence[TraceRollout], header: TraceHeader | None = None
) -> list[str]:
    """The lines ``loopbench trace show`` prints for a trace."""
    sums = [summarize_rollout(r) for r in rollouts]
    lines = [f"{source}: {counted(len(rollouts), 'rollout')}"]
    if header is not None:
        meta = header.meta
        recorded = [f"version {header.version}"]
        if header.source:
            recorded.append(f"source {header.source}")
        for key, what in (
            ("exchanges", "exchanges"),
            ("failed", "failed"),
            ("warmups", "warm-ups"),
            ("warmups_unfollowed", "warm-ups no request followed"),
        ):
            if isinstance(meta.get(key), int):
                recorded.append(f"{meta[key]:,} {what}")
        lines.append("recorded: " + ", ".join(recorded))
        lost = meta.get("lost")
        if isinstance(lost, list) and lost:
            lines.append("the recording misses exchanges: " + "; ".join(map(str, lost)))
    rows = [tuple(name for name, _ in _COLUMNS), *(_row(s) for s in sums)]
    if len(sums) > 1:
        sums_of: dict[str, Any] = {
            f.name: sum(getattr(s, f.name) for s in sums)
            for f in fields(RolloutSummary)
            if f.name not in ("id", "warmup", "notes")
        }
        total = RolloutSummary(id="total", warmup=False, notes=(), **sums_of)
        warmed = sum(1 for s in sums if s.warmup)
        rows.append((*_row(total)[:7], f"{warmed:,}", *_row(total)[8:]))
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    for row in rows:
        cells = [
            f"{cell:{align}{width}}"
            for cell, (_, align), width in zip(row, _COLUMNS, widths, strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines
