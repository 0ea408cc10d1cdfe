"""Codex CLI session files (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``) → trace rollouts.

A rollout per user task (a ``compacted`` line starts a new one), a turn per model call, a
tool call's latency and output from the timestamps and ``token_count`` events: the full
mapping is docs/traces.md's table.  Client think time cannot be told apart from model
time in these files, so it is 0.  Parsing is pure over lines; only
:func:`import_codex_files` reads files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from harness.wire.tokens import count_tokens
from harness.workload.importers.common import SessionImportError, import_files, split_tokens
from harness.workload.jsonl import json_lines
from harness.workload.trace import TraceRollout, TraceToolCall, TraceTurn

# User-role messages Codex injects itself (not typed by the user): context, not a new task.
CONTEXT_PREFIXES = (
    "<environment_context>",
    "<user_instructions>",
    "<INSTRUCTIONS>",
    "# AGENTS.md",
    "<user_shell_command>",
    "<turn_aborted>",
)
#: the Responses items that are a tool call, and those that are a call's output
CALL_ITEMS = ("function_call", "custom_tool_call", "local_shell_call")
OUTPUT_ITEMS = ("function_call_output", "custom_tool_call_output", "local_shell_call_output")


@dataclass(slots=True)
class _Call:
    call_id: str
    t_s: float
    latency_ms: float = 0.0
    output_tokens: int = 0
    answered: bool = False


@dataclass(slots=True)
class _Step:
    text_tokens: int = 0
    calls: list[_Call] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    closed: bool = False  # a tool output arrived: the next model item is a new call


@dataclass(slots=True)
class _Task:
    prompt_tokens: int
    context_tokens: int  # text estimate of everything before the prompt
    t_start: float
    steps: list[_Step] = field(default_factory=list)
    compacted: bool = False  # this segment starts from a compaction summary
    ended_by_compaction: bool = False
    t_end: float = 0.0


#: where a content part keeps its text, in the order Codex's session files nest them
TEXT_KEYS: tuple[str, ...] = ("text", "content", "output")


def content_text(value: Any, keys: tuple[str, ...] = TEXT_KEYS, *, opaque: bool = True) -> str:
    """Concatenated text of a content value: a string, a list of parts, or an object with one
    of ``keys``.  Anything else is its JSON (or ``str``) when ``opaque`` (it still cost tokens
    to send), else ""."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(content_text(part, keys, opaque=opaque) for part in value)
    if isinstance(value, dict):
        for key in keys:
            if key in value:
                return content_text(value[key], keys, opaque=opaque)
        return orjson.dumps(value).decode() if opaque else ""
    return str(value) if opaque else ""


def _timestamp(raw: Any, previous: float) -> float:
    if isinstance(raw, str):
        try:
            return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    # A missing or odd timestamp keeps the clock where it was: latencies become 0, not negative.
    return previous


def _usage_int(usage: dict[str, Any] | None, key: str) -> int | None:
    if not usage:
        return None
    value = usage.get(key)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class _SessionParser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.session_id = ""
        self.model = ""
        self.tasks: list[_Task] = []
        self.task: _Task | None = None
        self.step: _Step | None = None
        self.calls: dict[str, _Call] = {}
        self.history_tokens = 0  # text estimate of the whole conversation so far
        self.last_total: Any = None
        self.t = 0.0

    # -- helpers ---------------------------------------------------------------------------

    def _open_task(self, prompt_tokens: int, compacted: bool = False) -> _Task:
        task = _Task(
            prompt_tokens=max(1, prompt_tokens),
            context_tokens=self.history_tokens,
            t_start=self.t,
            compacted=compacted,
            t_end=self.t,
        )
        self.tasks.append(task)
        self.task = task
        self.step = None
        return task

    def _model_step(self) -> _Step:
        if self.task is None:
            # Output with no prompt seen (a file that starts mid-session): an empty prompt.
            self._open_task(1)
        assert self.task is not None
        if self.step is None or self.step.closed:
            self.step = _Step()
            self.task.steps.append(self.step)
        return self.step

    # -- line kinds ------------------------------------------------------------------------

    def feed(self, obj: dict[str, Any]) -> None:
        self.t = _timestamp(obj.get("timestamp"), self.t)
        kind = obj.get("type")
        payload = obj.get("payload")
        if not isinstance(payload, dict):
            return
        if kind == "session_meta":
            self.session_id = str(payload.get("id") or self.session_id)
            self.history_tokens += count_tokens(content_text(payload.get("instructions")))
        elif kind == "turn_context":
            self.model = str(payload.get("model") or self.model)
        elif kind == "response_item":
            self._response_item(payload)
        elif kind == "event_msg":
            if payload.get("type") == "token_count":
                self._token_count(payload)
        elif kind == "compacted":
            summary = count_tokens(content_text(payload.get("message")))
            if self.task is not None:
                self.task.ended_by_compaction = True
            self.history_tokens = summary
            self._open_task(summary, compacted=True)
        # Unknown line types are skipped: the format grows new kinds over versions.
        if self.task is not None:
            self.task.t_end = self.t

    def _response_item(self, item: dict[str, Any]) -> None:
        kind = item.get("type")
        if kind == "message":
            text = content_text(item.get("content"))
            tokens = count_tokens(text)
            role = item.get("role")
            if role == "user" and not text.lstrip().startswith(CONTEXT_PREFIXES):
                self._open_task(tokens)
            elif role == "assistant":
                self._model_step().text_tokens += tokens
            self.history_tokens += tokens
        elif kind == "reasoning":
            text = content_text(item.get("summary")) + content_text(item.get("content"))
            tokens = count_tokens(text)
            self._model_step().text_tokens += tokens
            self.history_tokens += tokens
        elif kind in CALL_ITEMS:
            step = self._model_step()
            call_id = str(item.get("call_id") or item.get("id") or f"call-{len(self.calls)}")
            call = _Call(call_id, self.t)
            step.calls.append(call)
            self.calls[call_id] = call
            body = item.get("arguments", item.get("input", item.get("action")))
            tokens = count_tokens(str(item.get("name", "")) + content_text(body))
            step.text_tokens += tokens
            self.history_tokens += tokens
        elif kind in OUTPUT_ITEMS:
            tokens = count_tokens(content_text(item.get("output")))
            done = self.calls.get(str(item.get("call_id")))
            if done is not None and not done.answered:
                done.answered = True
                done.latency_ms = max(0.0, (self.t - done.t_s) * 1000.0)
                done.output_tokens = tokens
            if self.step is not None:
                self.step.closed = True
            self.history_tokens += tokens
        elif kind is not None and kind != "message":
            # Server-side tools (web search) and other model items: output of the current call.
            self._model_step()

    def _token_count(self, payload: dict[str, Any]) -> None:
        info = payload.get("info")
        if not isinstance(info, dict):
            return
        last = info.get("last_token_usage")
        total = info.get("total_token_usage")
        # Codex repeats the event (e.g. for rate-limit updates) with unchanged totals.
        if not isinstance(last, dict) or total == self.last_total:
            return
        self.last_total = total
        if self.task is not None and self.task.steps and self.task.steps[-1].usage is None:
            self.task.steps[-1].usage = last

    # -- result ----------------------------------------------------------------------------

    def rollouts(self, file_label: str) -> list[TraceRollout]:
        out: list[TraceRollout] = []
        for index, task in enumerate(self.tasks):
            rollout = _task_rollout(task, index, self.session_id or file_label, self.model)
            if rollout is not None:
                out.append(rollout)
        return out


def _visible_output(step: _Step) -> int | None:
    out = _usage_int(step.usage, "output_tokens")
    if out is None:
        return None
    return max(0, out - (_usage_int(step.usage, "reasoning_output_tokens") or 0))


def _tool_tokens(step: _Step, nxt: _Step | None) -> list[int]:
    """Tokens each call's output added to the conversation (usage growth when known)."""
    by_text = [c.output_tokens for c in step.calls]
    in_now = _usage_int(step.usage, "input_tokens")
    in_next = _usage_int(nxt.usage if nxt else None, "input_tokens")
    visible = _visible_output(step)
    if in_now is None or in_next is None or visible is None:
        return by_text
    grown = in_next - in_now - visible
    if grown <= 0:
        return by_text
    return split_tokens(grown, by_text)


def _task_rollout(task: _Task, index: int, session: str, model: str) -> TraceRollout | None:
    steps = task.steps
    if not steps:
        return None  # a prompt the model never answered (aborted at once)
    turns: list[TraceTurn] = []
    carry = 0
    for i, step in enumerate(steps):
        out = _usage_int(step.usage, "output_tokens")
        output = max(1, out if out is not None else step.text_tokens)
        last = i == len(steps) - 1
        if not step.calls and not last:
            # A call that answered without tools mid-task: its tokens go to the next turn.
            carry += output
            continue
        nxt = steps[i + 1] if not last else None
        calls = [
            TraceToolCall(latency_ms=round(c.latency_ms, 3), output_tokens=tokens)
            for c, tokens in zip(step.calls, _tool_tokens(step, nxt), strict=True)
        ]
        turns.append(TraceTurn(output_tokens=output + carry, tool_calls=calls))
        carry = 0
    truncated = bool(turns[-1].tool_calls)
    if truncated:
        # The task stopped on a tool call (interrupted, or compacted): close it with a
        # one-token answer so the replay ends where the recording did.
        turns.append(TraceTurn(output_tokens=1))
    first_input = _usage_int(steps[0].usage, "input_tokens")
    system = (
        max(0, first_input - task.prompt_tokens) if first_input is not None else task.context_tokens
    )
    meta: dict[str, Any] = {
        "source": "codex",
        "session": session,
        "task": index,
        "duration_s": round(max(0.0, task.t_end - task.t_start), 3),
        "usage": all(s.usage is not None for s in steps),
    }
    if model:
        meta["model"] = model
    if task.compacted:
        meta["starts_from_compaction"] = True
    if task.ended_by_compaction:
        meta["ended_by_compaction"] = True
    if truncated:
        meta["truncated"] = True
    return TraceRollout(
        type="rollout",
        id=f"{session}#{index}",
        system_tokens=system,
        user_prompt_tokens=task.prompt_tokens,
        turns=turns,
        meta=meta,
    )


def parse_codex_session(lines: Iterable[str], source: str = "<codex>") -> list[TraceRollout]:
    """The rollouts of one Codex session file (its lines, in order)."""
    parser = _SessionParser(source)
    for lineno, text, obj in json_lines(
        lines, lambda n, why: SessionImportError(f"{source}: line {n}: {why}")
    ):
        if not isinstance(obj, dict) or "type" not in obj:
            raise SessionImportError(
                f"{source}: line {lineno}: expected a {{timestamp, type, payload}} object, "
                f"got {text[:60]}"
            )
        parser.feed(obj)
    return parser.rollouts(os.path.basename(source))


def import_codex_files(paths: Sequence[str]) -> list[TraceRollout]:
    return import_files(paths, parse_codex_session, "JSON lines")
