"""The Locust worker's edge host (harness/run/edge_host.py): what it says, and when it stops.

Unit tests drive :class:`EdgeHost` in this process with the messages a worker sends,
through real frames; the exit test starts the real child, since only it shows the
host ends by itself when its worker's end of the pipe closes (a ``kill -9`` of the
worker leaves no one else to stop it).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from harness.client.options import TransportOptions
from harness.run import edge_frames as ef
from harness.run.edge_host import EdgeHost
from harness.workload.plan import RolloutPlan
from harness.workload.records import TurnRecord
from harness.workload.rollout import generate_rollouts
from harness.workload.scenario import validate_scenario

ROOT = Path(__file__).resolve().parents[2]
# Nothing listens here: a rollout that reached the network would fail, not hang.
OPTIONS = TransportOptions("http://127.0.0.1:9/v1", connect_timeout_s=1, request_timeout_s=1)


def _plan() -> RolloutPlan:
    scenario = validate_scenario({"name": "edge", "rollout": {"count": 1, "tool_calls": 1}})
    return generate_rollouts(scenario)[0]


def test_a_frame_carries_a_record_whole() -> None:
    rec = TurnRecord(
        "ws", 3, 1, sent_ns=5, first_token_ns=7, itl_ns=[1, 2, 3], server_late_ms=0.5, rx_stamp="k"
    )
    wire = ef.frame(("turn", ef.pack_turn(rec)))
    assert ef.body_length(wire[: ef.HEADER_BYTES]) == len(wire) - ef.HEADER_BYTES
    kind, values = ef.unframe(wire[ef.HEADER_BYTES :])
    back = ef.unpack_turn(values)
    assert kind == "turn"
    assert [getattr(back, f.name) for f in fields(TurnRecord)] == [
        getattr(rec, f.name) for f in fields(TurnRecord)
    ]


def test_a_cancelled_rollout_reports_nothing_and_the_end_comes_after_every_record() -> None:
    async def go() -> list[tuple[Any, ...]]:
        said: list[tuple[Any, ...]] = []
        host = EdgeHost(said.append)
        host.handle(("begin", ef.EdgeBegin(OPTIONS, model="m")))
        later = time.perf_counter_ns() + 30_000_000_000
        host.handle(("run", ef.EdgeRollout(1, "http", _plan(), later, 0, None)))
        # against a closed port: the rollout fails at once and is reported as failed
        host.handle(("run", ef.EdgeRollout(2, "http", _plan(), None, 0, None)))
        await asyncio.sleep(0.5)
        host.handle(("cancel", 1))
        await host.end()
        return said

    said = asyncio.run(go())
    kinds = [m[0] for m in said]
    assert kinds[-1] == "ended" and kinds.count("ended") == 1, kinds
    rollouts = [m for m in said if m[0] == "rollout"]
    # the cancelled one (key 1) never reports; the failed one does, before the end
    assert [m[1] for m in rollouts] == [2], rollouts
    assert rollouts[0][2].status == "error" and rollouts[0][2].error_kind == "connection"
    health = said[-1][1]
    assert set(health) == {"cpu_share", "wall_s", "loop_lag"}
    assert health["wall_s"] > 0.4


def test_the_host_ends_by_itself_when_its_worker_is_gone() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.run.edge_host"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert ef.read_message(proc.stdout.read) == ("ready",)
        later = time.perf_counter_ns() + 60_000_000_000
        for message in (
            ("begin", ef.EdgeBegin(OPTIONS, model="m")),
            ("run", ef.EdgeRollout(1, "ws", _plan(), later, 0, None)),
        ):
            proc.stdin.write(ef.frame(message))
        proc.stdin.flush()
        time.sleep(0.3)
        assert proc.poll() is None, "the host should wait for its rollout"
        proc.stdin.close()  # what the kernel does when the worker is killed
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
