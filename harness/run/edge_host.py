"""The asyncio edge for a Locust worker: ``python -m harness.run.edge_host``, the worker's child.

Why a child and what crosses the pipe: docs/distributed.md, "The asyncio edge in a child of
each worker".  It runs each claimed rollout with the rollout loop ``loopbench run`` uses
(:func:`harness.transports.rollout_loop.run_rollout`), under the same watch over its own
health (:class:`~harness.run.passes.ClientWatch`), and streams the records back
(:mod:`harness.run.edge_frames`).  It ends when its stdin does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from harness.run import edge_frames as ef
from harness.run.event_loop import run_async
from harness.run.passes import ClientWatch
from harness.run.short_slice import request_short_slice
from harness.run.tokenizer import load_tokens
from harness.transports import Transport, make_transport
from harness.transports.rollout_loop import run_rollout
from harness.transports.rx_socket import resolve_rx_stamp
from harness.workload.records import RolloutRecord, TurnRecord

log = logging.getLogger("loopbench.edge_host")


class EdgeHost:
    """Runs the rollouts it is handed; ``send`` takes each message for the worker."""

    def __init__(self, send: Callable[[tuple[Any, ...]], None]) -> None:
        self._send = send
        self._begin: ef.EdgeBegin | None = None
        self._transports: dict[str, Transport] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._watch: ClientWatch | None = None

    def handle(self, message: tuple[Any, ...]) -> None:
        kind = message[0]
        if kind == "run":
            job: ef.EdgeRollout = message[1]
            self._tasks[job.key] = asyncio.ensure_future(self._run(job))
        elif kind == "cancel":
            task = self._tasks.get(message[1])
            if task is not None:
                task.cancel()
        elif kind == "begin":
            begin: ef.EdgeBegin = message[1]
            # As `loopbench run` does: with kernel stamps a first token's time is the
            # socket's, not when this process got a core to read it (docs/metrics.md §1.9).
            rx_stamp = resolve_rx_stamp(begin.options.rx_stamp)
            begin = replace(begin, options=replace(begin.options, rx_stamp=rx_stamp))
            if begin.tokenizer:
                tokens = load_tokens(begin.tokenizer)
                begin = replace(begin, options=replace(begin.options, tokens=tokens))
            self._begin = begin
            self._watch = ClientWatch()
        else:
            log.error("edge host: unknown message %r ignored", kind)

    def ready(self) -> None:
        self._send(("ready",))

    @property
    def running(self) -> bool:
        return self._begin is not None or bool(self._tasks)

    def _transport(self, name: str) -> Transport:
        transport = self._transports.get(name)
        if transport is None:
            assert self._begin is not None, "a rollout before the run's settings"
            transport = self._transports[name] = make_transport(name, self._begin.options)
        return transport

    async def _run(self, job: ef.EdgeRollout) -> None:
        begin = self._begin
        assert begin is not None, "a rollout before the run's settings"
        intended = time.perf_counter_ns() if job.intended_ns is None else job.intended_ns
        try:
            delay_s = (intended - time.perf_counter_ns()) / 1e9
            if delay_s > 0:
                await asyncio.sleep(delay_s)
            rec = await run_rollout(
                self._transport(job.transport),
                job.plan,
                intended_start_ns=intended,
                round_index=job.round,
                model=begin.model,
                on_turn=self._turn,
                hints=begin.options.hints,
                rollout_key=job.rollout_key,
            )
        except asyncio.CancelledError:
            return  # the worker stopped this user: nothing more of the rollout is reported
        except Exception as exc:  # a driver bug must not stall the phase: report and move on
            log.exception(
                "rollout %d over %s failed in the edge", job.plan.rollout_id, job.transport
            )
            rec = RolloutRecord.driver_failed(
                job.transport, job.plan.rollout_id, job.round, intended, time.perf_counter_ns(), exc
            )
        finally:
            self._tasks.pop(job.key, None)
        self._send(("rollout", job.key, rec))

    def _turn(self, rec: TurnRecord) -> None:
        self._send(("turn", ef.pack_turn(rec)))

    async def end(self) -> None:
        """Stop what still runs, close the run's transports, then say the run's health."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        transports, self._transports = list(self._transports.values()), {}
        for transport in transports:
            await transport.aclose()
        watch, self._watch = self._watch, None
        health = (await watch.stop()).to_state() if watch is not None else None
        self._begin = None
        self._send(("ended", health))


async def serve(read_fd: int, write_fd: int) -> None:
    """Read messages from ``read_fd`` until it closes; write the answers to ``write_fd``."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**26)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0)
    )
    writer, _ = await loop.connect_write_pipe(
        asyncio.Protocol, os.fdopen(write_fd, "wb", buffering=0)
    )
    pending: list[bytes] = []

    def flush() -> None:
        writer.write(b"".join(pending))
        pending.clear()

    def send(message: tuple[Any, ...]) -> None:
        # One write per loop iteration, not per record: the records of a busy iteration go
        # to the worker together (their stamps were taken when they were read).
        if not pending:
            loop.call_soon(flush)
        pending.append(ef.frame(message))

    host = EdgeHost(send)
    host.ready()
    try:
        while True:
            try:
                header = await reader.readexactly(ef.HEADER_BYTES)
                body = await reader.readexactly(ef.body_length(header))
            except asyncio.IncompleteReadError:
                return  # the worker closed our stdin, or died
            message = ef.unframe(body)
            if message[0] == "end":
                # Awaited before the next message is read: a run begun right after (Locust's
                # web UI) must not meet this one's closing transports.
                await host.end()
            else:
                host.handle(message)
    finally:
        if host.running:
            await host.end()


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s edge_host: %(message)s")
    # stdout carries frames only: anything printed by accident goes to stderr instead.
    out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # Beside its worker, its master and often the server on few cores: a first token that
    # arrives while they run is stamped when this process gets a core (Linux 6.12+: a
    # waking task with the shorter slice is let in first; elsewhere nothing changes).
    request_short_slice()
    run_async(serve(0, out))


if __name__ == "__main__":
    main()
