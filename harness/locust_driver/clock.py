"""The Locust driver's clock: ``perf_counter_ns`` shifted once per process onto the Unix epoch.

Records of workers on different machines share an origin (to NTP accuracy) while
staying monotonic within a process.  The edge host stamps with plain
``perf_counter_ns`` (the asyncio edge's clock, one per machine on Linux):
:data:`SHIFT_NS` moves its stamps onto this clock.
"""

from __future__ import annotations

import time

SHIFT_NS = time.time_ns() - time.perf_counter_ns()


def now_ns() -> int:
    """Monotonic nanoseconds on an epoch-anchored origin (see the module docstring)."""
    return time.perf_counter_ns() + SHIFT_NS
