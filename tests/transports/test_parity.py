"""``loopbench run`` and ``loopbench locust`` send the same requests: the asyncio transports as
``run`` drives them and as a Locust worker's edge host (harness/run/edge_host.py) drives them,
on the wire, recovery paths included.

The same seeded rollouts run through each edge against its own fresh recording
server with the same options (a fresh one, so the server's seeded ids and faults
meet the same request sequence); the recorded requests (method, path, body) and
WebSocket frames must match one for one, with response and call ids renamed in
order of appearance.  The turn records must agree on everything that is not a
clock reading.  The edge host runs in a child process, handed its rollouts over its
pipes as a worker hands them (tests/transports/locust_edge.py).
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from harness.client.options import TransportOptions
from harness.run.embedded import READY_PREFIX
from harness.wire.transports import LOCUST_TRANSPORTS
from harness.workload.plan import RolloutPlan
from harness.workload.rollout import generate_rollouts
from harness.workload.scenario import validate_scenario
from tests import runs
from tests.transports.locust_edge import drive_edge_host

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
HTTP = tuple(t for t in LOCUST_TRANSPORTS if not t.startswith("ws"))
WS = tuple(t for t in LOCUST_TRANSPORTS if t.startswith("ws"))
REQUEST_TIMEOUT_S = 1.5
# Fields of a turn record that are not clock readings or sizes of server-chosen text.
RECORD_FIELDS = (
    "transport",
    "rollout_id",
    "turn_index",
    "status",
    "error_kind",
    "recoveries",
    "new_connection",
    "output_tokens",
    "sim_cache",
    # the client's own count of what it sent: both edges share the client core
    "sent_input_tokens",
)
_ID = re.compile(r"\b(resp|call|fc|msg|rs)_[0-9a-f]{32}\b")


def _plans(count: int, tool_latency_ms: float) -> list[RolloutPlan]:
    scenario = validate_scenario(
        {
            "name": "parity",
            "seed": 23,
            "rollout": {
                "count": count,
                "system_tokens": 60,
                "tool_schema_tokens": 40,
                "user_prompt_tokens": 20,
                "tool_calls": 2,
                "tool_output_tokens": 30,
                "tool_latency_ms": tool_latency_ms,
                "step_output_tokens": 20,
                "final_answer_tokens": 30,
            },
        }
    )
    return generate_rollouts(scenario)


Turn = tuple[Any, ...]  # RECORD_FIELDS of one turn record


def _recovered(turns: list[Turn]) -> set[str]:
    return {t[0] for t in turns if t[5] > 0}


def _failed(turns: list[Turn]) -> set[tuple[str, str]]:
    return {(t[0], t[4]) for t in turns if t[3] != "completed"}


# (case, server options, transports, rollouts, tool latency ms, what the case must have forced)
CASES = [
    ("plain", [], LOCUST_TRANSPORTS, 2, 1, lambda turns: not _recovered(turns) | _failed(turns)),
    # a 1-byte lane cache: every store:false continuation misses -> resend the full context
    (
        "cache_miss",
        ["--ws-max-cached-bytes", "1"],
        WS,
        2,
        1,
        lambda turns: _recovered(turns) == {"ws"} and not _failed(turns),
    ),
    # the 2nd response of each connection cut by 1011 -> reconnect (ws-store keeps its chain)
    (
        "recoverable_close",
        ["--ws-fault-close-after", "2"],
        WS,
        2,
        1,
        lambda turns: _recovered(turns) == set(WS) and not _failed(turns),
    ),
    # ... by 1008, which no rule recovers -> the turn fails with connection_closed
    (
        "fatal_close",
        ["--ws-fault-close-after", "2", "--ws-fault-close-code", "1008"],
        WS,
        2,
        1,
        lambda turns: _failed(turns) == {(t, "connection_closed") for t in WS},
    ),
    # every first response cut -> the turn gives up after 3 recoveries (recovery_exhausted)
    (
        "exhausted",
        ["--ws-fault-close-after", "1"],
        WS,
        1,
        1,
        lambda turns: _failed(turns) == {(t, "recovery_exhausted") for t in WS},
    ),
    # the connection outlives its lifetime during each tool wait ->
    # websocket_connection_limit_reached, then 1001 -> reconnect
    (
        "lifetime",
        ["--ws-max-lifetime-s", "0.4"],
        WS,
        1,
        600,
        lambda turns: _recovered(turns) == set(WS) and not _failed(turns),
    ),
    # seeded per-request faults: HTTP errors and cut streams, WS errors, cuts, evictions, stalls
    (
        "faults",
        [
            "--fault",
            "seed=5",
            "--fault",
            "error_rate.503=0.1",
            "--fault",
            "disconnect_rate=0.15",
            "--fault",
            "evict_rate=0.15",
            "--fault",
            "stall_rate=0.05",
            "--fault",
            "spike_rate=0.05",
            "--fault",
            "spike_ms=5",
        ],
        LOCUST_TRANSPORTS,
        3,
        1,
        lambda turns: bool(_recovered(turns)) and {k for _, k in _failed(turns)} >= {"connection"},
    ),
]


@contextmanager
def recording_server(record: Path, args: list[str]) -> Iterator[str]:
    cmd = [sys.executable, str(HERE / "recording_server.py"), str(record), "--store", ":memory:"]
    # what is sent is the claim, not when: no modelled waits (a fresh server per edge still
    # meets the same request sequence, so seeded ids and faults stay alike)
    cmd += runs.NO_MODELLED_WAITS
    with subprocess.Popen([*cmd, *args], stdout=subprocess.PIPE, text=True, cwd=ROOT) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.startswith(READY_PREFIX), f"recording server did not start: {line!r}"
            yield line[len(READY_PREFIX) :].strip()
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def asyncio_edge(url: str, transports: tuple[str, ...], plans: list[RolloutPlan]) -> list[Any]:
    return runs.asyncio_edge(url, transports, plans, request_timeout_s=REQUEST_TIMEOUT_S)


def locust_edge(url: str, transports: tuple[str, ...], plans: list[RolloutPlan]) -> list[Any]:
    options = TransportOptions(url, request_timeout_s=REQUEST_TIMEOUT_S)
    turns, _, _ = drive_edge_host(options, [(name, plan) for name in transports for plan in plans])
    return [asdict(t) for t in turns]


def _normalise(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: _normalise(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v, ids) for v in value]
    if isinstance(value, str):
        return _ID.sub(lambda m: ids.setdefault(m.group(0), f"{m.group(1)}#{len(ids)}"), value)
    return value


def recorded(record: Path) -> list[Any]:
    """The recorded requests, bodies parsed, ids renamed in order of first appearance."""
    ids: dict[str, str] = {}
    out = []
    for line in record.read_text().splitlines():
        entry = json.loads(line)
        if "body" in entry:
            entry["body"] = json.loads(entry["body"])
        out.append(_normalise(entry, ids))
    return out


def _records(turns: list[Any]) -> list[Turn]:
    return [tuple(t[f] for f in RECORD_FIELDS) for t in turns]


def _describe(entry: dict[str, Any]) -> str:
    """One request in a line: where it went and what shaped its body."""
    where = f"{entry.get('http', 'ws')} {entry.get('path', '')}{entry.get('query', '')}"
    body = entry.get("body")
    if not isinstance(body, dict):
        return f"{where} {entry.get('ws', '')}".strip()
    items = body.get("input")
    shown = [i.get("type", "message") for i in items] if isinstance(items, list) else items
    keys = ("type", "store", "previous_response_id", "response_id")
    fields = " ".join(f"{k}={body[k]}" for k in keys if k in body)
    return f"{where} {fields} input={shown}"


def _first_difference(a: list[Any], b: list[Any]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            keys = sorted(
                k
                for k in {**x.get("body", {}), **y.get("body", {})}
                if x.get("body", {}).get(k) != y.get("body", {}).get(k)
            )
            return (
                f"request {i} differs in {keys}:\n  asyncio: {_describe(x)}\n"
                f"  locust:  {_describe(y)}"
            )
    return f"lengths differ: asyncio sent {len(a)} requests, locust {len(b)}"


def _on_both_edges(
    tmp_path: Path, transports: tuple[str, ...], plans: list[RolloutPlan], args: Sequence[str] = ()
) -> tuple[list[Any], list[Any], list[Any]]:
    """``plans`` over ``transports`` from each edge against its own recording server (started
    with ``args``): the requests, which both edges must have sent alike (the test fails here
    otherwise), and each edge's turn records: (requests, asyncio turns, locust turns)."""
    runs = {}
    for edge, drive in (("asyncio", asyncio_edge), ("locust", locust_edge)):
        record = tmp_path / f"{edge}.jsonl"
        with recording_server(record, list(args)) as url:
            turns = drive(url, transports, plans)
        runs[edge] = (recorded(record), turns)
    (a_requests, a_turns), (g_requests, g_turns) = runs["asyncio"], runs["locust"]
    assert a_requests == g_requests, _first_difference(a_requests, g_requests)
    return a_requests, a_turns, g_turns


@pytest.mark.parametrize(
    ("args", "transports", "count", "tool_ms", "forced"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_both_edges_send_the_same_requests(
    tmp_path: Path,
    args: list[str],
    transports: tuple[str, ...],
    count: int,
    tool_ms: float,
    forced: Callable[[list[Turn]], bool],
) -> None:
    plans = _plans(count, tool_ms)
    _, a_turns, g_turns = _on_both_edges(tmp_path, transports, plans, args)
    assert _records(a_turns) == _records(g_turns)
    a_turns = _records(a_turns)
    sent = RECORD_FIELDS.index("sent_input_tokens")
    assert all(t[sent] > 0 for t in a_turns if t[3] == "completed"), a_turns
    # Every transport ran every rollout: the comparison covered what it claims to.
    assert {t[0] for t in a_turns} == set(transports)
    assert {(t[0], t[1]) for t in a_turns} == {(n, p.rollout_id) for n in transports for p in plans}
    # ... and the server forced the path the case is about.
    assert forced(a_turns), a_turns


def test_both_edges_round_trip_reasoning_and_record_it(tmp_path: Path) -> None:
    """A reasoning model: the same requests from both edges (http re-sends the reasoning items,
    the others never), and both record TTFT before TTFOT and the reasoning tokens per turn."""
    reasoning = [
        dataclasses.replace(
            p, turns=tuple(dataclasses.replace(t, reasoning_tokens=40) for t in p.turns)
        )
        for p in _plans(1, 1)
    ]
    a_requests, a_turns, g_turns = _on_both_edges(tmp_path, LOCUST_TRANSPORTS, reasoning)
    assert _records(a_turns) == _records(g_turns)
    for turns in (a_turns, g_turns):
        assert {t["transport"] for t in turns} == set(LOCUST_TRANSPORTS)
        for t in turns:
            assert t["status"] == "completed" and t["reasoning_tokens"] == 40, t
            # one read may carry both (40 tokens decode in a burst): never in the wrong order
            assert t["first_output_ns"] >= t["first_token_ns"] > t["sent_ns"], t
            assert not t["decode_implausible"], t
    bodies = [e for e in a_requests if isinstance(e.get("body"), dict) and "input" in e["body"]]
    stateless = [e for e in bodies if "http" in e and e["body"].get("store") is False]
    # one rollout of three turns over http: each turn re-sends every earlier reasoning item
    assert [len(_reasoning_items(e)) for e in stateless] == [0, 1, 2]
    assert all(e["body"]["include"] == ["reasoning.encrypted_content"] for e in stateless)
    others = [e for e in bodies if e not in stateless]
    assert others and not any(_reasoning_items(e) or "include" in e["body"] for e in others)


def _reasoning_items(entry: dict[str, Any]) -> list[Any]:
    items = entry["body"].get("input")
    return [i for i in items if i.get("type") == "reasoning"] if isinstance(items, list) else []


def test_both_edges_replay_a_recorded_warmup_alike(tmp_path: Path) -> None:
    """A trace's warm-up (docs/traces.md): over WebSocket both edges send ``generate: false``
    first, then the first turn chained from it; over HTTP neither sends one."""
    warm = [
        dataclasses.replace(p, turns=(dataclasses.replace(p.turns[0], warmup=True), *p.turns[1:]))
        for p in _plans(1, 1)
    ]
    a_requests, a_turns, g_turns = _on_both_edges(tmp_path, LOCUST_TRANSPORTS, warm)
    assert _records(a_turns) == _records(g_turns)
    bodies = [e["body"] for e in a_requests if isinstance(e.get("body"), dict)]
    warmups = [b for b in bodies if b.get("generate") is False]
    ws = [t for t in LOCUST_TRANSPORTS if t in ("ws", "ws-store")]
    assert len(warmups) == len(ws) and all(b["input"] == [] for b in warmups)
    # the request right after each warm-up chains from it (ids renamed in order: resp#N)
    for i, body in enumerate(bodies[:-1]):
        if body.get("generate") is False:
            assert bodies[i + 1]["previous_response_id"].startswith("resp#"), bodies[i + 1]
