"""The observer's process as the relay sees it: started, fed by the relay's own loop, stopped.

The steps one loop iteration queued go out as one pickled batch through a non-blocking pipe
transport: no feeder thread to share the GIL with the loop (docs/traces.md, "Overhead").  A
slow or stuck observer cannot take the relay down (:data:`MAX_BACKLOG_BYTES`, :data:`STALL_S`).
The frames are :class:`multiprocessing.connection.Connection`'s: the observer ``recv``s them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import pickle
import struct
import time
from multiprocessing.connection import Connection
from typing import Any, cast

try:
    import fcntl
except ImportError:  # not POSIX
    fcntl = None  # type: ignore[assignment]

from harness.record.observer import READY, Observed, serve_observer
from harness.run.proc_cpu import tree_cpu_seconds
from harness.wire.errors import LoopbenchError
from harness.wire.plural import counted

#: how long a spawned observer may take to import what it needs and say it is ready
START_S = 60.0
#: the pipe's capacity asked for (Linux's default ceiling for an unprivileged process)
_PIPE_BYTES = 1 << 20
_SETPIPE_SZ: int | None = getattr(fcntl, "F_SETPIPE_SZ", None)
#: how often a stop that waits for the observer checks that its process still lives
_ALIVE_CHECK_S = 0.5
#: how far the observer may fall behind (bytes the relay holds for it) before the trace stops
#: taking steps: a recording must never grow the relay's memory without bound
MAX_BACKLOG_BYTES = 128 << 20
#: a stop gives up on an observer that neither read from its pipe nor used CPU for this long
STALL_S = 30.0
#: the steps that are each one whole exchange, and those that carry a WebSocket's frames
_EXCHANGE_STEPS = frozenset({"http", "failed"})
_FRAME_STEPS = frozenset({"ws_client", "ws_server"})
_log = logging.getLogger(__name__)
_SHORT = struct.Struct("!i")
_LONG = struct.Struct("!iQ")


class ObserverError(LoopbenchError):
    """The observer's process (``--observer process``) could not be started."""


def frame(obj: object) -> tuple[bytes, bytes]:
    """``obj`` as one message ``Connection.recv`` reads: its head, then its pickle."""
    data = pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)
    n = len(data)
    return (_SHORT.pack(n) if n <= 0x7FFFFFFF else _LONG.pack(-1, n)), data


def _first_message(conn: Connection, timeout_s: float) -> object:
    """The first thing sent on ``conn`` within ``timeout_s`` (``EOFError`` if it closed)."""
    if not conn.poll(timeout_s):
        raise TimeoutError(f"it said nothing within {timeout_s:.0f} s")
    return conn.recv()


class _Feed(asyncio.Protocol):
    """The write end of the steps' pipe; ``lost`` once the observer's end closed."""

    def __init__(self) -> None:
        self.lost = False
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if not self.closed.done():
            self.closed.set_result(None)


class _Cut:
    """What the trace missed once the observer fell too far behind."""

    def __init__(self, after_s: float, behind: int, limit: int) -> None:
        self.after_s = after_s
        self.behind = behind
        self.limit = limit
        self.steps = 0
        self.exchanges = 0  # whole HTTP exchanges among the steps
        #: WebSocket connections with frames after the cut: each lost a response at least
        #: (one in flight, or a later one); connections that only opened or closed did not
        self.ws_connections: set[int] = set()

    def add(self, batch: list[tuple[int, str, tuple[Any, ...]]]) -> None:
        self.steps += len(batch)
        for conn, name, _ in batch:
            if name in _EXCHANGE_STEPS:
                self.exchanges += 1
            elif name in _FRAME_STEPS:
                self.ws_connections.add(conn)

    @property
    def lost(self) -> int:
        """Exchanges counted as failed: each HTTP one, and one per WebSocket connection cut
        (an estimate: a connection may have lost more)."""
        return self.exchanges + len(self.ws_connections)

    def warning(self) -> str:
        """Said when it happens: the counts are known only at the stop."""
        return (
            f"loopbench record: the observer's process is {_mib(self.behind)} behind the relay, "
            f"the most it may be ({_mib(self.limit)}): the trace takes no more steps from now "
            "on (the relay goes on unchanged); what it misses is counted when the recording stops"
        )

    def sentence(self) -> str:
        ws = len(self.ws_connections)
        return (
            f"the observer's process fell {_mib(self.behind)} behind the relay "
            f"{self.after_s:.0f} s into the recording (the most it may hold back is "
            f"{_mib(self.limit)}); from then on the trace took no steps: {self.steps:,} were "
            f"not observed ({counted(self.exchanges, 'HTTP exchange')}, and frames of "
            f"{counted(ws, 'WebSocket connection')}, each counted as one failed exchange: an "
            "estimate). The relay itself went on unchanged; a machine with a core to spare "
            "for the observer keeps up"
        )


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MiB"


class _Progress:
    """Whether the observer still gets on: its pipe drains, or its process uses CPU.

    Time without progress is counted only in the relay's own checks, at most two check
    periods per check: when the whole recording was frozen (Ctrl-Z, a paused container or
    VM), the observer was too, and the first check after it must not count that time
    against the observer.
    """

    def __init__(self, pid: int | None, limit_s: float) -> None:
        self.pid = pid
        self.limit_s = limit_s
        self._mark: tuple[int | None, float | None] | None = None
        self._still_s = 0.0
        self._checked = time.monotonic()

    def stalled(self, backlog: int | None) -> bool:
        cpu = tree_cpu_seconds(self.pid) if self.pid else None
        now = time.monotonic()
        since, self._checked = now - self._checked, now
        if backlog is None and cpu is None:
            return False  # nothing to judge by (no /proc): wait while it lives, as before
        if (backlog, cpu) != self._mark:
            self._mark, self._still_s = (backlog, cpu), 0.0
            return False
        self._still_s += min(since, 2 * _ALIVE_CHECK_S)
        return self._still_s >= self.limit_s


class ObserverProcess:
    """One observer process: :meth:`start`, :meth:`put` steps, :meth:`stop` for what it read."""

    def __init__(
        self,
        keep_content: bool,
        *,
        max_backlog_bytes: int = MAX_BACKLOG_BYTES,
        stall_s: float = STALL_S,
    ) -> None:
        self.keep_content = keep_content
        self.max_backlog_bytes = max_backlog_bytes
        self.stall_s = stall_s
        self.child: Any = None  # multiprocessing's Process, once started
        self._results: Connection | None = None
        self._transport: asyncio.WriteTransport | None = None
        self._feed: _Feed | None = None
        self._batch: list[tuple[int, str, tuple[Any, ...]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: Observed | None = None
        self._started_s = 0.0
        #: set once the observer fell too far behind: what the trace missed since
        self._cut: _Cut | None = None

    async def start(self, timeout_s: float = START_S) -> None:
        """Spawn the observer and wait until it reads: its start-up is not the relay's time.

        Raises :class:`ObserverError` when it does not start.
        """
        ctx = multiprocessing.get_context("spawn")
        steps_in, steps_out = ctx.Pipe(duplex=False)
        results_in, results_out = ctx.Pipe(duplex=False)
        self.child = ctx.Process(
            target=serve_observer,
            args=(steps_in, results_out, self.keep_content),
            name="loopbench-record-observer",
            daemon=True,
        )
        try:
            try:
                self.child.start()
            finally:
                steps_in.close()
                results_out.close()
            ready = await asyncio.to_thread(_first_message, results_in, timeout_s)
        except (OSError, EOFError, TimeoutError) as exc:
            steps_out.close()
            results_in.close()
            if self.child.pid is not None:
                self.child.join(1.0)  # its pipe closes as it dies: let its exit code land
            code = self.child.exitcode
            self._stop_child()
            why = f"exit code {code}" if code is not None else (str(exc) or type(exc).__name__)
            raise ObserverError(
                f"the recorder's observer process did not start ({why}); "
                "`--observer thread` reads the exchanges in the proxy's own process"
            ) from None
        if ready != READY:
            steps_out.close()
            results_in.close()
            self._stop_child()
            raise TypeError(f"the observer's process said {ready!r} before anything else")
        self._results = results_in
        fd = os.dup(steps_out.fileno())
        steps_out.close()
        if _SETPIPE_SZ is not None:  # Linux only; elsewhere the default pipe works too
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, _SETPIPE_SZ, _PIPE_BYTES)
        self._loop = asyncio.get_running_loop()
        feed = _Feed()
        transport, _ = await self._loop.connect_write_pipe(
            lambda: feed, os.fdopen(fd, "wb", buffering=0)
        )
        self._transport = cast(asyncio.WriteTransport, transport)
        self._feed = feed
        self._started_s = time.monotonic()

    def put(self, item: tuple[int, str, tuple[Any, ...]]) -> None:
        """Queue one step; it goes out with the others of this loop iteration."""
        if not self._batch:
            assert self._loop is not None
            self._loop.call_soon(self._flush)
        self._batch.append(item)

    def _flush(self) -> None:
        batch, self._batch = self._batch, []
        if self._cut is None and self._transport is not None:
            behind = self._transport.get_write_buffer_size()
            if behind >= self.max_backlog_bytes:
                self._cut = _Cut(time.monotonic() - self._started_s, behind, self.max_backlog_bytes)
                _log.warning("%s", self._cut.warning())
        if self._cut is not None:
            self._cut.add(batch)
            return
        self._write(batch)

    def _write(self, obj: object) -> None:
        feed, transport = self._feed, self._transport
        if feed is None or transport is None or feed.lost or transport.is_closing():
            return  # the observer is gone: stop() says what the trace lost
        transport.writelines(frame(obj))  # the head and the pickle: no copy to join them

    async def stop(self) -> Observed:
        """Send what is queued and the end, then wait for what the observer read.

        As long as the observer's process lives it is waited for, however far behind it is
        (the trace is what recording is for); one that died is not.  Once stopped, the same
        :class:`Observed` again.
        """
        if self._stopped is not None:
            return self._stopped
        if self._batch:
            self._flush()
        transport, feed = self._transport, self._feed
        progress = _Progress(self.child.pid if self.child is not None else None, self.stall_s)
        stalled = False
        if transport is not None and feed is not None:
            self._write(None)
            transport.close()  # once its buffer is written
            while not feed.closed.done():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(feed.closed), _ALIVE_CHECK_S)
                if feed.closed.done():
                    break
                if self.child is None or not self.child.is_alive():
                    transport.abort()  # nobody is left to read the rest
                    break
                if progress.stalled(transport.get_write_buffer_size()):
                    transport.abort()
                    stalled = True
                    break
            self._transport = None
        observed = Observed()
        if self._results is not None:
            results, self._results = self._results, None
            if stalled:
                results.close()
            else:
                observed, stalled = await self._answer(results, progress)
            if stalled:
                observed = self._stalled()
        self._stop_child(wait_s=0.0 if stalled else 5.0)
        if self._cut is not None:
            observed.lost.append(self._cut.sentence())
            observed.unread_without_exchange += self._cut.lost
        self._stopped = observed
        return observed

    async def _answer(self, results: Connection, progress: _Progress) -> tuple[Observed, bool]:
        """The observer's answer, read on a thread while it gets on; (answer, stalled).

        An observer that stalls, before it answers or part-way through, is killed: its end
        of the pipe closes, which ends the thread's read.
        """
        reading = asyncio.ensure_future(asyncio.to_thread(self._collect, results))
        while not (await asyncio.wait({reading}, timeout=_ALIVE_CHECK_S))[0]:
            if self.child is not None and self.child.is_alive() and progress.stalled(None):
                self.child.kill()
                await reading
                return Observed(), True
        return reading.result(), False

    def _stalled(self) -> Observed:
        observed = Observed()
        pid = self.child.pid if self.child is not None else None
        observed.lost.append(
            f"the observer's process (pid {pid}) neither read the relay's steps nor used CPU "
            f"for {self.stall_s:g} s after the recording stopped, and was ended: the trace "
            "has no exchanges (the relay's own traffic was not affected)"
        )
        return observed

    def _collect(self, results: Connection) -> Observed:
        """What the observer's process read, once it has read every step."""
        try:
            observed = results.recv()
        except (EOFError, OSError):
            code = None
            if self.child is not None:
                self.child.join(1.0)  # its pipe closes as it dies: let its exit code land
                code = self.child.exitcode
            observed = Observed()
            observed.lost.append(
                f"the observer's process ended before it sent what it read (exit code {code}): "
                "the trace has no exchanges"
            )
        finally:
            results.close()
        if not isinstance(observed, Observed):
            raise TypeError(f"the observer's process sent {type(observed).__name__}")
        return observed

    def _stop_child(self, *, wait_s: float = 5.0) -> None:
        if self.child is not None and self.child.pid is None:  # it never started
            self.child = None
        if self.child is not None:
            self.child.join(wait_s)
            if self.child.is_alive():
                self.child.kill()
                self.child.join(5.0)
            self.child = None
