"""What the importers of public request traces share: field checks with errors naming file,
line and field, and the rollouts a chain of requests becomes."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from harness.wire.errors import LoopbenchError
from harness.workload.trace import TraceRollout, TraceToolCall, TraceTurn


class SessionImportError(LoopbenchError):
    """A session file cannot be read as the format it claims."""


def import_files(
    paths: Sequence[str],
    parse: Callable[[IO[str], str], list[TraceRollout]],
    text: str,
    newline: str | None = None,
) -> list[TraceRollout]:
    """Every rollout of every file, in file order (nothing joins across files); ``text``
    names what a file should hold (``JSON lines``) when it is binary."""
    rollouts: list[TraceRollout] = []
    for path in paths:
        try:
            with open(path, encoding="utf-8", newline=newline) as fh:
                rollouts += parse(fh, path)
        except OSError as exc:
            raise SessionImportError(f"{path}: cannot read file: {exc}") from None
        except UnicodeDecodeError:
            raise SessionImportError(f"{path}: expected UTF-8 {text}, got binary") from None
    return rollouts


def split_tokens(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` shared over parallel calls in proportion to ``weights`` (evenly when they are
    all 0), by largest remainder so the shares add up to ``total`` exactly."""
    weights = weights if sum(weights) > 0 else [1] * len(weights)
    raw = [total * w / sum(weights) for w in weights]
    share = [math.floor(x) for x in raw]
    order = sorted(range(len(raw)), key=lambda i: raw[i] - share[i], reverse=True)
    for i in order[: total - sum(share)]:
        share[i] += 1
    return share


def bad_field(source: str, line: int, field: str, expected: str, got: Any) -> SessionImportError:
    shown = repr(got) if not isinstance(got, str) or len(got) <= 40 else repr(got[:40] + "…")
    return SessionImportError(f"{source}: line {line}: {field}: expected {expected}, got {shown}")


def whole_field(
    row: Mapping[str, Any], field: str, source: str, line: int, *, required: bool = True
) -> int | None:
    """An integer ≥ 0 (a JSON number, or CSV text of one); None when absent and optional."""
    value = row.get(field)
    if value is None or value == "":
        if required:
            raise bad_field(source, line, field, "an integer ≥ 0", "nothing")
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise bad_field(source, line, field, "an integer ≥ 0", value) from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad_field(source, line, field, "an integer ≥ 0", value)
    if value < 0 or value != int(value):
        raise bad_field(source, line, field, "an integer ≥ 0", value)
    return int(value)


def number_field(row: Mapping[str, Any], field: str, source: str, line: int) -> float | None:
    """A number ≥ 0 (milliseconds), or None when the field is absent."""
    value = row.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise bad_field(source, line, field, "a number of milliseconds ≥ 0", value)
    return float(value)


@dataclass(slots=True)
class Request:
    """One recorded model call of a request trace: what it read and wrote, and when."""

    line: int
    input_tokens: int
    output_tokens: int
    arrival_ms: float | None = None
    delay_ms: float | None = None  # client time after the previous turn, when the source says
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None


def chain_rollout(
    requests: list[Request],
    rollout_id: str,
    system_tokens: int,
    meta: dict[str, Any],
    *,
    cumulative: bool = True,
) -> TraceRollout:
    """The rollout of a conversation recorded as consecutive requests.

    ``cumulative``: each request's input is its whole context (it re-sends the last one and
    its answer), so turn i's tool call returned what the next input grew by beyond turn i's
    output; else each input is only what the turn adds, and is that call's output.  The
    call's latency is the source's delay, else the arrival gap (which still holds the
    recorded response time: request traces do not say when a response ended).
    """
    first = requests[0]
    system = min(system_tokens, max(0, first.input_tokens - 1))
    turns: list[TraceTurn] = []
    shrank: list[int] = []
    # The replay cannot ask for an empty answer; one token stands in for it.
    empty = [i for i, r in enumerate(requests) if r.output_tokens <= 0]
    gap_from_arrivals = False
    for i, req in enumerate(requests):
        output = max(1, req.output_tokens)
        # a request's input is the turn's whole context only when the trace is cumulative
        usage: dict[str, Any] = {
            "input_tokens": req.input_tokens if cumulative else None,
            "cached_tokens": req.cached_tokens,
            "reasoning_tokens": req.reasoning_tokens or 0,
        }
        if i == len(requests) - 1:
            turns.append(TraceTurn(output_tokens=output, **usage))
            break
        nxt = requests[i + 1]
        if cumulative:
            grown = nxt.input_tokens - req.input_tokens - req.output_tokens
        else:
            grown = nxt.input_tokens
        if grown < 0:
            # The next request re-sent less than this one plus its answer (history cut or
            # reasoning dropped): the replay keeps the full history, so it over-sends here.
            shrank.append(i + 1)
        if nxt.delay_ms is not None:
            latency = nxt.delay_ms
        elif nxt.arrival_ms is not None and req.arrival_ms is not None:
            latency = max(0.0, nxt.arrival_ms - req.arrival_ms)
            gap_from_arrivals = True
        else:
            latency = 0.0
        call = TraceToolCall(latency_ms=round(latency, 3), output_tokens=max(0, grown))
        turns.append(TraceTurn(output_tokens=output, tool_calls=[call], **usage))
    meta = dict(meta)
    meta["lines"] = [r.line for r in requests]
    if first.arrival_ms is not None:
        meta["arrival_ms"] = first.arrival_ms
    if not cumulative:
        # Only what each turn added: v2's turns[i].input_tokens is the whole context read.
        meta["turn_new_input_tokens"] = [r.input_tokens for r in requests]
    if gap_from_arrivals:
        meta["tool_time_includes_model_time"] = True
    if shrank:
        meta["input_shrank_at_turns"] = shrank
    if empty:
        meta["empty_output_turns"] = empty
    return TraceRollout(
        type="rollout",
        id=rollout_id,
        system_tokens=system,
        user_prompt_tokens=max(1, first.input_tokens - system),
        turns=turns,
        meta=meta,
    )
