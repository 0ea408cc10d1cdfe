"""An agent run through ``loopbench record``, and the trace it wrote replayed by ``loopbench run``.

The recorder is the real command in a process of its own, forwarding to the run's reference
server; the replay is ``loopbench run TRACE.jsonl`` (the built-in scenario around a trace)
against an embedded server.  What the trace holds is read with the trace reader
``loopbench trace show`` uses.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.record.proxy import READY_PREFIX
from harness.wire.exit_codes import ExitCode
from harness.workload.trace import TraceRollout, read_trace
from harness.workload.trace_summary import summarize_rollout
from tools.interop.cases import Case

# The replay's turns and tokens must match the recording's within this share (issue 36).
TOLERANCE = 0.05
# The replay rebuilds each prompt from token counts: one synthetic tool definition of the
# recorded schema's size, text of the recorded lengths.  Their framing differs from the
# agent's by a few dozen tokens a request, whatever the session's size: within this many a
# turn, an input difference is that reconstruction, not a different session.
FRAMING_TOKENS_PER_TURN = 64


class RecorderError(RuntimeError):
    """``loopbench record`` did not start (its last lines say why)."""


@dataclass(slots=True)
class Recorder:
    url: str = ""
    returncode: int | None = None
    output: list[str] = field(default_factory=list)

    def problem(self) -> str | None:
        """Why the recording did not end as it should, or None.  Stopped by our Ctrl-C, the
        recorder writes its trace and exits 130 (the exit-code table: stopped by a signal)."""
        if self.returncode in (ExitCode.OK, ExitCode.INTERRUPTED):
            return None
        return f"loopbench record exited {self.returncode}"


@contextmanager
def recording(upstream: str, trace: Path, startup_s: float = 60.0) -> Iterator[Recorder]:
    """``loopbench record --upstream UPSTREAM`` running; on exit stopped (SIGINT) and waited for."""
    cmd = [sys.executable, "-m", "harness", "record", "--upstream", upstream]
    cmd += ["--port", "0", "--out", str(trace)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    rec = Recorder()
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            rec.output.append(line.rstrip())
            if line.startswith(READY_PREFIX):
                rec.url = line[len(READY_PREFIX) :].split()[0]
                ready.set()
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if not ready.wait(startup_s) or not rec.url:
            raise RecorderError("loopbench record did not start: " + " | ".join(rec.output[-5:]))
        yield rec
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            rec.returncode = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            rec.returncode = proc.wait()
        reader.join(timeout=5)


@dataclass(frozen=True, slots=True)
class Recorded:
    rollouts: int
    turns: int
    output_tokens: int  # reasoning included, as the API's usage counts it
    input_tokens: int | None  # what the recorded endpoint reported, summed (None: not reported)
    warmups: int
    recoveries: int
    subagents: int


def _turns(rollout: TraceRollout) -> Iterator[Any]:
    stack = list(rollout.turns)
    while stack:
        turn = stack.pop()
        yield turn
        for sub in turn.subagents:
            stack += sub.turns


def recorded(trace: Path) -> Recorded:
    rollouts = read_trace(trace)
    summaries = [summarize_rollout(r) for r in rollouts]
    turns = [t for r in rollouts for t in _turns(r)]
    inputs = [t.input_tokens for t in turns]
    return Recorded(
        rollouts=len(rollouts),
        turns=len(turns),
        output_tokens=sum(t.output_tokens + t.reasoning_tokens for t in turns),
        input_tokens=None if None in inputs else sum(i for i in inputs if i is not None),
        warmups=sum(s.warmup for s in summaries),
        recoveries=sum(s.recoveries for s in summaries),
        subagents=sum(s.subagents for s in summaries),
    )


@dataclass(frozen=True, slots=True)
class Replayed:
    returncode: int
    turns: int
    turn_errors: int
    output_tokens: int
    input_tokens: int
    problems: tuple[str, ...]


def replay(trace: Path, transport: str, out: Path, timeout_s: float) -> Replayed:
    """``loopbench run TRACE --transports TRANSPORT`` and how it compares with the recording."""
    cmd = [sys.executable, "-m", "harness", "run", str(trace), "--transports", transport]
    cmd += ["--out", str(out), "--run-id", "replay", "-q"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return Replayed(-1, 0, 0, 0, 0, (f"loopbench run took over {timeout_s:.0f} s",))
    summary_path = out / "replay" / "summary.json"
    if not summary_path.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return Replayed(done.returncode, 0, 0, 0, 0, (f"no summary.json: {tail[0]}",))
    summary = json.loads(summary_path.read_text())
    t = summary["transports"][transport]
    tokens = summary["tokens"][transport]
    got = Replayed(
        returncode=done.returncode,
        turns=int(t["turns"]["count"]),
        turn_errors=int(t["turns"]["errors"]),
        output_tokens=int(tokens["reported_output"]),
        input_tokens=int(tokens["reported_input"]),
        problems=(),
    )
    problems = []
    if done.returncode != 0:
        problems.append(f"loopbench run exited {done.returncode}")
    if not summary.get("valid", False):
        problems.append("run invalid: " + "; ".join(summary.get("invalid_reasons") or []))
    return dataclasses.replace(got, problems=tuple(problems))


def recording_problems(case: Case, got: Recorded) -> list[str]:
    """What makes a recording of one session not one rollout as it happened (issue 36)."""
    out = []
    if got.rollouts != 1:
        out.append(f"{got.rollouts} rollouts for one session")
    if got.recoveries != case.recoveries:
        out.append(f"{got.recoveries} recoveries, {case.recoveries} expected")
    if got.warmups != case.warmups:
        out.append(f"{got.warmups} warm-ups, {case.warmups} expected")
    return out


def compare(rec: Recorded, rep: Replayed) -> list[str]:
    """Where the replay differs from the recording by more than :data:`TOLERANCE`."""
    out = list(rep.problems)
    if rep.turns != rec.turns:
        out.append(f"replayed {rep.turns} turns, recorded {rec.turns}")
    if rep.turn_errors:
        out.append(f"{rep.turn_errors} replayed turns failed")
    if rec.output_tokens and abs(rep.output_tokens - rec.output_tokens) > (
        TOLERANCE * rec.output_tokens
    ):
        out.append(
            f"output tokens {rep.output_tokens:,} replayed vs {rec.output_tokens:,} recorded"
        )
    if rec.input_tokens:
        allowed = max(TOLERANCE * rec.input_tokens, FRAMING_TOKENS_PER_TURN * rec.turns)
        if abs(rep.input_tokens - rec.input_tokens) > allowed:
            out.append(
                f"input tokens {rep.input_tokens:,} replayed vs {rec.input_tokens:,} recorded"
            )
    return out
