"""Keep the client's cyclic garbage collector out of what it measures.

A collection stops the event loop while it traverses every object of the generations it
collects.  What a run keeps alive for a while (in-flight streams, their futures and
coroutines, histories) is young by the collector's count: at a thousand agents that is
~50,000 objects, and each young-generation pass over them took 20-50 ms (BENCHMARKS.md) —
a late stamp for every first token in flight.  CPython's default (a pass every 700
allocations) made passes short and constant; a threshold of 20,000 made them rare and long.

So while a pass measures, the collector looks at nothing: what is alive when it starts is
frozen out of every collection, the young threshold is raised to :data:`VALVE_THRESHOLD`,
and :func:`refreeze`, called every :data:`FREEZE_EVERY_S` by the pass's watchdog, moves
what is alive since then out of sight too (``gc.freeze`` is a list splice: no traversal).
Freed objects are freed by reference counting as always; what that cannot free — reference
cycles — waits for the end of the pass, and the measuring paths make none (a closed
connection drops its transport, tests/run/test_no_cycles.py).  The threshold is a valve:
only a million new container objects within one freeze interval (code that leaks, not a
run) make the collector run, and the loop-lag watchdog then reports the stall.

Long-lived processes that do not measure (the recorder, the reference server) use
:data:`GEN0_THRESHOLD` and no refreezing: rare collections, and their cycles still collected.
It lives in the wire layer, the one the harness and the reference server share: it touches
no socket and reads no clock.
"""

from __future__ import annotations

import gc

#: allocations between young-generation collections in a long-lived process (default 700)
GEN0_THRESHOLD = 20_000
#: while a pass measures: new container objects within one freeze interval that still make
#: the collector run (a safety valve against leaking code; a run allocates ~10 per turn)
VALVE_THRESHOLD = 1_000_000
#: how often a measuring pass moves what is alive out of the collector's sight
FREEZE_EVERY_S = 1.0


def begin(threshold: int = GEN0_THRESHOLD) -> tuple[int, int, int]:
    """Collect, freeze what is alive, raise the young threshold; returns the old thresholds."""
    old = gc.get_threshold()
    gc.collect()
    gc.freeze()
    if old[0] > 0:  # a threshold of 0 means collection was turned off: leave it off
        gc.set_threshold(max(threshold, old[0]), old[1], old[2])
    return old


def refreeze() -> None:
    """Move every object alive now out of the collector's sight (and reset its count)."""
    gc.freeze()


#: collections made between passes so far; the loop-lag watchdog skips a wake-up one delayed
between_passes = 0


def collect_between_passes() -> None:
    """Collect what the last pass left in cycles, then freeze what is alive again.  Only
    while nothing is measured: the pass is a full collection's pause.

    The error paths do make cycles (an exception kept on a connection and raised from it, a
    future holding the exception that holds the frame that holds the future): under injected
    faults a run left ~60 objects a failed turn, whole connections and their sockets among
    them, frozen until the run ended, and a 30-minute soak's harness grew ~100 MiB/h.  A run
    of many passes (rounds, transports) now holds at most one pass's cycles.
    """
    global between_passes
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    between_passes += 1


def end(old: tuple[int, int, int]) -> None:
    """Undo :func:`begin`: restore the thresholds and unfreeze (everything frozen, as at exit)."""
    gc.set_threshold(*old)
    gc.unfreeze()
