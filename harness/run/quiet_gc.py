"""Keep the client's cyclic garbage collector out of what it measures.

Every object a run keeps for a while (turn records, histories, in-flight
streams) counts towards the young generation's threshold; with CPython's
default of 700 the collector ran every few milliseconds at 16 streams and a
generation-1 pass every ~100 ms, 2-4 ms each — a late arrival stamp for
whatever was in flight (BENCHMARKS.md).  Events themselves are freed by
reference counting, and the harness's connections leave no reference cycles,
so a much higher threshold costs little memory and makes collections rare.
What exists when the run starts (modules, plans, pools) is frozen out of every
collection; both settings are undone when the run ends.
"""

from __future__ import annotations

import gc

#: allocations between young-generation collections while a run measures (default 700)
GEN0_THRESHOLD = 20_000


def begin() -> tuple[int, int, int]:
    """Collect, freeze what is alive, raise the young threshold; returns the old thresholds."""
    old = gc.get_threshold()
    gc.collect()
    gc.freeze()
    if old[0] > 0:  # a threshold of 0 means collection was turned off: leave it off
        gc.set_threshold(max(GEN0_THRESHOLD, old[0]), old[1], old[2])
    return old


def end(old: tuple[int, int, int]) -> None:
    """Undo :func:`begin`: restore the thresholds and unfreeze (everything frozen, as at exit)."""
    gc.set_threshold(*old)
    gc.unfreeze()
