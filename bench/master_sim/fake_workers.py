"""Many fake Locust workers in one process, each its own zmq client of a real master.

Run by :mod:`.sim` as ``python -m bench.master_sim.fake_workers`` (a Locust process:
importing locust monkey-patches it with gevent).  Each fake worker speaks Locust's own
worker protocol over ``locust.rpc`` (``client_ready``, heartbeats every second, ``stats``
every 3 s from Locust's own ``RequestStats``, ``spawning``/``spawning_complete``,
``client_stopped``) and loopbench's messages, built by ``harness.locust_driver.protocol``
only: its agents claim rollouts and report them finished, and every
:data:`~harness.locust_driver.worker.SHIP_INTERVAL_S` it ships the turn rows its running
agents produced (``turn_rate`` turns a second each) and the rollout rows of the rollouts
they finished.

What makes 64 of them cheap on two cores: no I/O to a server and no per-turn work.  The
turn rows are real rows (``wire.turn_to_row`` of the selfbench memory step's synthetic
records: ~60 deltas, ~1,200 input tokens, a response id) built once per process and
sliced per ship; a rollout row is built per finished rollout, with the id the master
handed out, so the master's claim bookkeeping is exercised as in a real run.  The final
report carries a real ``Accumulator.to_state()`` (HDR blobs) of those records.  The
per-message cost left is msgpack encoding and the zmq send, as in a real worker.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from itertools import count
from pathlib import Path
from typing import Any

import gevent
import locust
from gevent.event import Event
from locust.event import Events
from locust.rpc import Message, rpc
from locust.runners import MASTER_HEARTBEAT_TIMEOUT
from locust.stats import RequestStats, setup_distributed_stats_event_listeners

from bench.selfbench.memory import TURNS_PER_ROLLOUT, synthetic_rollout, synthetic_turn
from harness.locust_driver.protocol import (
    MSG_CLAIM,
    MSG_FINAL,
    MSG_HELLO,
    MSG_ROWS,
    MSG_WORK,
    RUN_OPTION,
    RunConfig,
    claim_message,
    final_message,
    hello_message,
    rows_message,
)
from harness.locust_driver.wire import rollout_to_row, turn_to_row
from harness.locust_driver.worker import SHIP_INTERVAL_S
from harness.metrics.hdr import Histogram
from harness.metrics.summary import Accumulator
from harness.run.health import CpuMeter
from harness.wire.version import loopbench_version
from harness.workload.records import RolloutRecord, TurnRecord

#: turn rows built once per process and sliced per ship (a ship takes consecutive rows)
POOL_TURNS = 2_000
#: how often an agent's end of rollout is looked for (claims are sent within this)
AGENT_TICK_S = 0.05
#: no heartbeat from the master for this long: it is gone, this fake worker ends (Locust's
#: own timeout: the master sends none while it generates the plan)
MASTER_GONE_S = float(MASTER_HEARTBEAT_TIMEOUT)
#: Locust's own intervals (locust.runners): heartbeats and stats reports
HEARTBEAT_S = 1.0
STATS_S = 3.0
#: Locust stats samples logged per request name and stats report: enough for a stats
#: message of a real worker's size (its size follows the distinct response times)
STATS_SAMPLES = 200
#: the final accumulator's rollout ids start at this many times the worker's index + 1
FINAL_ROLLOUT_IDS = 10_000_000


@dataclass(slots=True)
class Pool:
    """What every fake worker of this process ships: real rows, built once."""

    turns: list[TurnRecord]
    turn_rows: list[list[Any]]
    rollout_template: RolloutRecord
    ttft_ms: list[float]

    @classmethod
    def build(cls) -> Pool:
        rng = random.Random(1)
        turns = [synthetic_turn(i, rng) for i in range(POOL_TURNS)]
        return cls(
            turns,
            [turn_to_row(rec) for rec in turns],
            synthetic_rollout(0),
            [(rec.first_token_ns - rec.sent_ns) / 1e6 for rec in turns],
        )

    def state(self, first_rollout_id: int) -> dict[str, Any]:
        """A worker's final accumulator state: the pool's records under rollout ids of its
        own (two accumulators that measured the same rollout refuse to merge)."""
        acc = Accumulator()
        for rec in self.turns:
            rid = first_rollout_id + rec.rollout_id
            acc.add_turn(replace(rec, rollout_id=rid))
            if rec.turn_index == TURNS_PER_ROLLOUT - 1:
                acc.add_rollout(replace(self.rollout_template, rollout_id=rid))
        return acc.to_state()


@dataclass(slots=True)
class Sent:
    """One fake worker's log: what it sent, when (``time.monotonic_ns``, shared by every
    process of the machine, so the master's handling stamps compare with it)."""

    node: str
    rows_sent_ns: list[int] = field(default_factory=list)
    rows_sizes: list[tuple[int, int]] = field(default_factory=list)
    claims: int = 0
    works: int = 0
    final_sent_ns: int = 0
    final_rows: tuple[int, int] = (0, 0)
    turn_rows: int = 0
    rollout_rows: int = 0
    stats_reports: int = 0
    agents: int = 0
    # When the first rollout began: the rows' own clock starts there, whatever the master's
    # handling stamps say (on a busy machine they bunch up and shrink the window).
    load_started_ns: int = 0


class FakeWorker:
    def __init__(
        self, pool: Pool, host: str, port: int, name: str, index: int, turn_rate: float
    ) -> None:
        self.pool = pool
        # Rollout ids no scenario reaches, a range per worker.
        self._state = pool.state(FINAL_ROLLOUT_IDS * (index + 1))
        self.node = f"{name}_{uuid.uuid4().hex}"
        self.client = rpc.Client(host, port, self.node)
        self.turn_rate = turn_rate
        self.sent = Sent(self.node)
        self.config: RunConfig | None = None
        self.state = "ready"
        self.agents = 0
        self._req = count()
        #: (end monotonic s, tiebreak, phase, rollout id, round, transport, turns)
        self._running: list[tuple[float, int, int, int, int, str, int]] = []
        self._tiebreak = count()
        self._turns_due = 0.0
        self._cursor = random.randrange(POOL_TURNS)
        self._rollout_rows: list[list[Any]] = []
        self._stats = RequestStats(use_response_times_cache=False)
        self._events = Events()
        setup_distributed_stats_event_listeners(self._events, self._stats)
        self._greenlets: list[gevent.Greenlet] = []
        self.done = Event()
        self.master_seen = time.monotonic()

    def send(self, msg_type: str, data: Any) -> None:
        self.client.send(Message(msg_type, data, self.node))

    def start(self) -> None:
        self.send("client_ready", locust.__version__)
        self._greenlets = [gevent.spawn(self._receive), gevent.spawn(self._heartbeat)]

    def _heartbeat(self) -> None:
        while True:
            if time.monotonic() - self.master_seen > MASTER_GONE_S:
                self.done.set()  # the master is gone (a real worker waits 60 s)
                return
            self.send(
                "heartbeat",
                {"state": self.state, "current_cpu_usage": 0.0, "current_memory_usage": 0},
            )
            gevent.sleep(HEARTBEAT_S)

    def _receive(self) -> None:
        while True:
            msg = self.client.recv()
            if msg.type == "spawn":
                self._on_spawn(msg.data)
            elif msg.type == MSG_WORK:
                self._on_work(msg.data)
            elif msg.type == "stop":
                self._on_stop()
            elif msg.type == "heartbeat":
                self.master_seen = time.monotonic()
            elif msg.type == "quit":
                self.done.set()
                return

    def _on_spawn(self, job: dict[str, Any]) -> None:
        self.send("spawning", None)
        wire = job["parsed_options"].get(RUN_OPTION)
        if self.config is None and wire:
            self.config = RunConfig.from_wire(wire)
            self.send(
                MSG_HELLO, hello_message(self.config.run_id, os.getpid(), loopbench_version())
            )
            self._greenlets += [gevent.spawn(self._agents_and_ship), gevent.spawn(self._report)]
        users = sum(job["user_classes_count"].values())
        for _ in range(max(0, users - self.agents)):
            self._claim(None)
        self.agents = self.sent.agents = max(self.agents, users)
        self.state = "running"
        self.send(
            "spawning_complete",
            {"user_classes_count": job["user_classes_count"], "user_count": users},
        )

    def _claim(self, finished: tuple[int, int] | None) -> None:
        self.sent.claims += 1
        self.send(MSG_CLAIM, claim_message(next(self._req), finished))

    def _on_work(self, data: dict[str, Any]) -> None:
        self.sent.works += 1
        if data["kind"] != "run":
            return  # this agent is idle from now on, as a real one
        turns = len(data["plan"]["turns"])
        if not self.sent.load_started_ns:
            self.sent.load_started_ns = time.monotonic_ns()
        end = time.monotonic() + turns / self.turn_rate
        heapq.heappush(
            self._running,
            (
                end,
                next(self._tiebreak),
                int(data["phase"]),
                int(data["plan"]["rollout_id"]),
                int(data["round"]),
                str(data["transport"]),
                turns,
            ),
        )

    def _agents_and_ship(self) -> None:
        # Ships start at a random point of the interval, as workers that joined at
        # different moments do.
        gevent.sleep(random.uniform(0, SHIP_INTERVAL_S))
        next_ship = time.monotonic() + SHIP_INTERVAL_S
        last = time.monotonic()
        while self.config is not None:
            gevent.sleep(AGENT_TICK_S)
            now = time.monotonic()
            self._turns_due += len(self._running) * self.turn_rate * (now - last)
            last = now
            while self._running and self._running[0][0] <= now:
                _, _, phase, rollout_id, rnd, transport, turns = heapq.heappop(self._running)
                rec = replace(
                    self.pool.rollout_template,
                    rollout_id=rollout_id,
                    round=rnd,
                    transport=transport,
                    turns=turns,
                )
                self._rollout_rows.append(rollout_to_row(rec))
                self._claim((phase, rollout_id))
            if now >= next_ship:
                next_ship += SHIP_INTERVAL_S
                self.ship()

    def _take_rows(self) -> tuple[list[list[Any]], list[list[Any]]]:
        n = int(self._turns_due)
        self._turns_due -= n
        rows = self.pool.turn_rows
        start = self._cursor
        turns = [rows[(start + i) % POOL_TURNS] for i in range(n)]
        self._cursor = (start + n) % POOL_TURNS
        rollouts, self._rollout_rows = self._rollout_rows, []
        self._log_stats(n, len(rollouts))
        return turns, rollouts

    def ship(self) -> None:
        config = self.config
        turns, rollouts = self._take_rows()
        if config is None or not (turns or rollouts):
            return
        self.sent.rows_sent_ns.append(time.monotonic_ns())
        self.send(MSG_ROWS, rows_message(config.run_id, turns, rollouts))
        self.sent.rows_sizes.append((len(turns), len(rollouts)))
        self.sent.turn_rows += len(turns)
        self.sent.rollout_rows += len(rollouts)

    def _log_stats(self, turns: int, rollouts: int) -> None:
        ttft = self.pool.ttft_ms
        for i in range(min(turns, STATS_SAMPLES)):
            ms = round(ttft[(self._cursor + i) % POOL_TURNS])
            self._stats.log_request("ws", "ws ttft", ms, 0)
            self._stats.log_request("ws", "ws turn", ms * 4, 120)
        for _ in range(min(rollouts, STATS_SAMPLES)):
            self._stats.log_request("ws", "ws rollout", 11_000, TURNS_PER_ROLLOUT)

    def _report(self) -> None:
        while True:
            gevent.sleep(STATS_S)
            self._send_stats()

    def _send_stats(self) -> None:
        data: dict[str, Any] = {}
        self._events.report_to_master.fire(client_id=self.node, data=data)
        data["user_classes_count"] = {"LoopbenchAgent": self.agents}
        data["user_count"] = self.agents
        self.send("stats", data)
        self.sent.stats_reports += 1

    def _on_stop(self) -> None:
        config, self.config = self.config, None
        for greenlet in self._greenlets[2:]:
            greenlet.kill(block=False)
        if config is not None:
            turns, rollouts = self._take_rows()
            health = CpuMeter().read(Histogram())
            self.sent.final_sent_ns = time.monotonic_ns()
            self.send(
                MSG_FINAL,
                final_message(
                    config.run_id,
                    state=self._state,
                    turns=turns,
                    rollouts=rollouts,
                    turns_total=self.sent.turn_rows + len(turns),
                    rollouts_total=self.sent.rollout_rows + len(rollouts),
                    health=health.to_state(),
                ),
            )
            self.sent.final_rows = (len(turns), len(rollouts))
            self.sent.turn_rows += len(turns)
            self.sent.rollout_rows += len(rollouts)
        self.agents = 0
        self._running.clear()
        self.state = "stopped"
        self._send_stats()
        self.send("client_stopped", None)
        # As a real worker: ready again, so the master knows it and sends it the quit.
        self.send("client_ready", locust.__version__)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.master_sim.fake_workers")
    parser.add_argument("--master-port", type=int, required=True)
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--name", default="fake")
    parser.add_argument("--first-index", type=int, default=0, help="this process's first worker")
    parser.add_argument("--turn-rate", type=float, default=1.0)
    parser.add_argument("--deadline-s", type=float, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    cpu = CpuMeter()
    pool = Pool.build()
    workers = [
        FakeWorker(
            pool,
            "127.0.0.1",
            args.master_port,
            f"{args.name}-{i}",
            args.first_index + i,
            args.turn_rate,
        )
        for i in range(args.workers)
    ]
    for worker in workers:
        worker.start()
    # Bounded: every fake worker ends at the master's quit, or all at the deadline.
    gevent.joinall([gevent.spawn(w.done.wait) for w in workers], timeout=args.deadline_s)
    share = cpu.read(Histogram()).cpu_share
    Path(args.out).write_text(
        json.dumps([{**asdict(w.sent), "process_cpu_share": share} for w in workers]),
        encoding="utf-8",
    )
    for worker in workers:
        worker.client.close(linger=0)
    return 0 if all(w.done.is_set() for w in workers) else 1


if __name__ == "__main__":
    sys.exit(main())
