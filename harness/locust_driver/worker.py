"""Worker side of a distributed run: run claimed rollouts, measure, ship to the master.

Every record goes, in one step, into this worker's accumulator, a row buffer shipped every
:data:`SHIP_INTERVAL_S`, and Locust's ``request`` events; the final message carries the
accumulator's state, the last rows, the worker's own counts and its health: the edge host's
(:mod:`harness.run.edge_host`) and this gevent loop's lag, and the busier one's CPU share
(docs/distributed.md, "What runs where").
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, replace
from itertools import count
from typing import Any

import gevent
from gevent.event import AsyncResult

from harness.client.options import TransportOptions
from harness.client.shaping import rollout_key
from harness.locust_driver.clock import now_ns
from harness.locust_driver.edge import EdgeChild
from harness.locust_driver.protocol import (
    MSG_CLAIM,
    MSG_FINAL,
    MSG_HELLO,
    MSG_ROWS,
    RunConfig,
    claim_message,
    final_message,
    hello_message,
    rows_message,
    version_mismatch,
)
from harness.locust_driver.wire import claim_from_wire, rollout_to_row, turn_to_row
from harness.locust_driver.work import Claim
from harness.metrics import definitions as D
from harness.metrics.hdr import Histogram
from harness.metrics.summary import Accumulator
from harness.run.edge_frames import EdgeBegin
from harness.run.health import LOOP_WATCH_INTERVAL_S, ClientHealth, CpuMeter
from harness.wire.credentials import PLACEHOLDER_API_KEY
from harness.wire.version import loopbench_version
from harness.workload.records import RolloutRecord, TurnRecord

#: rows travel in batches this far apart: a worker killed meanwhile loses at most this much of
#: its rows (their rollouts count as lost, docs/distributed.md); each batch costs the master one
#: burst of writing whatever its size
SHIP_INTERVAL_S = 2.0
_TTFT, _TURN, _ROLLOUT = D.get("ttft_ms"), D.get("turn_ms"), D.get("rollout_ms")


@dataclass(slots=True)
class WorkerRun:
    config: RunConfig
    acc: Accumulator
    turn_rows: list[list[Any]] = field(default_factory=list)
    rollout_rows: list[list[Any]] = field(default_factory=list)
    turns: int = 0
    rollouts: int = 0
    cpu: CpuMeter = field(default_factory=CpuMeter)
    #: how late this process's gevent loop woke (claims are answered and anchored there)
    loop_lag: Histogram = field(default_factory=Histogram)

    def add_turn(self, rec: TurnRecord) -> None:
        self.acc.add_turn(rec)
        self.turn_rows.append(turn_to_row(rec))
        self.turns += 1

    def add_rollout(self, rec: RolloutRecord) -> None:
        self.acc.add_rollout(rec)
        self.rollout_rows.append(rollout_to_row(rec))
        self.rollouts += 1

    def take_rows(self) -> tuple[list[list[Any]], list[list[Any]]]:
        """The (turn, rollout) rows not shipped yet; the next ship starts empty."""
        rows = self.turn_rows, self.rollout_rows
        self.turn_rows, self.rollout_rows = [], []
        return rows


class WorkerSide:
    """One per worker process; ``send`` is ``runner.send_message``, ``fire`` the request event."""

    def __init__(self, send: Any, fire: Any) -> None:
        self._send = send
        self._fire = fire
        self._req = count()
        self._waiting: dict[int, AsyncResult] = {}
        self.run: WorkerRun | None = None
        self._shipper: gevent.Greenlet | None = None
        self._watchdog: gevent.Greenlet | None = None
        #: the asyncio edge that runs the rollouts (None in tests that feed records directly)
        self.edge: EdgeChild | None = None
        self.version = loopbench_version()

    def read_config(self, wire: dict[str, Any]) -> RunConfig:
        """The master's run settings; a master of another loopbench (or wire format) is
        refused in one line, and told why by a hello carrying this worker's versions."""
        mismatch = version_mismatch(wire, self.version, me="worker", them="master")
        if mismatch is not None:
            self._send(
                MSG_HELLO, hello_message(str(wire.get("run_id", "")), os.getpid(), self.version)
            )
            raise mismatch
        return RunConfig.from_wire(wire)

    # -- lifecycle -------------------------------------------------------------------------------

    def begin(self, config: RunConfig) -> None:
        self.run = WorkerRun(
            config,
            Accumulator(
                warmup_rollouts=config.warmup_rollouts,
                slo=json.loads(config.slo) if config.slo else None,
            ),
        )
        edge = self.edge
        self._send(
            MSG_HELLO,
            hello_message(
                config.run_id,
                os.getpid(),
                self.version,
                edge="asyncio",
                edge_pid=edge.pid if edge is not None else None,
            ),
        )
        if edge is not None:
            edge.begin(edge_begin(config))
        self._shipper = gevent.spawn(self._ship_forever)
        self._watchdog = gevent.spawn(_watch_loop, self.run.loop_lag)

    def end(self) -> None:
        """Send the final state; called once the users are stopped."""
        for greenlet in (self._shipper, self._watchdog):
            if greenlet is not None:
                greenlet.kill(block=False)
        self._shipper = self._watchdog = None
        for result in self._waiting.values():
            result.set(Claim("done"))
        self._waiting.clear()
        # Before the run is let go: the edge's last records still land in it.
        edge_state = self.edge.end() if self.edge is not None and self.run is not None else None
        run, self.run = self.run, None
        if run is None:
            return
        health = _health(run.cpu.read(run.loop_lag), edge_state)
        turns, rollouts = run.take_rows()
        self._send(
            MSG_FINAL,
            final_message(
                run.config.run_id,
                state=run.acc.to_state(),
                turns=turns,
                rollouts=rollouts,
                turns_total=run.turns,
                rollouts_total=run.rollouts,
                health=health.to_state(),
            ),
        )

    def _ship_forever(self) -> None:
        while True:
            gevent.sleep(SHIP_INTERVAL_S)
            self.ship()

    def ship(self) -> None:
        run = self.run
        if run is None or not (run.turn_rows or run.rollout_rows):
            return
        turns, rollouts = run.take_rows()
        self._send(MSG_ROWS, rows_message(run.config.run_id, turns, rollouts))

    # -- work ------------------------------------------------------------------------------------

    def claim(self, finished: tuple[int, int] | None) -> Claim:
        """Ask the master for the next rollout, reporting the one just finished; blocks."""
        if self.run is None:
            return Claim("done")
        req = next(self._req)
        result: AsyncResult = AsyncResult()
        self._waiting[req] = result
        self._send(MSG_CLAIM, claim_message(req, finished))
        claim: Claim = result.get()
        return claim

    def on_work(self, data: dict[str, Any]) -> None:
        """The master's answer to a claim (runs in the message-receiving greenlet)."""
        result = self._waiting.pop(int(data["req"]), None)
        if result is None:
            return
        claim = claim_from_wire(data)
        if claim.start_in_ns is not None:
            # Anchored on this process's clock when the answer arrived.
            claim = replace(claim, start_in_ns=now_ns() + claim.start_in_ns)
        result.set(claim)

    def run_claim(self, claim: Claim) -> RolloutRecord:
        """Run a claimed rollout on the edge host; blocks this user until it ends."""
        run, edge = self.run, self.edge
        assert run is not None and edge is not None and claim.plan is not None
        return edge.run(
            claim.transport,
            claim.plan,
            intended_ns=claim.start_in_ns,
            round_index=claim.round,
            rollout_key=rollout_key(run.config.run_id, claim.transport, claim.plan.rollout_id),
        )

    # -- records ---------------------------------------------------------------------------------

    def on_turn(self, rec: TurnRecord) -> None:
        run = self.run
        if run is None:
            return
        run.add_turn(rec)
        name = rec.transport
        exc = (
            None if rec.ok else RuntimeError(f"{rec.error_kind or rec.status}: {rec.error_message}")
        )
        ttft = D.sample(_TTFT, rec)
        if ttft is not None:
            self._fire(
                request_type=name,
                name=f"{name} ttft",
                response_time=ttft,
                response_length=0,
                exception=None,
                context={"rollout_id": rec.rollout_id, "turn": rec.turn_index},
            )
        # Locust counts a failed turn with how long it ran (0 without a send or an end)
        self._fire(
            request_type=name,
            name=f"{name} turn",
            response_time=D.sample(_TURN, rec, failed_too=True) or 0.0,
            response_length=rec.output_tokens,
            exception=exc,
            context={"rollout_id": rec.rollout_id, "turn": rec.turn_index},
        )

    def on_rollout(self, rec: RolloutRecord) -> None:
        run = self.run
        if run is None:
            return
        run.add_rollout(rec)
        exc = None if rec.ok else RuntimeError(f"{rec.error_kind or rec.status}")
        self._fire(
            request_type=rec.transport,
            name=f"{rec.transport} rollout",
            response_time=D.sample(_ROLLOUT, rec, failed_too=True) or 0.0,
            response_length=rec.turns,
            exception=exc,
            context={"rollout_id": rec.rollout_id},
        )


def edge_begin(config: RunConfig) -> EdgeBegin:
    """The run's settings as the edge host needs them; the API key is read here, on the
    worker (``--loopbench-api-key-env``), and the tokenizer is loaded by the host."""
    key = os.environ.get(config.api_key_env, "") if config.api_key_env else ""
    return EdgeBegin(
        TransportOptions.of(
            replace(config.client, api_key=key or PLACEHOLDER_API_KEY),
            config.target,
            # the edge host resolves it on its machine (harness.run.edge_host)
            rx_stamp=config.client.rx_stamp,
        ),
        model=config.model,
        tokenizer=config.tokenizer,
    )


def _health(own: ClientHealth, edge_state: dict[str, Any] | None) -> ClientHealth:
    """Both processes' wake-up lags together (the edge host measures; this loop anchors
    each claim's intended start), and the CPU share of the busier one."""
    if edge_state is None:
        return own
    edge = ClientHealth.from_state(edge_state)
    edge.loop_lag.merge(own.loop_lag)
    edge.cpu_share = max(edge.cpu_share, own.cpu_share)
    return edge


def _watch_loop(hist: Histogram) -> None:
    """Record how late the gevent loop wakes from short sleeps, as the asyncio watchdog does."""
    interval_ns = round(LOOP_WATCH_INTERVAL_S * 1e9)
    while True:
        t = time.perf_counter_ns()
        gevent.sleep(LOOP_WATCH_INTERVAL_S)
        hist.record_ns(max(0, time.perf_counter_ns() - t - interval_ns))
