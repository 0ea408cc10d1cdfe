"""Ask Linux's scheduler for a short time slice, so that a relay that wakes runs sooner.

Why a relay (``loopbench record``, the bench's bare relay) wants one, and what EEVDF does
with it: docs/traces.md, "Overhead".  Since Linux 6.12 a task may set its own slice
(``sched_setattr`` with ``sched_runtime``, no privilege needed); the relay asks for the
shortest the kernel accepts.

Per thread: the thread that calls it, and the threads and processes it starts afterwards
(they inherit it).  So a relay asks once its helpers (the observer's process or thread)
run: their work is milliseconds of JSON, which should not cut in.  Elsewhere (not
Linux, a kernel older than 6.12, an unknown architecture) nothing changes and the call says so.
"""

from __future__ import annotations

import ctypes
import platform
import struct
import sys

#: the shortest slice Linux accepts for a fair task (0.1 ms)
SLICE_NS = 100_000

_SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}  # sched_setattr, sched_getattr
# struct sched_attr (SCHED_ATTR_SIZE_VER1): size, policy, flags, nice, priority, runtime,
# deadline, period, util_min, util_max
_ATTR = struct.Struct("IIQiIQQQII")
_RESET_ON_FORK = 0x01  # SCHED_FLAG_RESET_ON_FORK: kept if the thread had it
_FAIR = (0, 3, 5)  # SCHED_OTHER, SCHED_BATCH, SCHED_IDLE: the policies with a slice


def _syscalls() -> tuple[int, int] | None:
    # a 32-bit Python on a 64-bit kernel: platform.machine() names the kernel's numbers
    if not sys.platform.startswith("linux") or struct.calcsize("P") != 8:
        return None
    return _SYSCALLS.get(platform.machine())


def _thread_attr() -> tuple[int, ...] | None:
    """The calling thread's ``struct sched_attr``; None where it cannot be read."""
    calls = _syscalls()
    if calls is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(_ATTR.size)
        if libc.syscall(calls[1], 0, buf, _ATTR.size, 0) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return _ATTR.unpack(buf.raw)


def thread_slice_ns() -> int | None:
    """The calling thread's slice as the kernel reports it; None where it cannot say."""
    attr = _thread_attr()
    if attr is None or attr[1] not in _FAIR:
        return None  # real-time policies have no slice
    return int(attr[5])


def request_short_slice(ns: int = SLICE_NS) -> bool:
    """Set the calling thread's slice to ``ns``; True if the kernel now reports that slice."""
    calls = _syscalls()
    attr = _thread_attr()
    if calls is None or attr is None or attr[1] not in _FAIR:
        return False
    # The call sets the policy and the nice value too: the thread's own are passed back (a
    # user's `nice` or SCHED_BATCH stays).
    _, policy, flags, nice, *_ = attr
    packed = _ATTR.pack(_ATTR.size, policy, flags & _RESET_ON_FORK, nice, 0, ns, 0, 0, 0, 0)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syscall(calls[0], 0, ctypes.create_string_buffer(packed, _ATTR.size), 0) != 0:
            return False  # refused (a sandbox's seccomp filter, say): nothing changed
    except (OSError, AttributeError):
        return False
    # Kernels before 6.12 take the call and ignore the slice: only the read-back tells.
    return thread_slice_ns() == ns
