"""The recording proxy's relay: flow control, TCP_NODELAY, and the --bench that measures it.

Real sockets on 127.0.0.1, upstreams started here on port 0; no wall-clock thresholds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import orjson
import pytest

from harness.cli.common import EXIT_INTERRUPTED
from harness.record import bench as bench_module
from harness.record.bare_relay import serve as serve_bare_relay
from harness.record.bench import (
    BARE_RELAY,
    THIS_PROXY,
    ArmResult,
    BenchProcessError,
    BenchResult,
    _upstream_times,
    orders,
    run_bench,
)
from harness.record.proxy import READY_PREFIX, RecordingProxy, Upstream, record_until_stopped
from harness.run.short_slice import SLICE_NS, request_short_slice, thread_slice_ns
from harness.transports.rx_socket import kernel_stamps_supported
from harness.wire.exit_codes import ExitCode
from tests.runs import ROOT

pytestmark = pytest.mark.timeout(120)

BIG = 8 * 1024 * 1024  # far more than both legs' socket buffers and the transports' limits


BLOCK = bytes(range(256)) * 256  # 64 KiB
HEAD = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"


async def _big_upstream(heads: list[bytes] | None = None) -> asyncio.Server:
    """Answers one request with a BIG chunked body, as fast as it may write; the request
    heads it got go to ``heads``."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if heads is not None:
                heads.append(head)
            writer.write(HEAD)
            for _ in range(BIG // len(BLOCK)):
                writer.write(b"%x\r\n" % len(BLOCK) + BLOCK + b"\r\n")
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            await reader.read()
        finally:
            writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0)


def _big_digest() -> bytes:
    """What a client of :func:`_big_upstream` must receive, hashed."""
    want = hashlib.sha256(HEAD)
    for _ in range(BIG // len(BLOCK)):
        want.update(b"%x\r\n" % len(BLOCK) + BLOCK + b"\r\n")
    want.update(b"0\r\n\r\n")
    return want.digest()


async def _read_chunked_digest(reader: asyncio.StreamReader) -> bytes:
    """Read through the chunked body's last chunk; the bytes read, hashed."""
    got = hashlib.sha256()
    seen = b""
    while not seen.endswith(b"0\r\n\r\n"):
        chunk = await reader.read(1 << 20)
        if not chunk:
            break
        got.update(chunk)
        seen = (seen + chunk)[-16:]
    return got.digest()


@contextlib.asynccontextmanager
async def _proxy_before(serve: Callable[..., Awaitable[None]]) -> AsyncIterator[RecordingProxy]:
    """A recording proxy in front of an upstream answering with ``serve``."""
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proxy = RecordingProxy(Upstream.parse(f"http://127.0.0.1:{port}/v1"))
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()
        server.close()


def test_a_response_larger_than_every_buffer_reaches_a_slow_client_whole() -> None:
    """The relay holds the upstream back while the client does not read (no unbounded
    buffering, nothing dropped): every byte arrives, in order."""

    async def main() -> tuple[bytes, list[int]]:
        server = await _big_upstream()
        port = server.sockets[0].getsockname()[1]
        proxy = RecordingProxy(Upstream.parse(f"http://127.0.0.1:{port}/v1"))
        await proxy.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            await asyncio.sleep(0.5)  # not reading: the proxy must stop reading upstream
            # what the proxy holds for this client meanwhile: bounded by the flow control
            buffered = [r.client.get_write_buffer_size() for r in proxy._relays]
            got = await _read_chunked_digest(reader)
            writer.close()
        finally:
            await proxy.stop()
            server.close()
        return got, buffered

    got, buffered = asyncio.run(asyncio.wait_for(main(), 90))
    assert got == _big_digest()
    assert buffered and max(buffered) < BIG // 4


def test_both_legs_send_each_chunk_at_once() -> None:
    """TCP_NODELAY on the client's and the upstream's socket of a relayed connection."""

    async def main() -> list[int]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            await reader.read()
            writer.close()

        async with _proxy_before(serve) as proxy:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 204")
            [relay] = proxy._relays
            assert relay.up is not None
            flags = [
                t.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
                for t in (relay.client, relay.up)
            ]
            writer.close()
        return flags

    assert all(asyncio.run(asyncio.wait_for(main(), 60)))


def test_bench_measures_paired_trials_through_a_proxy_process(server_url: str) -> None:
    """``run_bench``: as many trials as asked, each with a direct, a proxied and a control
    turn (the figures themselves are the machine's, not checked)."""
    result = run_bench(server_url, 4)
    assert result.pairs == 4 and result.streams == 1
    [arm] = result.arms
    assert arm.ttft_ms[0] > 0 and result.direct_ttft_ms[0] > 0
    text = "\n".join(result.lines())
    assert "4 paired trials" in text and "added TTFT (proxied − direct)" in text
    assert 0 <= arm.over_target_pct <= 100 and "control TTFT > 1 ms" in text
    assert arm.cpu_us_per_turn is not None and arm.cpu_us_per_turn >= 0
    # The reference server reports its own timing, on this host's clock: the upstream's time
    # comes out of both sides, split at its arrival stamp.
    assert arm.added_path_ms is not None and result.control_path_ms is not None
    assert arm.added_request_ms is not None and arm.added_response_ms is not None
    assert "added, upstream's time out" in text and "response side" in text
    assert result.kernel_stamps == kernel_stamps_supported()
    # The p99 shift of each side against the direct one: told, but with no CI at 4 trials.
    for shift in (
        arm.p99_shift_ms,
        arm.path_p99_shift_ms,
        result.control_p99_shift_ms,
        result.control_path_p99_shift_ms,
    ):
        assert shift is not None and shift[1] is None
    assert "p99 shift (p99 − p99 direct)" in text and "control p99 shift" in text
    assert text.count("no CI (under 1,000 trials)") == 4


@pytest.mark.parametrize("k", [2, 3, 4])
def test_bench_orders_balance_who_goes_first_and_who_goes_after_whom(k: int) -> None:
    cycle = orders(k)
    assert all(sorted(order) == list(range(k)) for order in cycle)
    # every side at every position equally often (first among them)
    places = Counter((i, side) for order in cycle for i, side in enumerate(order))
    assert len(places) == k * k and set(places.values()) == {len(cycle) // k}
    # the turns as a stream reads them, trial after trial, the cycle wrapping around: each
    # side right after each other side equally often, and after itself equally often
    turns = [side for order in cycle for side in order]
    follows = Counter(zip(turns, turns[1:] + turns[:1], strict=True))
    others = {follows[(a, b)] for a in range(k) for b in range(k) if a != b}
    itself = {follows[(a, a)] for a in range(k)}
    assert len(others) == 1 and others != {0} and len(itself) == 1


def test_a_rotation_does_not_balance_who_goes_after_whom() -> None:
    """What the check above catches: the old rotating order (the control always after the
    proxy, the direct side after the control)."""
    rotation = [(0, 1, 2), (1, 2, 0), (2, 0, 1)]
    within = Counter(pair for order in rotation for pair in itertools.pairwise(order))
    assert within[(1, 2)] == 2 and within[(2, 1)] == 0
    turns = [side for order in rotation for side in order]
    follows = Counter(zip(turns, turns[1:] + turns[:1], strict=True))
    assert len({follows[(a, b)] for a in range(3) for b in range(3) if a != b}) > 1


def test_bench_orders_beyond_four_sides_rotate() -> None:
    cycle = orders(6)
    assert len(cycle) == 6 and Counter(order[0] for order in cycle) == Counter(range(6))


def test_bench_lines_give_the_p99_shift_with_its_ci() -> None:
    arm = ArmResult(
        "proxy", (40.0, 45.0), (0.2, 1.5), (0.3, 1.8), 2.0, 300.0, p99_shift_ms=(0.25, (0.1, 0.4))
    )
    result = BenchResult(
        pairs=1000,
        streams=4,
        history=200,
        direct_ttft_ms=(40.0, 44.0),
        arms=(arm,),
        control_ttft_ms=(0.0, 1.2),
        control_total_ms=(0.0, 1.4),
        control_over_target_pct=1.5,
        seconds=60.0,
        control_p99_shift_ms=(-0.05, (-0.2, 0.1)),
    )
    text = "\n".join(result.lines())
    [line] = [ln for ln in text.splitlines() if "p99 shift (p99 − p99 direct)" in ln]
    assert line.split()[-7:] == ["+0.250", "ms", "95", "%", "CI", "[0.100,", "0.400]"]
    assert "control p99 shift" in text and "-0.050 ms   95 % CI [-0.200, 0.100]" in text
    assert "no CI" not in text


def test_upstream_times_take_the_servers_own_time_out_and_split_at_its_arrival() -> None:
    """TTFT 50 ms, of which the server modelled 40 and was 2 ms late: 8 ms beyond it, 3 before
    the server read the request and 5 after it wrote the token."""
    t0 = 1_000_000_000
    timing = {"ttft": 40.0, "first_token_late_ms": 2.0, "arrived_clock_ns": t0 + 3_000_000}
    body = (
        b"event: response.output_text.delta\ndata: {}\n\n"
        b"event: response.completed\ndata: "
        + orjson.dumps({"type": "response.completed", "response": {"sim_timing": timing}})
        + b"\n\n"
    )
    assert _upstream_times(t0, t0 + 50_000_000, body) == (8_000_000, 3_000_000, 5_000_000)
    # an arrival stamp on another clock: the split is not told, the rest is
    other = dict(timing, arrived_clock_ns=5)
    body2 = body.replace(orjson.dumps(timing), orjson.dumps(other))
    assert _upstream_times(t0, t0 + 50_000_000, body2) == (8_000_000, None, None)
    # a server that reports nothing of its own time
    assert _upstream_times(t0, t0 + 50_000_000, b"event: response.completed\ndata: {}\n\n") == (
        None,
        None,
        None,
    )
    assert _upstream_times(t0, t0 + 1, b"") == (None, None, None)


def test_bench_command_reports_the_machine(server_url: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "harness", "record", "--upstream", server_url, "--bench", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert out.returncode == 0, out.stderr
    assert "2 paired trials" in out.stdout
    assert "load average" in out.stdout and "CPU steal" in out.stdout


def _descendants(pid: int) -> dict[int, str]:
    """Live descendants of ``pid`` and their command lines (Linux ``/proc``)."""
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        p = todo.pop()
        with contextlib.suppress(OSError, ValueError):
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    kids = [int(k) for k in fh.read().split()]
                for kid in kids:
                    with open(f"/proc/{kid}/cmdline", "rb") as fh:
                        found[kid] = fh.read().replace(b"\0", b" ").decode()
                todo.extend(kids)
    return found


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for whoever it was re-parented to."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux /proc")
def test_a_bench_stopped_by_sigterm_stops_the_processes_it_started() -> None:
    """By default SIGTERM ends a process at once: the proxy and the bare relay were left
    running (the embedded server watches its parent; they do not)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "record", "--bench", "100000"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        kids: dict[int, str] = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # bounded: the relays are up within seconds
            kids = _descendants(proc.pid)
            if any("bare_relay" in c for c in kids.values()) and any(
                "harness record" in c for c in kids.values()
            ):
                break
            time.sleep(0.1)
        assert any("bare_relay" in c for c in kids.values()), kids
        time.sleep(1.0)  # into the trials
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert err.strip().splitlines()[-1] == "interrupted", err
    deadline = time.monotonic() + 10  # the server notices its parent's end within 0.5 s
    while time.monotonic() < deadline and any(_alive(k) for k in kids):
        time.sleep(0.1)
    left = {k: c for k, c in kids.items() if _alive(k)}
    assert not left, left


def _sched_slice(pid: int) -> int | None:
    with open(f"/proc/{pid}/sched") as fh:
        for line in fh:
            if line.startswith("se.slice"):
                return int(line.split(":")[1])
    return None


def _kernel_takes_a_slice() -> bool:
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(request_short_slice()))
    t.start()
    t.join(10)
    return got == [True]


@pytest.mark.skipif(not os.path.exists("/proc/self/sched"), reason="Linux /proc")
def test_record_until_stopped_gives_its_caller_thread_its_slice_back(tmp_path: Path) -> None:
    """Used as a library, the recorder relays with the short slice and leaves the calling
    thread with the slice it had, not with 0.1 ms for whatever it does next."""
    if not _kernel_takes_a_slice():
        pytest.skip(f"this kernel keeps its own slice ({os.uname().release})")
    seen: dict[str, int | None] = {}

    def caller() -> None:
        seen["before"] = thread_slice_ns()
        stop = asyncio.Event()

        def ready(_port: int) -> None:
            seen["relaying"] = thread_slice_ns()
            stop.set()

        asyncio.run(
            record_until_stopped(
                "http://127.0.0.1:9/v1",
                str(tmp_path / "t.jsonl"),
                observer="thread",
                on_ready=ready,
                stop=stop,
            )
        )
        seen["after"] = thread_slice_ns()

    t = threading.Thread(target=caller)
    t.start()
    t.join(60)
    assert seen["relaying"] == SLICE_NS
    assert seen["before"] != SLICE_NS
    assert seen["after"] == seen["before"]


@pytest.mark.skipif(not os.path.exists("/proc/self/sched"), reason="Linux /proc")
def test_the_relays_ask_for_a_short_slice_and_their_helpers_do_not(tmp_path: Path) -> None:
    """The proxy's event loop and the bare relay run with SLICE_NS; the observer's process,
    which reads milliseconds of JSON at a time, keeps the kernel's default."""
    if not _kernel_takes_a_slice():
        pytest.skip(f"this kernel keeps its own slice ({os.uname().release})")
    default = _sched_slice(os.getpid())
    assert default != SLICE_NS
    argvs = [
        [*THIS_PROXY.argv, "--out", str(tmp_path / "t.jsonl")],
        [*BARE_RELAY.argv],
    ]
    for argv in argvs:
        proc = subprocess.Popen(
            [*argv, "--upstream", "http://127.0.0.1:9/v1", "--port", "0"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().startswith(READY_PREFIX)
            assert _sched_slice(proc.pid) == SLICE_NS, argv
            helpers = _descendants(proc.pid)
            assert all(_sched_slice(k) == default for k in helpers), helpers
            if argv[: len(THIS_PROXY.argv)] == list(THIS_PROXY.argv):
                # the observer's process is among them (besides multiprocessing's tracker)
                assert any("spawn_main" in cmd for cmd in helpers.values()), helpers
        finally:
            proc.terminate()
            proc.communicate(timeout=30)


def test_a_client_that_half_closes_after_its_request_still_gets_the_response() -> None:
    """Request, then shutdown(SHUT_WR) on a fresh connection: the client's end arrives
    before the response, which must still be relayed whole."""

    async def main() -> bytes:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()
            writer.close()

        async with _proxy_before(serve) as proxy:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
            writer.write_eof()
            got = await reader.read()
            writer.close()
        return got

    assert asyncio.run(asyncio.wait_for(main(), 60)) == (
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    )


def test_the_bare_relay_forwards_a_large_response_whole_and_touches_nothing() -> None:
    """The bench's floor relays as the proxy does, flow control included, and rewrites
    nothing: the upstream sees the client's own request head."""
    heads: list[bytes] = []

    async def main() -> tuple[bytes, list[int]]:
        server = await _big_upstream(heads)
        port = server.sockets[0].getsockname()[1]
        stop = asyncio.Event()
        ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        clients: set = set()
        task = asyncio.ensure_future(
            serve_bare_relay(
                Upstream.parse(f"http://127.0.0.1:{port}/v1"),
                "127.0.0.1",
                0,
                stop,
                ready.set_result,
                clients,
            )
        )
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", await ready)
            writer.write(b"GET /v1/models HTTP/1.1\r\nHost: the-client's\r\n\r\n")
            await asyncio.sleep(0.5)  # not reading: the relay must stop reading upstream
            buffered = [c.transport.get_write_buffer_size() for c in clients if c.transport]
            got = await _read_chunked_digest(reader)
            writer.close()
        finally:
            stop.set()
            await task
            server.close()
        return got, buffered

    got, buffered = asyncio.run(asyncio.wait_for(main(), 90))
    assert got == _big_digest()
    assert buffered and max(buffered) < BIG // 4
    assert heads == [b"GET /v1/models HTTP/1.1\r\nHost: the-client's\r\n\r\n"]


def test_a_long_bench_says_how_far_it_got(server_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every PROGRESS_S (shortened here) the trials done so far, never more than asked, and
    never going back; a bench shorter than PROGRESS_S says nothing."""
    monkeypatch.setattr(bench_module, "PROGRESS_S", 0.02)
    told: list[tuple[int, int, float]] = []
    result = run_bench(
        server_url,
        40,
        streams=2,
        progress=lambda *a: told.append(a),  # type: ignore[arg-type]
    )
    assert result.pairs == 40
    assert told, "no progress in a bench far longer than its interval"
    assert {total for _, total, _ in told} == {40}
    dones = [done for done, _, _ in told]
    assert dones == sorted(dones) and dones[0] >= 0 and dones[-1] <= 40
    assert all(b >= a for (_, _, a), (_, _, b) in itertools.pairwise(told))
    monkeypatch.setattr(bench_module, "PROGRESS_S", 600.0)
    told.clear()
    run_bench(server_url, 2, progress=lambda *a: told.append(a))  # type: ignore[arg-type]
    assert told == []


def test_bench_measures_the_proxy_over_the_bare_relay_in_the_same_trials(server_url: str) -> None:
    """With the floor as one more side, each trial has four turns, and the proxy's p99 shift
    over the bare relay is told (without a CI at 4 trials); the floor has none of its own."""
    result = run_bench(server_url, 4, proxies=(THIS_PROXY, BARE_RELAY))
    proxy, floor = result.arms
    assert (proxy.label, floor.label) == ("proxy", "bare relay")
    assert floor.ttft_ms[0] > 0 and floor.cpu_us_per_turn is not None
    assert proxy.over_floor_p99_shift_ms is not None and proxy.over_floor_p99_shift_ms[1] is None
    assert proxy.over_floor_path_p99_shift_ms is not None
    assert floor.over_floor_p99_shift_ms is None and floor.over_floor_path_p99_shift_ms is None
    text = "\n".join(result.lines())
    assert "p99 shift over the bare relay [proxy]" in text
    assert "added TTFT (proxied − direct) [bare relay]" in text
    assert "over the bare relay [bare relay]" not in text
    assert "what recording adds beyond one more process" in text


def test_a_relay_process_that_does_not_start_is_named_with_its_reason() -> None:
    # The bare relay forwards plain TCP only: given an https upstream it exits at once. The
    # error names it and says why, not "`loopbench record` did not start".
    with pytest.raises(BenchProcessError) as info:
        run_bench("https://127.0.0.1:9/v1", 2, proxies=(BARE_RELAY,))
    message = str(info.value)
    assert message.startswith(
        f"bare relay did not start: `{shlex.join(BARE_RELAY.argv)}` exited with code "
    ), message
    assert message.endswith("the bare relay forwards plain TCP only (http://)"), message
    assert "loopbench record" not in message


def test_the_bare_relay_runs_as_the_bench_starts_it(server_url: str) -> None:
    """``python -m harness.record.bare_relay``: the listening line, a relayed request, and a
    clean exit on SIGTERM; an https upstream is refused with a usage error."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.record.bare_relay", "--upstream", server_url, "--out", "x"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("loopbench record listening on http://127.0.0.1:")
        port = int(line.split()[4].rsplit(":", 1)[1].split("/")[0])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 200")
    finally:
        proc.terminate()
        code = proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    assert code == 0
    refused = subprocess.run(
        [sys.executable, "-m", "harness.record.bare_relay", "--upstream", "https://127.0.0.1:1/v1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == ExitCode.USAGE and "plain TCP only" in refused.stderr
