"""Seeded rollouts through the Locust worker's edge host, as a worker hands them over.

The host (``python -m harness.run.edge_host``) is the process that measures under
``loopbench locust``; this drives it over its pipes exactly as the worker does
(harness/locust_driver/edge.py), one rollout at a time, without Locust or gevent.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from harness.client.options import TransportOptions
from harness.run.edge_frames import EdgeBegin, EdgeRollout, frame, read_message, unpack_turn
from harness.workload.plan import RolloutPlan
from harness.workload.records import RolloutRecord, TurnRecord

ROOT = Path(__file__).resolve().parents[2]


def _read(stdout: IO[bytes]) -> tuple[Any, ...]:
    message = read_message(stdout.read)
    assert message is not None, "the edge host exited"
    return message


def drive_edge_host(
    options: TransportOptions,
    jobs: Iterable[tuple[str, RolloutPlan]],
    *,
    model: str = "sim-model",
    timeout_s: float = 240.0,
) -> tuple[list[TurnRecord], list[RolloutRecord], dict[str, Any] | None]:
    """Each (transport, plan) in order; the turn and rollout records and the host's health."""
    turns: list[TurnRecord] = []
    rollouts: list[RolloutRecord] = []
    with subprocess.Popen(
        [sys.executable, "-m", "harness.run.edge_host"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            assert _read(proc.stdout) == ("ready",)

            def send(message: tuple[Any, ...]) -> None:
                assert proc.stdin is not None
                proc.stdin.write(frame(message))
                proc.stdin.flush()

            send(("begin", EdgeBegin(options, model=model)))
            for key, (transport, plan) in enumerate(jobs):
                send(("run", EdgeRollout(key, transport, plan, None, 0, None)))
                while (message := _read(proc.stdout))[0] == "turn":
                    turns.append(unpack_turn(message[1]))
                assert message[:2] == ("rollout", key), message
                rollouts.append(message[2])
            send(("end",))
            ended = _read(proc.stdout)
            assert ended[0] == "ended", ended
            health: dict[str, Any] | None = ended[1]
        finally:
            proc.stdin.close()
            proc.wait(timeout=timeout_s)
    assert proc.returncode == 0, proc.returncode
    return turns, rollouts, health
