"""The observer's process fed by the relay's loop: frames ``Connection.recv`` reads, in order."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Coroutine
from multiprocessing.connection import Connection
from typing import Any, TypeVar

import pytest

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


@pytest.mark.timeout(120)
@pytest.mark.parametrize("loop", LOOPS)
def test_a_stop_waits_for_an_observer_that_is_behind_short_of_the_stall_limit(loop: str) -> None:
    """The observer is stopped (SIGSTOP) with 4 MiB still to read, more than its pipe holds:
    stop() waits (short of STALL_S) instead of giving up on the trace, and gets every step."""
    big = "y" * (4 << 20)

    async def main() -> None:
        process = ObserverProcess(keep_content=False)
        await process.start()
        pid = process.child.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            for i in range(4):
                process.put((i, "failed", ("responses", "http", i, i, i + 1, 500, big)))
                await asyncio.sleep(0)
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
        await process.start()
        pid = process.child.pid
        os.kill(pid, signal.SIGSTOP)
        if when == "reading":
            for i in range(3):
                process.put((i, "failed", ("responses", "http", i, i, i + 1, 500, big)))
                await asyncio.sleep(0)
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
        await process.start()
        pid = process.child.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            for i in range(8):
                process.put((i, "failed", ("responses", "http", i, i, i + 1, 500, mib)))
                await asyncio.sleep(0)
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
    assert "(more than the 2 MiB it may hold back)" in cut
    assert f"{missed + 2:,} were not observed ({missed:,} HTTP exchange" in cut
    assert "frames of 1 WebSocket connection)" in cut
    assert observed.unread_without_exchange == missed + 1
    assert [r.message for r in caplog.records if "behind the relay" in r.message] != []
