"""A plain-TCP asyncio transport that stamps every read with the kernel's receive time.

The event loop's own transports (uvloop's, asyncio's) read with ``recv``: the kernel's
receive timestamp travels as ancillary data, which ``recv`` drops.  This transport enables
``SO_TIMESTAMPNS`` on its socket, reads with ``recvmsg_into`` from ``loop.add_reader`` and
sets, before each ``data_received``:

* ``rx_ns``: the best stamp of the read, in ``time.perf_counter_ns`` time: the kernel's,
  converted from ``CLOCK_REALTIME`` (:class:`RealtimeClock`), else the user-space one;
* ``rx_user_ns``: ``perf_counter_ns()`` right after ``recvmsg`` returned (what the loop's
  transports give ``data_received`` today);
* ``rx_kernel``: whether ``rx_ns`` is the kernel's.

What the kernel stamp measures (the *last* packet's entry into the receive path: on
loopback, inside the server's ``send``; late, never early, for a read of several packets):
docs/metrics.md §1.9.

Scope: plain TCP only (TLS keeps the loop's transport and user-space stamps), one protocol,
write buffering with the loop's flow-control callbacks, EOF and half-close, pause/resume of
reading, close/abort.  It is what :mod:`harness.transports.h1client` and the websockets
connection of :mod:`harness.transports.ws` need of ``asyncio.Transport``, not more.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import ipaddress
import platform
import socket
import struct
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

#: ``SO_TIMESTAMPNS`` (= ``SCM_TIMESTAMPNS``) in asm-generic/socket.h, which these machines use;
#: Python's socket module does not export it.  (alpha, mips, parisc and sparc number it
#: differently: there the transport is not used.)
SO_TIMESTAMPNS = 35
_GENERIC_MACHINES = frozenset(
    {"x86_64", "amd64", "i386", "i686", "aarch64", "arm64", "armv7l", "ppc64le", "riscv64", "s390x"}
)
#: a ``struct timespec`` in the ABI of the ``_OLD`` option: two native longs
_TIMESPEC = struct.Struct("@ll")
_ANCBUF = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
#: the most one read takes (what asyncio's selector transports read at once)
READ_SIZE = 256 * 1024
#: how often the realtime-to-perf_counter offset is measured again: the two clocks drift apart
#: only when the wall clock is stepped (NTP slewing changes both rates alike)
CLOCK_REMEASURE_NS = 1_000_000_000

#: the platform the support check reads; tests set it to see the user-space fallback
PLATFORM = sys.platform
RX_STAMP_MODES = ("auto", "kernel", "user")


def kernel_stamps_supported() -> bool:
    """Whether this process can stamp reads in the kernel: Linux, a known machine, and a TCP
    socket accepts ``SO_TIMESTAMPNS``."""
    if not PLATFORM.startswith("linux") or platform.machine().lower() not in _GENERIC_MACHINES:
        return False
    return _probe_setsockopt()


#: the probe's socket, kept open for the life of the process (see :func:`_probe_setsockopt`)
_KEEP_ENABLED: list[socket.socket] = []


@functools.cache
def _probe_setsockopt() -> bool:
    """Whether a TCP socket accepts the option; the socket stays open if it does.

    Linux switches receive timestamping on system-wide while at least one socket asks for it,
    and switches it on *deferred* (a static key flipped from a work queue): packets arriving
    in the first moments after the first such socket appears carry no stamp.  Keeping one
    socket with the option open keeps it on between connections, so a connection's first
    reads are stamped too.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        enable_timestamps(sock)
    except OSError:
        sock.close()
        return False
    _KEEP_ENABLED.append(sock)
    # closed on purpose at exit: an unclosed socket there is a ResourceWarning in every test run
    atexit.register(sock.close)
    return True


def enable_timestamps(sock: socket.socket) -> None:
    """Ask the kernel for a receive timestamp with every read (raises OSError if refused)."""
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)


def resolve_rx_stamp(mode: str) -> str:
    """``kernel`` or ``user``: what ``--rx-stamp MODE`` gives on this machine.

    ``auto`` is ``kernel`` where supported, else ``user``; ``kernel`` where unsupported is an
    error (ValueError, with the sentence to show), as the user asked for what cannot be had.
    """
    if mode == "user":
        return "user"
    if mode not in RX_STAMP_MODES:
        raise ValueError(f"--rx-stamp {mode!r}: expected one of {', '.join(RX_STAMP_MODES)}")
    if kernel_stamps_supported():
        return "kernel"
    if mode == "kernel":
        raise ValueError(
            "--rx-stamp kernel: this machine cannot stamp reads in the kernel (it needs Linux "
            f"and a TCP socket that accepts SO_TIMESTAMPNS; platform {PLATFORM}, machine "
            f"{platform.machine()}); use --rx-stamp auto or user"
        )
    return "user"


class RealtimeClock:
    """Converts ``CLOCK_REALTIME`` nanoseconds (the kernel's socket stamps) to perf_counter time.

    The offset is measured by bracketing: ``a = perf_counter_ns(); r = time_ns();
    b = perf_counter_ns()``, ``offset = r - (a + b) / 2``, keeping the sample with the
    narrowest bracket of ``samples``.  Its error is at most half that bracket (``error_ns``,
    typically 20-60 ns) plus the clocks' resolution (1 ns on Linux with high-resolution
    timers).  It is measured again every :data:`CLOCK_REMEASURE_NS` of perf_counter time, so a
    step of the wall clock (``settimeofday``, an NTP step) corrupts at most that long.
    """

    __slots__ = ("error_ns", "measured_ns", "offset_ns", "samples")

    def __init__(self, samples: int = 25) -> None:
        self.samples = samples
        self.offset_ns = 0
        self.error_ns = 0
        self.measured_ns = 0
        self.measure()

    def measure(self) -> None:
        perf = time.perf_counter_ns
        real = time.time_ns
        best = -1
        offset = 0
        for _ in range(self.samples):
            a = perf()
            r = real()
            b = perf()
            width = b - a
            if best < 0 or width < best:
                best = width
                offset = r - (a + b) // 2
        self.offset_ns = offset
        self.error_ns = (best + 1) // 2 + 1
        self.measured_ns = perf()

    def to_perf(self, real_ns: int, now_perf_ns: int) -> int:
        """``real_ns`` in perf_counter time; ``now_perf_ns`` (a fresh stamp) decides a re-measure."""
        if now_perf_ns - self.measured_ns > CLOCK_REMEASURE_NS:
            self.measure()
        return real_ns - self.offset_ns


_local = threading.local()


def _read_buffer() -> memoryview:
    """One read buffer per thread: each read is copied out before any other code runs."""
    view: memoryview | None = getattr(_local, "view", None)
    if view is None:
        view = _local.view = memoryview(bytearray(READ_SIZE))
    return view


def _clock() -> RealtimeClock:
    clock: RealtimeClock | None = getattr(_local, "clock", None)
    if clock is None:
        clock = _local.clock = RealtimeClock()
    return clock


class RxTransport(asyncio.Transport):
    """An asyncio transport over a connected, non-blocking TCP socket; see the module docstring."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol: asyncio.BaseProtocol,
        clock: RealtimeClock | None = None,
    ) -> None:
        super().__init__()
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol: Any = protocol
        self._clock = clock or _clock()
        self._view = _read_buffer()
        self._bufs = [self._view]
        self._wbuf: deque[bytes] = deque()
        self._wsize = 0
        self._high = 64 * 1024
        self._low = 16 * 1024
        self._writing_paused = False
        self._reading = False
        self._closing = False
        self._eof_pending = False
        self._eof_sent = False
        self._lost = False
        self.rx_ns = 0
        self.rx_user_ns = 0
        self.rx_kernel = False
        #: the last read's raw user-space minus converted kernel stamp (ns; may be slightly
        #: negative by the clock offset's error): what the diagnostic window records
        self.rx_diff_ns = 0
        #: set by the protocol while a response's first token is still to come: given the
        #: bytes waiting (peeked), how many complete the next unit of its framing (0: none).
        #: The read then takes exactly those, so that its stamp is the segment's that holds
        #: the unit's last byte, not a later one's (docs/metrics.md §1.9)
        self.unit_end: Callable[[bytes], int] | None = None
        self._extra: dict[str, Any] = {"socket": sock}
        with contextlib.suppress(OSError):
            self._extra["peername"] = sock.getpeername()
        with contextlib.suppress(OSError):
            self._extra["sockname"] = sock.getsockname()
        protocol.connection_made(self)
        if not self._closing:
            self.resume_reading()

    # -- reading -------------------------------------------------------------------------------
    def _read_ready(self) -> None:
        bufs = self._bufs
        unit_end = self.unit_end
        if unit_end is not None:
            try:
                n = self._sock.recv_into(self._view, READ_SIZE, socket.MSG_PEEK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._fatal(exc)
                return
            if n:
                # Never more than was peeked, even when the unit ends where the peeked bytes
                # do (the common case) or not in them at all: a segment that came after the
                # peek would join this read and give it its later stamp.  What is left stays
                # waiting: the reader is level-triggered.
                end = unit_end(bytes(self._view[:n]))
                bufs = [self._view[: end if 0 < end <= n else n]]
        try:
            n, ancdata, _flags, _addr = self._sock.recvmsg_into(bufs, _ANCBUF)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fatal(exc)
            return
        user_ns = time.perf_counter_ns()
        if n == 0:
            self._eof()
            return
        kernel_ns = 0
        for level, kind, cdata in ancdata:
            if kind == SO_TIMESTAMPNS and level == socket.SOL_SOCKET and len(cdata) >= 16:
                sec, nsec = _TIMESPEC.unpack_from(cdata)
                kernel_ns = self._clock.to_perf(sec * 1_000_000_000 + nsec, user_ns)
        self.rx_user_ns = user_ns
        if kernel_ns:
            diff = user_ns - kernel_ns
            self.rx_diff_ns = diff
            # A kernel stamp after the read returned is the offset's error, never real.
            self.rx_ns = kernel_ns if diff > 0 else user_ns
            self.rx_kernel = True
        else:
            self.rx_diff_ns = 0
            self.rx_ns = user_ns
            self.rx_kernel = False
        data = bytes(self._view[:n])
        try:
            self._protocol.data_received(data)
        except BaseException as exc:
            self._fatal(exc)
            if not isinstance(exc, Exception):
                raise

    def _eof(self) -> None:
        self.pause_reading()
        try:
            keep_open = self._protocol.eof_received()
        except BaseException as exc:
            self._fatal(exc)
            if not isinstance(exc, Exception):
                raise
            return
        if not keep_open:
            self.close()

    def is_reading(self) -> bool:
        return self._reading

    def pause_reading(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def resume_reading(self) -> None:
        if not self._reading and not self._closing:
            self._reading = True
            self._loop.add_reader(self._fd, self._read_ready)

    # -- writing -------------------------------------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or self._eof_pending or self._eof_sent or not data:
            return
        if not self._wbuf:
            try:
                n = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                n = 0
            except OSError as exc:
                self._fatal(exc)
                return
            if n == len(data):
                return
            data = data[n:]
            self._loop.add_writer(self._fd, self._write_ready)
        chunk = bytes(data)
        self._wbuf.append(chunk)
        self._wsize += len(chunk)
        if not self._writing_paused and self._wsize > self._high:
            self._writing_paused = True
            self._call(self._protocol.pause_writing)

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def _write_ready(self) -> None:
        wbuf = self._wbuf
        while wbuf:
            chunk = wbuf[0]
            try:
                n = self._sock.send(chunk)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._fatal(exc)
                return
            self._wsize -= n
            if n < len(chunk):
                wbuf[0] = chunk[n:]
                return
            wbuf.popleft()
        self._loop.remove_writer(self._fd)
        if self._writing_paused and self._wsize <= self._low:
            self._writing_paused = False
            self._call(self._protocol.resume_writing)
        if self._closing:
            self._loop.call_soon(self._connection_lost, None)
        elif self._eof_pending:
            self._shutdown_write()

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        if self._closing or self._eof_pending or self._eof_sent:
            return
        if self._wbuf:
            self._eof_pending = True
        else:
            self._shutdown_write()

    def _shutdown_write(self) -> None:
        self._eof_pending = False
        self._eof_sent = True
        try:
            self._sock.shutdown(socket.SHUT_WR)
        except OSError as exc:
            self._fatal(exc)

    def get_write_buffer_size(self) -> int:
        return self._wsize

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (self._low, self._high)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is None:
            high = 64 * 1024 if low is None else 4 * low
        if low is None:
            low = high // 4
        if not 0 <= low <= high:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._high, self._low = high, low

    # -- closing -------------------------------------------------------------------------------
    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self.pause_reading()
        if not self._wbuf:
            self._loop.call_soon(self._connection_lost, None)

    def abort(self) -> None:
        self._force_close(None)

    def _fatal(self, exc: BaseException) -> None:
        self._force_close(exc if isinstance(exc, Exception) else None)

    def _force_close(self, exc: Exception | None) -> None:
        if self._lost:
            return
        if self._wbuf:
            self._wbuf.clear()
            self._wsize = 0
            self._loop.remove_writer(self._fd)
        if not self._closing:
            self._closing = True
            self.pause_reading()
        self._loop.call_soon(self._connection_lost, exc)

    def _connection_lost(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._sock.close()
            # The protocol holds this transport: without this a closed connection is a
            # reference cycle, left to the garbage collector the run keeps quiet.
            self._protocol = None

    def _call(self, method: Any) -> None:
        try:
            method()
        except Exception as exc:  # a protocol's flow-control callback failing ends the connection
            self._fatal(exc)

    # -- the rest of asyncio.BaseTransport ----------------------------------------------------
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        protocol: asyncio.BaseProtocol = self._protocol
        return protocol


async def tcp_socket(host: str, port: int) -> socket.socket:
    """A connected, non-blocking TCP socket to ``host``: the first of its addresses that accepts."""
    loop = asyncio.get_running_loop()
    addresses: list[tuple[int, Any]]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = [(info[0], info[4]) for info in infos]
    else:
        # An address needs no lookup; getaddrinfo would still take a trip through the
        # loop's thread pool, which the first connection would pay for in its connect time.
        addresses = [(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, (host, port))]
    error: OSError = OSError(f"{host} has no address to connect to")
    for family, addr in addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            await loop.sock_connect(sock, addr)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise error


def stamped_transport(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: asyncio.BaseProtocol
) -> RxTransport | None:
    """A kernel-stamping transport over ``sock`` for ``protocol``; None if the socket refuses
    the timestamp option (the caller then hands the socket to the loop, stamped in user space).

    The loop's TCP transports turn Nagle off; this one does too, or every request would wait
    for the previous one's ACK.
    """
    try:
        enable_timestamps(sock)
    except OSError:
        return None
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return RxTransport(loop, sock, protocol)
