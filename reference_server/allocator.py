"""The C allocator under the server: large freed blocks go back to the system, and what
it holds is reported (``/health``'s ``memory``; the soak accounts for it).

glibc's malloc serves a block of 128 KiB or more with its own ``mmap`` and unmaps it when
freed, but the first such free raises that threshold to the freed size (up to 32 MiB), so
from then on blocks of that size come from the heap.  A dict of the engine's prefix cache
(65,536 entries: ~5 MiB of table, reallocated whenever deletions fill it, which a full LRU
does all the time) then lands on the heap's top, and its predecessor's freed table stays
resident below whatever was allocated after it: the server's RSS climbed in steps of ~5 MiB
for many minutes after the cache was full (docs/reliability.md, *Soak*).  Setting the
threshold fixes it at its default and turns that adjustment off: a large block is mapped
and unmapped each time (a few microseconds of system calls, for blocks that each take
longer than that to fill), and the heap above holds only small blocks.  Elsewhere (macOS,
musl) this does nothing and the report is empty.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import sys
from typing import Any

#: ``mallopt``'s parameter number for the mmap threshold (malloc.h)
_M_MMAP_THRESHOLD = -3
#: glibc's default threshold; setting it (to any value) is what stops the adjustment
MMAP_THRESHOLD_BYTES = 128 * 1024
#: the environment variable glibc reads for the same setting: a user's choice wins
_ENV = "MALLOC_MMAP_THRESHOLD_"


class _Mallinfo2(ctypes.Structure):
    _fields_ = tuple(
        (name, ctypes.c_size_t)
        for name in (
            "arena",  # bytes the heaps hold from the system (brk and thread-arena heaps)
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",  # bytes in blocks mapped one by one (at or above the threshold)
            "usmblks",
            "fsmblks",
            "uordblks",  # bytes of the heaps in use
            "fordblks",  # bytes of the heaps free but held (resident once touched)
            "keepcost",
        )
    )


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallinfo2.restype = _Mallinfo2  # glibc >= 2.33
        libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _glibc()


def _pymalloc_stats() -> Any:
    """CPython's ``_PyObject_DebugMallocStats(FILE *)`` (what ``sys._debugmallocstats`` prints
    to stderr), None where it is missing."""
    if _LIBC is None:
        return None
    try:
        stats = ctypes.pythonapi._PyObject_DebugMallocStats
        _LIBC.open_memstream.restype = ctypes.c_void_p
        _LIBC.open_memstream.argtypes = (
            ctypes.POINTER(ctypes.c_char_p),
            ctypes.POINTER(ctypes.c_size_t),
        )
        _LIBC.fclose.argtypes = (ctypes.c_void_p,)
        _LIBC.free.argtypes = (ctypes.c_void_p,)
    except AttributeError:
        return None
    stats.argtypes = (ctypes.c_void_p,)
    stats.restype = ctypes.c_int
    return stats


_PYMALLOC_STATS = _pymalloc_stats()
_ARENAS = re.compile(rb"# arenas allocated current\s*=\s*([\d,]+)")
_ALLOCATED = re.compile(rb"# bytes in allocated blocks\s*=\s*([\d,]+)")
#: pymalloc's arena size on 64-bit CPython 3.10+ (1 MiB, the radix tree's ARENA_BITS = 20)
PYMALLOC_ARENA_BYTES = 1 << 20


def pymalloc_report() -> dict[str, int] | None:
    """Python's small-object allocator: bytes of its arenas and of the blocks in use in them
    (their difference is what it holds freed: a live object keeps its whole 1 MiB arena
    resident), read from its own statistics written to a memory stream (about 0.1 ms, no
    stderr involved); None where CPython does not export them."""
    if _PYMALLOC_STATS is None or _LIBC is None:
        return None
    buf, size = ctypes.c_char_p(), ctypes.c_size_t()
    stream = _LIBC.open_memstream(ctypes.byref(buf), ctypes.byref(size))
    if not stream:
        return None
    try:
        _PYMALLOC_STATS(stream)
    finally:
        _LIBC.fclose(stream)  # sets buf and size
    try:
        text = ctypes.string_at(buf, size.value)
    finally:
        _LIBC.free(buf)
    arenas, allocated = _ARENAS.search(text), _ALLOCATED.search(text)
    if arenas is None or allocated is None:
        return None
    return {
        "python_arena_bytes": int(arenas.group(1).replace(b",", b"")) * PYMALLOC_ARENA_BYTES,
        "python_allocated_bytes": int(allocated.group(1).replace(b",", b"")),
    }


def fix_mmap_threshold(env: dict[str, str] | os._Environ[str] = os.environ) -> bool:
    """Keep large blocks mapped one by one for the life of the process (see the module's
    docstring); False where there is no glibc or ``MALLOC_MMAP_THRESHOLD_`` is set."""
    if _LIBC is None or _ENV in env:
        return False
    return bool(_LIBC.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def malloc_report() -> dict[str, Any] | None:
    """What malloc holds now, in bytes (``mallinfo2``), Python's allocated blocks and its
    arenas (:func:`pymalloc_report`); None without glibc.  ``free_held_bytes`` is memory
    freed but kept in the heaps: what fragmentation leaves resident."""
    if _LIBC is None:
        return None
    info = _LIBC.mallinfo2()
    return {
        "heap_bytes": int(info.arena),
        "mapped_bytes": int(info.hblkhd),
        "in_use_bytes": int(info.uordblks),
        "free_held_bytes": int(info.fordblks),
        "python_blocks": sys.getallocatedblocks(),
        **(pymalloc_report() or {}),
    }
