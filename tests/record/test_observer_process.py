"""The observer's process fed by the relay's loop: frames ``Connection.recv`` reads, in order."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Coroutine
from multiprocessing.connection import Connection
from typing import Any, TypeVar

import pytest

from harness.record import observer_process
from harness.record.observer_process import ObserverProcess, frame

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is a Linux dependency
    uvloop = None

T = TypeVar("T")
#: the loops the pipe transport meets: asyncio's in tests and libraries, uvloop in the command
LOOPS = ["asyncio", *(["uvloop"] if uvloop is not None else [])]


def _run(coro: Coroutine[Any, Any, T], loop: str) -> T:
    result: T = asyncio.run(coro) if loop == "asyncio" else uvloop.run(coro)  # type: ignore[union-attr]
    return result


def test_a_frame_is_what_a_multiprocessing_connection_reads() -> None:
    read_fd, write_fd = os.pipe()
    reader = Connection(read_fd, writable=False)
    try:
        sent = [(1, "ws_client", (1, b"\x81\x05hello", 123)), (2, "ws_close", (2, 456))]
        os.write(write_fd, b"".join((*frame(sent), *frame(None))))
        assert reader.recv() == sent
        assert reader.recv() is None
    finally:
        os.close(write_fd)
        reader.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("loop", LOOPS)
def test_steps_put_across_loop_iterations_reach_the_observer_whole_and_in_order(loop: str) -> None:
    """More than the pipe holds (a 3 MiB step among 2,000): nothing blocks the loop, nothing
    is lost or reordered, and stop() waits until the observer has read it all."""
    big = "x" * (3 << 20)

    async def main() -> list[int]:
        process = ObserverProcess(keep_content=False)
        await process.start()
        ticks = 0
        for i in range(2000):
            why = big if i == 1000 else f"step {i}"
            process.put((i, "failed", ("responses", "http", i, i, i + 1, 500, why)))
            if i % 7 == 0:  # some steps share a loop iteration, some do not
                await asyncio.sleep(0)
                ticks += 1
        observed = await process.stop()
        assert ticks > 200
        assert observed.unread[1000].endswith(big)
        assert observed.unread[1999].endswith("step 1999")
        assert process.child is None
        return [ex.connection for ex in observed.exchanges]

    assert _run(main(), loop) == list(range(2000))


async def _stopped_behind(process: ObserverProcess, steps: int, reason: str) -> int:
    """Starts ``process``, stops its observer (SIGSTOP) and hands it ``steps`` failed exchanges
    whose reasons end in ``reason``: the observer's pid (the caller continues it)."""
    await process.start()
    assert process.child is not None
    pid = process.child.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        for i in range(steps):
            process.put((i, "failed", ("responses", "http", i, i, i + 1, 500, reason)))
            await asyncio.sleep(0)
    except BaseException:
        os.kill(pid, signal.SIGCONT)
        raise
    return pid


@pytest.mark.timeout(120)
@pytest.mark.parametrize("loop", LOOPS)
def test_a_stop_waits_for_an_observer_that_is_behind_short_of_the_stall_limit(loop: str) -> None:
    """The observer is stopped (SIGSTOP) with 4 MiB still to read, more than its pipe holds:
    stop() waits (short of STALL_S) instead of giving up on the trace, and gets every step."""
    big = "y" * (4 << 20)

    async def main() -> None:
        process = ObserverProcess(keep_content=False)
        pid = await _stopped_behind(process, 4, big)
        try:
            stopping = asyncio.ensure_future(process.stop())
            await asyncio.sleep(2.5)  # five of its checks that the observer still lives
            assert not stopping.done()
        finally:
            os.kill(pid, signal.SIGCONT)
        observed = await stopping
        assert [ex.connection for ex in observed.exchanges] == [0, 1, 2, 3]
        assert all(why.endswith(big) for why in observed.unread)
        assert await process.stop() is observed  # a second stop: the same, not an empty one

    _run(main(), loop)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("when", ["reading", "answering"])
def test_a_stop_ends_an_observer_that_neither_reads_nor_runs(loop: str, when: str) -> None:
    """A hung observer (SIGSTOP, never continued) does not hang the command: after
    ``stall_s`` without reading or using CPU it is ended and the trace says why.  Stuck with
    steps still to read, or stuck after the end of the steps, before it answered."""
    big = "z" * (4 << 20)

    async def main() -> None:
        process = ObserverProcess(keep_content=False, stall_s=1.5)
        pid = await _stopped_behind(process, 3 if when == "reading" else 0, big)
        observed = await process.stop()
        assert observed.exchanges == []
        assert observed.unread == []
        [why] = observed.lost
        assert f"(pid {pid}) neither read" in why
        assert "the trace has no exchanges" in why
        assert process.child is None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # ended and reaped

    _run(main(), loop)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("loop", LOOPS)
def test_an_observer_too_far_behind_stops_taking_steps_and_the_trace_says_what_it_missed(
    loop: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With the observer stopped, the relay's backlog reaches ``max_backlog_bytes``: from then
    on no step is kept (memory stays bounded), the steps before arrive whole, and the trace
    counts what it missed: each HTTP exchange, and each WebSocket connection cut."""
    mib = "m" * (1 << 20)

    async def main() -> tuple[list[int], Any]:
        process = ObserverProcess(keep_content=False, max_backlog_bytes=2 << 20)
        pid = await _stopped_behind(process, 8, mib)
        try:
            process.put((99, "ws_client", (99, b"\x81\x00", 1)))
            process.put((99, "ws_close", (99, 2)))
            await asyncio.sleep(0)
            assert process._transport is not None
            assert process._transport.get_write_buffer_size() < 4 << 20  # bounded
        finally:
            os.kill(pid, signal.SIGCONT)
        observed = await process.stop()
        return [ex.connection for ex in observed.exchanges], observed

    with caplog.at_level("WARNING", logger="harness.record.observer_process"):
        kept, observed = _run(main(), loop)
    assert 1 <= len(kept) < 8
    assert kept == list(range(len(kept)))
    missed = 8 - len(kept)
    [cut] = observed.lost
    assert len(observed.unread) == len(kept)  # the kept "failed" steps' own reasons
    assert "MiB behind the relay" in cut
    assert "(the most it may hold back is 2 MiB)" in cut
    assert f"{missed + 2:,} were not observed ({missed:,} HTTP exchange" in cut
    assert "and frames of 1 WebSocket connection, each counted as one failed" in cut
    assert observed.unread_without_exchange == missed + 1
    [warned] = [r.getMessage() for r in caplog.records if "behind the relay" in r.getMessage()]
    assert "the trace takes no more steps from now on" in warned
    assert "(2 MiB)" in warned


@pytest.mark.timeout(120)
@pytest.mark.parametrize("loop", LOOPS)
def test_a_stop_does_not_blame_the_observer_for_a_recording_frozen_as_a_whole(loop: str) -> None:
    """Ctrl-Z, a paused container: the relay's loop and the observer stop together for
    longer than ``stall_s``.  Once both run again the observer drains its pipe; the time
    frozen is not counted against it, so it is not ended and the trace keeps every step."""
    big = "f" * (4 << 20)

    async def main() -> None:
        process = ObserverProcess(keep_content=False, stall_s=1.5)
        pid = await _stopped_behind(process, 3, big)
        try:
            stopping = asyncio.ensure_future(process.stop())
            await asyncio.sleep(0.7)  # the stop has checked once: nothing moved
            time.sleep(2.0)  # the relay's loop frozen too, longer than stall_s
        finally:
            os.kill(pid, signal.SIGCONT)
        observed = await stopping
        assert observed.lost == []
        assert [ex.connection for ex in observed.exchanges] == [0, 1, 2]

    _run(main(), loop)


def test_progress_counts_only_time_the_relay_itself_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stall clock, on a fake clock: a gap between two checks (the recording frozen as a
    whole) counts for at most two check periods; an observer that stays still while the
    relay keeps checking is stalled once ``limit_s`` of checks add up; any progress resets."""
    now = [0.0]
    cpu = [5.0]
    monkeypatch.setattr(observer_process.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(observer_process, "tree_cpu_seconds", lambda pid: cpu[0])
    progress = observer_process._Progress(pid=1, limit_s=1.5)

    def check(at: float, backlog: int | None = 100) -> bool:
        now[0] = at
        return progress.stalled(backlog)

    assert not check(0.5)  # first sight: the mark
    assert not check(2.7)  # 2.2 s frozen with the relay: counted as 1.0
    assert not check(3.0)  # 1.3
    assert check(3.2)  # 1.5: still, while the relay ran
    cpu[0] = 5.01
    assert not check(3.7)  # it used CPU: reset
    assert not check(4.2, backlog=50)  # its pipe drained: reset
    assert not check(5.2, backlog=50)
    assert check(5.7, backlog=50)
    assert not observer_process._Progress(pid=None, limit_s=0.0).stalled(None)  # nothing to judge
