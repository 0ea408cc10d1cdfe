"""The worker's end of its edge host: start the child, hand it rollouts, read back records.

Runs in the gevent world: the pipes are the (monkey-patched) ``subprocess`` module's,
so a user waiting for its rollout, and the reader below, yield to the other
greenlets.  The asyncio edge itself runs in the child (:mod:`harness.run.edge_host`),
which this process never imports.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from itertools import count
from pathlib import Path
from typing import Any

import gevent
from gevent.event import AsyncResult, Event

from harness.locust_driver.clock import SHIFT_NS
from harness.locust_driver.wire import shift_instants
from harness.run.edge_frames import EdgeBegin, EdgeRollout, frame, read_message, unpack_turn
from harness.workload.plan import RolloutPlan
from harness.workload.records import RolloutRecord, TurnRecord

log = logging.getLogger("loopbench.locust")

#: how long the child may take to import the asyncio edge
START_TIMEOUT_S = 60.0
#: how long the child may take, at the end of a run, to stop its rollouts and report
END_TIMEOUT_S = 10.0
#: the folder holding the ``harness`` package: the child imports it from there
_ROOT = str(Path(__file__).resolve().parents[2])


class EdgeGone(Exception):
    """The edge host exited; the rollouts it held are reported as failed."""


class EdgeChild:
    """One per worker process, started as early as the process knows it is a worker."""

    def __init__(self) -> None:
        #: every turn record, on this process's clock (set before the first run)
        self.on_turn: Callable[[TurnRecord], None] = lambda rec: None
        #: called once if the child goes away by itself, with why
        self.on_gone: Callable[[str], None] = lambda why: None
        self._keys = count()
        self._waiting: dict[int, AsyncResult] = {}
        self._ended: AsyncResult | None = None
        self._ready = AsyncResult()
        self.gone: str | None = None
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "harness.run.edge_host"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        self._outbox: list[bytes] = []
        self._wake = Event()
        self._reader = gevent.spawn(self._read)
        self._writer = gevent.spawn(self._write)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _send(self, message: tuple[Any, ...]) -> None:
        if self.gone is not None:
            raise EdgeGone(self.gone)
        # One writer greenlet: users queue their frames here and never write the pipe
        # themselves (a pipe write that yields would let another user's write interleave).
        self._outbox.append(frame(message))
        self._wake.set()

    def _write(self) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        while True:
            self._wake.wait()
            self._wake.clear()
            frames, self._outbox = self._outbox, []
            try:
                stdin.write(b"".join(frames))
                stdin.flush()
            except (OSError, ValueError) as exc:
                self._lost(f"its stdin broke ({exc})")
                return

    def begin(self, begin: EdgeBegin) -> None:
        if not self._ready.wait(START_TIMEOUT_S):
            self._lost(f"it did not start within {START_TIMEOUT_S:.0f} s")
        self._send(("begin", begin))

    def run(
        self,
        transport: str,
        plan: RolloutPlan,
        *,
        intended_ns: int | None,
        round_index: int,
        rollout_key: str | None,
    ) -> RolloutRecord:
        """Run one rollout in the child and wait for its record (``intended_ns`` on this
        process's clock; None: start it now).  A user stopped meanwhile cancels it."""
        key = next(self._keys)
        result = self._waiting[key] = AsyncResult()
        intended = None if intended_ns is None else intended_ns - SHIFT_NS
        try:
            self._send(
                ("run", EdgeRollout(key, transport, plan, intended, round_index, rollout_key))
            )
            rec: RolloutRecord = result.get()
            return rec
        except gevent.GreenletExit:
            if self.gone is None:
                self._send(("cancel", key))
            raise
        finally:
            self._waiting.pop(key, None)

    def end(self) -> dict[str, Any] | None:
        """Stop the run's rollouts; every record is through once this returns.  The child's
        health state, or None if it did not answer."""
        if self.gone is not None:
            return None
        ended = self._ended = AsyncResult()
        try:
            self._send(("end",))
        except EdgeGone:
            return None
        try:
            state: dict[str, Any] | None = ended.get(timeout=END_TIMEOUT_S)
        except gevent.Timeout:
            log.error("loopbench: the edge host did not end its run within %.0f s", END_TIMEOUT_S)
            state = None
        self._ended = None
        return state

    def close(self) -> None:
        """End the child: its stdin closes, so it stops what runs and exits."""
        proc = self._proc
        if self.gone is None:
            self.gone = "closed"
        self._writer.kill()
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        self._reader.kill(block=False)

    def _read(self) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        while (message := read_message(stdout.read)) is not None:
            kind = message[0]
            if kind == "turn":
                rec = unpack_turn(message[1])
                shift_instants(rec, SHIFT_NS)
                self.on_turn(rec)
            elif kind == "rollout":
                result = self._waiting.get(message[1])
                if result is not None:
                    shift_instants(message[2], SHIFT_NS)
                    result.set(message[2])
            elif kind == "ended":
                if self._ended is not None:
                    self._ended.set(message[1])
            elif kind == "ready":
                self._ready.set(True)
        code = self._proc.wait()
        self._lost(f"it exited with code {code}")

    def _lost(self, why: str) -> None:
        if self.gone is not None:
            return
        self.gone = f"the edge host (pid {self._proc.pid}) is gone: {why}"
        log.error("loopbench: %s", self.gone)
        self._ready.set(False)
        for result in self._waiting.values():
            result.set_exception(EdgeGone(self.gone))
        if self._ended is not None:
            self._ended.set(None)
        self.on_gone(self.gone)
