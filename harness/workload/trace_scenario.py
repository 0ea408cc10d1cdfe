"""The built-in scenario around a trace file: ``loopbench run TRACE.jsonl`` (docs/traces.md).

A trace names no load, so one is made for it: an open loop that starts each rollout at the
time it started in the recording (``meta.start_ms``, written by ``loopbench record``, or
``meta.arrival_ms`` of an imported request trace), else a closed loop of one agent.  A
``--set`` switches it like any scenario field (``load.mode=closed``,
``load.concurrency=4``).  The trace itself is read and checked where every replayed trace
is (``rollout.trace``), so its errors name its file, line and field.

Pure: text in, scenario data out.
"""

from __future__ import annotations

import itertools
import os
import re
from typing import Any

import orjson

from harness.workload.jsonl import json_lines

#: the recorded start of a rollout, in ms after the recording began, by who wrote it
START_FIELDS = ("start_ms", "arrival_ms")
_NOT_NAME = re.compile(r"[^a-z0-9-]+")


def looks_like_trace(source: str, text: str) -> bool:
    """Whether a scenario argument's file is a trace: named ``*.jsonl``, or whose first line
    is a JSON object of a trace's (``type`` ``trace`` or ``rollout``)."""
    if source.endswith(".jsonl"):
        return True
    first = next((line for line in text.splitlines() if line.strip()), "")
    try:
        doc = orjson.loads(first)
    except orjson.JSONDecodeError:
        return False
    return isinstance(doc, dict) and doc.get("type") in ("trace", "rollout")


def trace_scenario(source: str, text: str) -> dict[str, Any]:
    """The scenario data that replays the trace at ``source`` (``text``: its content)."""
    starts = _recorded_starts(text)
    stem = os.path.splitext(os.path.basename(source))[0].lower()
    name = _NOT_NAME.sub("-", stem).strip("-") or "trace"
    path = os.path.abspath(source)
    load: dict[str, Any]
    if starts:
        last_s = max(starts) / 1000
        load = {
            "mode": "open",
            # No arrivals of its own: every start is one of the recorded ones.
            "stages": [{"duration_s": last_s + 0.001, "rate": 0}],
            "bursts": [{"at_s": round(ms / 1000, 6), "extra": 1} for ms in starts],
        }
        how = "open loop at the recorded starts"
    else:
        load = {"mode": "closed", "concurrency": 1}
        how = "closed loop, one agent (the trace records no start times)"
    return {
        "name": name,
        "description": f"the trace {os.path.basename(source)} replayed: {how}",
        "rollout": {"trace": path},
        "load": load,
    }


def _recorded_starts(text: str) -> list[float]:
    """Each rollout's recorded start in ms, in file order; empty unless every rollout has
    one and they are in order (the replay pairs the n-th start with the n-th rollout)."""
    starts: list[float] = []
    # A malformed line is the trace reader's to report (with its line and field): here it
    # only means there are no recorded starts to schedule.
    try:
        for _, _, doc in json_lines(text.splitlines(), lambda n, why: ValueError(why)):
            if not isinstance(doc, dict) or doc.get("type") != "rollout":
                continue
            meta = doc.get("meta")
            start = next(
                (meta[k] for k in START_FIELDS if isinstance(meta, dict) and k in meta), None
            )
            if not isinstance(start, int | float) or isinstance(start, bool) or start < 0:
                return []
            starts.append(float(start))
    except ValueError:
        return []
    if any(b < a for a, b in itertools.pairwise(starts)):
        return []
    return starts
