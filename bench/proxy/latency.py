"""``python -m bench.proxy --trials N``: the latency the recording proxy adds to a turn, paired.

Four processes: the upstream (the embedded reference server, or ``--upstream``), the proxy
(a ``loopbench record`` child process, started here exactly as an agent's user would start
it), the bare relay (``python -m bench.proxy.bare_relay``: forwards bytes and nothing
else, the floor any relay process costs; not run against an ``--upstream``, which may route
by the Host header it leaves untouched) and this client.  Each measuring stream keeps a
connection alive to the upstream directly, one through each relay process, and a second
direct one as a control.  Every trial sends the same streaming Responses request on each
connection in turn, in an order that changes from trial to trial (:func:`orders`: every side
goes first, and follows every other side, equally often), and compares the time to the
first output delta (TTFT) and to the end of the stream.  The figures are differences within a trial (proxied − direct), so the upstream's
own drift cancels out as far as it can; the control (direct − direct) is the noise floor
of such a difference with no proxy at all.

The p99 of per-trial differences counts every late stamp on *either* side of a pair as
added latency, so under concurrency it is mostly the client's and the server's tails.  The
question a user asks ("how much later is my p99 through the proxy?") is answered by the
*p99 shift*: p99(proxied) − p99(direct), with a paired bootstrap CI over the trials
(:func:`bench.proxy.shift.paired_quantile_shift`); the control's shift says how far two
direct connections' p99s already lie apart.

``streams`` runs that many such paired streams at once (each its own connections), so
that one stream's exchange being observed overlaps the others' relaying; ``history``
makes each request carry that many earlier messages of ~100 tokens (a long conversation's
request, which is what costs the observer time).

More than one proxy can be measured in the same trials (each its own connection, all in
the changing order): that is how two versions of the proxy are compared side by side on
a machine whose load changes from minute to minute.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from bench.proxy.shift import min_tail_pairs, paired_quantile_shift
from harness.client.h1 import H1Error, ResponseParser
from harness.record.proxy import READY_PREFIX, Upstream
from harness.run.event_loop import run_async
from harness.run.proc_cpu import tree_cpu_seconds
from harness.transports.rx_socket import (
    kernel_stamps_supported,
    stamped_transport,
    tcp_socket,
)
from harness.wire import quiet_gc
from harness.wire.errors import LoopbenchError

__all__ = [
    "BARE_RELAY",
    "THIS_PROXY",
    "ArmResult",
    "BenchProcessError",
    "BenchResult",
    "ProxyCommand",
    "orders",
    "run_bench",
]

_MARK = b"response.output_text.delta"

#: the issue's target for the added TTFT's p99 (ms)
TARGET_MS = 1.0
#: how often a long bench says how far it got (s)
PROGRESS_S = 10.0

#: told (trials done, trials in all, seconds since the trials began) every PROGRESS_S
Progress = Callable[[int, int, float], None]

Pct = tuple[float, float]
#: p99(one side) − p99(the direct side), ms, and its 95 % CI (None under 1,000 trials)
Shift = tuple[float, tuple[float, float] | None]


class BenchProcessError(LoopbenchError):
    """A relay process the bench starts (a proxy, the bare relay) did not start."""


@dataclass(frozen=True, slots=True)
class ProxyCommand:
    """How to start one proxy under test: ``argv`` + ``--upstream URL --port 0 --out FILE``."""

    label: str
    argv: tuple[str, ...]
    cwd: str | None = None


#: the proxy as a user starts it
THIS_PROXY = ProxyCommand("proxy", (sys.executable, "-m", "harness", "record"))
#: the floor: a relay process that forwards bytes and nothing else (bench/proxy/bare_relay.py)
BARE_RELAY = ProxyCommand("bare relay", (sys.executable, "-m", "bench.proxy.bare_relay"))


@dataclass(frozen=True, slots=True)
class ArmResult:
    label: str
    ttft_ms: Pct
    #: p50, p99 of proxied − direct, per trial
    added_ttft_ms: Pct
    added_total_ms: Pct
    #: share (%) of trials whose added TTFT exceeds the target, 1 ms
    over_target_pct: float
    #: the proxy process's CPU time (user + system) per turn it relayed, µs; None where
    #: the platform does not say (no /proc)
    cpu_us_per_turn: float | None
    #: p50, p99 of the added TTFT with the upstream's own timing taken out of both sides
    #: (its modelled TTFT and its reported lateness); None from an upstream that reports none
    added_path_ms: Pct | None = None
    path_over_target_pct: float | None = None
    #: that, split at the upstream's arrival stamp: request side, response side
    added_request_ms: Pct | None = None
    added_response_ms: Pct | None = None
    #: p99(proxied TTFT) − p99(direct TTFT), paired over the trials
    p99_shift_ms: Shift | None = None
    #: the same with the upstream's own time out of both sides
    path_p99_shift_ms: Shift | None = None
    #: p99(this side's TTFT) − p99(the bare relay's), paired: what this proxy adds beyond
    #: any relay process (None for the bare relay itself, or when it was not run)
    over_floor_p99_shift_ms: Shift | None = None
    over_floor_path_p99_shift_ms: Shift | None = None


@dataclass(frozen=True, slots=True)
class BenchResult:
    pairs: int
    streams: int
    history: int
    direct_ttft_ms: Pct
    arms: tuple[ArmResult, ...]
    #: p50, p99 of direct − direct (a second direct connection): the noise floor of a pair
    control_ttft_ms: Pct
    control_total_ms: Pct
    #: share (%) of trials whose control exceeds the target, 1 ms (the noise's own share)
    control_over_target_pct: float
    seconds: float
    control_path_ms: Pct | None = None
    control_path_over_target_pct: float | None = None
    control_request_ms: Pct | None = None
    control_response_ms: Pct | None = None
    #: whether the client's TTFT stamps were the kernel's receive times (else user space)
    kernel_stamps: bool = False
    #: p99(control TTFT) − p99(direct TTFT): how far two direct connections' p99s lie apart
    control_p99_shift_ms: Shift | None = None
    control_path_p99_shift_ms: Shift | None = None

    def lines(self) -> list[str]:
        def two(name: str, v: Pct) -> str:
            return f"  {name:<34} p50 {v[0]:8.3f} ms   p99 {v[1]:8.3f} ms"

        def shift(name: str, v: Shift | None) -> list[str]:
            if v is None:
                return []
            ci = (
                f"no CI (under {min_tail_pairs(0.99):,} trials)"
                if v[1] is None
                else f"95 % CI [{v[1][0]:.3f}, {v[1][1]:.3f}]"
            )
            return [f"  {name:<34} {v[0]:+8.3f} ms   {ci}"]

        out = [
            f"bench.proxy: {self.pairs} paired trials (n per row) in "
            f"{self.seconds:.0f} s, {self.streams} concurrent stream(s), {self.history} "
            "history messages per request; proxy, upstream and client in separate processes",
            two("TTFT direct", self.direct_ttft_ms),
        ]
        for arm in self.arms:
            name = "" if len(self.arms) == 1 else f" [{arm.label}]"
            out += [
                two(f"TTFT proxied{name}", arm.ttft_ms),
                two(f"added TTFT (proxied − direct){name}", arm.added_ttft_ms),
                two(f"added turn time{name}", arm.added_total_ms),
                f"  {'added TTFT > 1 ms' + name:<34} in {arm.over_target_pct:.1f} % of the trials",
                *shift(f"p99 shift (p99 − p99 direct){name}", arm.p99_shift_ms),
                f"  {'proxy CPU time per turn' + name:<34} "
                + ("unknown" if arm.cpu_us_per_turn is None else f"{arm.cpu_us_per_turn:.0f} µs"),
            ]
            if arm.added_path_ms is not None:
                out += [
                    two(f"added, upstream's time out{name}", arm.added_path_ms),
                    f"  {'  that > 1 ms' + name:<34} in {arm.path_over_target_pct:.1f} % "
                    "of the trials",
                    *shift(f"  its p99 shift{name}", arm.path_p99_shift_ms),
                ]
            if arm.added_request_ms is not None and arm.added_response_ms is not None:
                out += [
                    two(f"  request side{name}", arm.added_request_ms),
                    two(f"  response side{name}", arm.added_response_ms),
                ]
            out += shift(f"p99 shift over the bare relay{name}", arm.over_floor_p99_shift_ms)
            out += shift(f"  upstream's time out{name}", arm.over_floor_path_p99_shift_ms)
        out += [
            two("control TTFT (direct − direct)", self.control_ttft_ms),
            two("control turn time", self.control_total_ms),
            f"  {'control TTFT > 1 ms':<34} in {self.control_over_target_pct:.1f} % of the trials",
            *shift("control p99 shift", self.control_p99_shift_ms),
        ]
        if self.control_path_ms is not None:
            out += [
                two("control, upstream's time out", self.control_path_ms),
                f"  {'  that > 1 ms':<34} in {self.control_path_over_target_pct:.1f} % "
                "of the trials",
                *shift("  its p99 shift", self.control_path_p99_shift_ms),
            ]
        if self.control_request_ms is not None and self.control_response_ms is not None:
            out += [
                two("  request side", self.control_request_ms),
                two("  response side", self.control_response_ms),
            ]
        out.append(
            "  TTFT stamps: "
            + (
                "the kernel's receive times"
                if self.kernel_stamps
                else "user space (no kernel receive stamps here)"
            )
            + "; upstream's time out: TTFT less the upstream's modelled TTFT and its reported "
            "lateness, on both sides of each pair; request side: send → the upstream's first "
            "read, response side: the upstream's write → the client's stamp; p99 shift: "
            "p99 of that side less p99 of the direct side over the same trials, with a "
            "paired bootstrap CI (a late stamp on either side of a pair is not counted as "
            "added, as it is in the p99 of the differences; the CI takes trials as independent "
            "and says nothing of drift between runs)"
            + (
                "; p99 shift over the bare relay: the same against a relay process that forwards "
                "bytes and does nothing else, in the same trials (what recording adds beyond "
                "one more process on the path)"
                if any(a.over_floor_p99_shift_ms is not None for a in self.arms)
                else ""
            )
        )
        return out


def _pct(values: Sequence[float], q: float) -> float:
    # numpy's linear interpolation: the same p99 as the shift's (paired_quantile_shift)
    return float(np.quantile(np.asarray(values, dtype=np.float64), q))


def _p50_p99(values: Sequence[float]) -> Pct:
    return (_pct(values, 0.5), _pct(values, 0.99))


class _Turn(asyncio.Protocol):
    """The bench client's side of one connection: each read stamped by the kernel where the
    platform allows (:mod:`harness.transports.rx_socket`), so that the client's own wake-up
    delays stay out of both sides of a pair."""

    def __init__(self) -> None:
        self.transport: Any = None
        self.parser = ResponseParser()
        self.body = bytearray()
        self.first = 0
        self.done: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if not self.first and _MARK in data:
            # RxTransport's stamp of this read; the loop's own transports have none
            self.first = getattr(self.transport, "rx_ns", 0) or time.perf_counter_ns()
        try:
            self.body += self.parser.feed(data)
        except H1Error as exc:
            self._end(ConnectionError(f"the bench response is not HTTP/1.1 ({exc})"))
            return
        if self.parser.complete:
            self._end(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(ConnectionError("the server closed the connection mid-response"))

    def _end(self, exc: Exception | None) -> None:
        done = self.done
        if done is not None and not done.done():
            if exc is None:
                done.set_result(None)
            else:
                done.set_exception(exc)


class _Conn:
    def __init__(self, up: Upstream) -> None:
        self.up = up
        self.proto: _Turn | None = None

    async def turn(self, request: bytes) -> _Times:
        """(TTFT, whole turn, TTFT beyond the upstream's own time) in ns for one request."""
        loop = asyncio.get_running_loop()
        if self.proto is None or self.proto.transport.is_closing():
            proto = _Turn()
            sock = await tcp_socket(self.up.host, self.up.port)
            if stamped_transport(loop, sock, proto) is None:
                await loop.create_connection(lambda: proto, sock=sock)
            self.proto = proto
        proto = self.proto
        proto.parser, proto.body, proto.first = ResponseParser(), bytearray(), 0
        proto.done = loop.create_future()
        t0 = time.perf_counter_ns()
        proto.transport.write(request)
        await proto.done
        end = time.perf_counter_ns()
        if proto.parser.status != 200:
            raise ConnectionError(f"the server answered {proto.parser.status} to the bench request")
        return proto.first - t0, end - t0, *_upstream_times(t0, proto.first, bytes(proto.body))

    def close(self) -> None:
        if self.proto is not None:
            self.proto.transport.close()


def _upstream_times(t0: int, first: int, body: bytes) -> tuple[int | None, int | None, int | None]:
    """(beyond, request side, response side) in ns, from the reference server's ``sim_timing``
    (all None from a server that does not report it).

    *beyond*: the TTFT less the upstream's modelled TTFT and how late it says it wrote the
    first token: the time the request and the first token spent between the client and the
    upstream's model (the wires, a proxy, the upstream's read).  Split at the upstream's
    arrival stamp (``arrived_clock_ns``, CLOCK_MONOTONIC, which is this process's
    ``perf_counter_ns`` on Linux): *request side* from the send to the upstream's first read
    of the request, *response side* from the upstream's write of the first token to the
    client's stamp.  The split is None where the stamp is not on this clock (it must fall
    between the send and the first token)."""
    at = body.rfind(b"event: response.completed")
    if at < 0:
        return None, None, None
    try:
        line = body[at:].split(b"\n", 2)[1]
        timing = orjson.loads(line.removeprefix(b"data: "))["response"]["sim_timing"]
        own = round((float(timing["ttft"]) + float(timing["first_token_late_ms"])) * 1e6)
        arrived = int(timing.get("arrived_clock_ns") or 0)
    except (IndexError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None, None, None
    beyond = first - t0 - own
    if not t0 <= arrived <= first:
        return beyond, None, None
    return beyond, arrived - t0, first - (arrived + own)


#: TTFT, turn time, and :func:`_upstream_times` in ns
_Times = tuple[int, int, int | None, int | None, int | None]


#: one trial: the times of each connection: direct, each proxy, control
_Trial = tuple[_Times, ...]


async def _trials(
    direct: Upstream,
    proxies: Sequence[Upstream],
    n: int,
    streams: int,
    history: int,
    progress: Progress | None = None,
) -> list[_Trial]:
    per = max(1, n // max(1, streams))
    # each stream starts at another place in the cycle: the streams' turns at one moment do
    # not all go to the same side
    n_streams = max(1, streams)
    cycle = len(orders(len(proxies) + 2))
    done = [0]
    runs = asyncio.gather(
        *(
            _stream(direct, proxies, per, history, s * cycle // n_streams, done)
            for s in range(n_streams)
        )
    )
    if progress is not None:
        t0 = time.monotonic()
        try:
            # a wake-up every PROGRESS_S: nothing a trial's timing could notice
            while not runs.done():
                await asyncio.wait([runs], timeout=PROGRESS_S)
                if not runs.done():
                    progress(done[0], per * n_streams, time.monotonic() - t0)
        except BaseException:  # Ctrl-C: the streams stop with this wait, and quietly
            runs.cancel()
            runs.add_done_callback(lambda f: f.cancelled() or f.exception())
            raise
    return [row for rows in await runs for row in rows]


#: Cycles of orders for 2, 3 and 4 sides in which, over the cycle, each side goes first and
#: holds each position equally often, and, in the sequence of turns read across trials (the
#: cycle wraps around), each side comes right after each other side equally often and after
#: itself equally often.  Found by a search; tests/record/test_relay.py checks them.
_CYCLES: dict[int, list[tuple[int, ...]]] = {
    2: [(0, 1), (1, 0)],
    3: [(2, 1, 0), (0, 1, 2), (2, 0, 1), (1, 2, 0), (0, 2, 1), (1, 0, 2)],
    4: [
        (2, 1, 0, 3),
        (3, 2, 0, 1),
        (1, 3, 2, 0),
        (0, 2, 3, 1),
        (1, 0, 2, 3),
        (3, 0, 1, 2),
        (2, 1, 3, 0),
        (0, 3, 1, 2),
    ],
}


def orders(k: int) -> list[tuple[int, ...]]:
    """The orders in which a trial visits its ``k`` connections, one per trial, cycled.

    What a turn leaves behind for the next one (a busy upstream, a warm cache) must land on
    every side alike: a plain rotation (0 1 2, 1 2 0, 2 0 1) puts each side first equally
    often, but the control always right after the proxy and the direct side after the
    control; in one four-stream run the control's p99 came out 0.28 ms below the direct
    side's.  Up to 4 sides (one or two proxies), :data:`_CYCLES` balances who follows whom.
    Beyond, rotations: position balanced, who follows whom not."""
    if k in _CYCLES:
        return list(_CYCLES[k])
    return [tuple((i + j) % k for j in range(k)) for i in range(k)]


def _request(up: Upstream, body: bytes) -> bytes:
    return (
        f"POST {up.base_path}/responses HTTP/1.1\r\nhost: {up.host_header}\r\n"
        "authorization: Bearer sk-loopbench\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


async def _stream(
    direct: Upstream,
    proxies: Sequence[Upstream],
    n: int,
    history: int,
    offset: int = 0,
    done: list[int] | None = None,
) -> list[_Trial]:
    """``n`` trials on one stream; ``done[0]`` counts the trials finished (all streams')."""
    done = [0] if done is None else done
    earlier = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "w" * 400}
        for i in range(history)
    ]
    body = orjson.dumps(
        {
            "model": "sim",
            "input": [*earlier, {"role": "user", "content": "benchmark turn"}],
            "stream": True,
            "tool_choice": "none",
            "store": False,
            "metadata": {"loopbench.output_tokens": "50"},
        }
    )
    ups = [direct, *proxies, direct]
    conns = [_Conn(up) for up in ups]
    requests = [_request(up, body) for up in ups]
    k = len(conns)
    sequence = orders(k)
    out: list[_Trial] = []
    try:
        for _ in range(min(20, n)):  # warm the connections, the proxy and the server
            for conn, req in zip(conns, requests, strict=True):
                await conn.turn(req)
        for i in range(n):
            got: list[_Times] = [(0, 0, None, None, None)] * k
            for m in sequence[(i + offset) % len(sequence)]:
                got[m] = await conns[m].turn(requests[m])
            out.append(tuple(got))
            done[0] += 1
    finally:
        for conn in conns:
            conn.close()
    return out


@contextmanager
def _proxy(cmd: ProxyCommand, upstream_url: str, tmp: str) -> Iterator[tuple[Upstream, int]]:
    # a file, not a pipe: nobody reads it while the trials run, and a pipe could fill up
    errors = os.path.join(tmp, f"{cmd.label}.stderr")
    with open(errors, "wb") as stderr:
        proc = subprocess.Popen(
            [
                *cmd.argv,
                "--upstream",
                upstream_url,
                "--port",
                "0",
                "--out",
                os.path.join(tmp, f"{cmd.label}.jsonl"),
            ],
            cwd=cmd.cwd,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert proc.stdout is not None
        # a wrapper (a profiler, `nice`) may say something first
        for line in proc.stdout:
            if line.startswith(READY_PREFIX):
                break
        else:
            raise BenchProcessError(_not_started(cmd, proc, errors))
        yield Upstream.parse(line.split()[4]), proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _not_started(cmd: ProxyCommand, proc: subprocess.Popen[str], errors: str) -> str:
    """``bare relay did not start: `…` exited with code 1 before its listening line: …``."""
    try:
        code: int | None = proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        code = None
    ended = "closed its output" if code is None else f"exited with code {code}"
    with open(errors, "rb") as fh:
        said = fh.read().decode(errors="replace").strip().splitlines()
    # the last line of a traceback names the exception; the rest is in the child's stack
    last = f": {said[-1]}" if said else ""
    return f"{cmd.label} did not start: `{shlex.join(cmd.argv)}` {ended} before its listening line{last}"


def run_bench(
    upstream_url: str,
    pairs: int,
    streams: int = 1,
    history: int = 0,
    proxies: Sequence[ProxyCommand] = (THIS_PROXY,),
    progress: Progress | None = None,
) -> BenchResult:
    """Start each of ``proxies`` against ``upstream_url`` and measure ``pairs`` trials
    (over ``streams`` concurrent streams), each trial a turn on every connection."""
    direct = Upstream.parse(upstream_url)
    with tempfile.TemporaryDirectory(prefix="loopbench-bench-proxy-") as tmp, ExitStack() as st:
        started = [st.enter_context(_proxy(cmd, upstream_url, tmp)) for cmd in proxies]
        proxied = [up for up, _ in started]
        cpu_before = [tree_cpu_seconds(pid) for _, pid in started]
        # The client's collector runs as seldom as a measuring run's does: its pauses
        # would land on one side of a pair.
        old = quiet_gc.begin()
        t0 = time.monotonic()
        try:
            rows = run_async(_trials(direct, proxied, pairs, streams, history, progress))
        finally:
            quiet_gc.end(old)
        seconds = time.monotonic() - t0
        cpu = [
            None if b is None or a is None else a - b
            for b, a in zip(cpu_before, [tree_cpu_seconds(pid) for _, pid in started], strict=True)
        ]
    ms = 1e6
    last = len(proxies) + 1

    def column(k: int, what: int) -> list[float]:
        return [row[k][what] / ms for row in rows]  # type: ignore[operator]

    def added(k: int, what: int) -> list[float]:
        return [(row[k][what] - row[0][what]) / ms for row in rows]  # type: ignore[operator]

    def both(k: int, what: int, base: int = 0) -> tuple[list[float], list[float]] | None:
        """Field ``what`` of side k and of side ``base`` (the direct one), in ms; None unless
        every turn has it (the fields of :func:`_upstream_times` are None from an upstream
        that reports none)."""
        side = [row[k][what] for row in rows]
        other = [row[base][what] for row in rows]
        if not rows or None in side or None in other:
            return None
        return [v / ms for v in side], [v / ms for v in other]  # type: ignore[operator]

    def added_path(k: int, what: int = 2) -> list[float] | None:
        """proxied − direct of one of :func:`_upstream_times`; None unless every turn has it."""
        got = both(k, what)
        return None if got is None else [a - b for a, b in zip(*got, strict=True)]

    control = added(last, 0)
    per = max(1, pairs // max(1, streams))
    turns = len(rows) + min(20, per) * max(1, streams)  # the warm-up turns were relayed too

    def p99_shift(k: int, what: int = 0, base: int = 0) -> Shift | None:
        """p99(side k) − p99(side ``base``) of field ``what``; None unless every turn has it."""
        got = both(k, what, base)
        return None if got is None else paired_quantile_shift(got[1], got[0], q=0.99)

    floor = next((k for k, c in enumerate(proxies, start=1) if c.label == BARE_RELAY.label), None)

    def over_floor(k: int, what: int) -> Shift | None:
        return None if floor is None or k == floor else p99_shift(k, what, floor)

    def share_over(values: Sequence[float]) -> float:
        return 100.0 * sum(v > TARGET_MS for v in values) / max(1, len(values))

    def arm(k: int, cmd: ProxyCommand) -> ArmResult:
        ttft = added(k, 0)
        path = added_path(k)
        request, response = added_path(k, 3), added_path(k, 4)
        return ArmResult(
            cmd.label,
            _p50_p99(column(k, 0)),
            _p50_p99(ttft),
            _p50_p99(added(k, 1)),
            share_over(ttft),
            None if (used := cpu[k - 1]) is None else used * 1e6 / turns,
            None if path is None else _p50_p99(path),
            None if path is None else share_over(path),
            None if request is None else _p50_p99(request),
            None if response is None else _p50_p99(response),
            p99_shift(k),
            p99_shift(k, 2),
            over_floor(k, 0),
            over_floor(k, 2),
        )

    arms = tuple(arm(k, cmd) for k, cmd in enumerate(proxies, start=1))
    control_path = added_path(last)
    control_request, control_response = added_path(last, 3), added_path(last, 4)
    return BenchResult(
        pairs=len(rows),
        streams=streams,
        history=history,
        direct_ttft_ms=_p50_p99(column(0, 0)),
        arms=arms,
        control_ttft_ms=_p50_p99(control),
        control_total_ms=_p50_p99(added(last, 1)),
        control_over_target_pct=share_over(control),
        seconds=seconds,
        control_path_ms=None if control_path is None else _p50_p99(control_path),
        control_path_over_target_pct=None if control_path is None else share_over(control_path),
        control_request_ms=None if control_request is None else _p50_p99(control_request),
        control_response_ms=None if control_response is None else _p50_p99(control_response),
        kernel_stamps=kernel_stamps_supported(),
        control_p99_shift_ms=p99_shift(last),
        control_path_p99_shift_ms=p99_shift(last, 2),
    )
