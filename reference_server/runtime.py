"""Process-level settings that keep the server's own pauses out of what it measures."""

from __future__ import annotations

import gc

#: allocations between young-generation collections (CPython's default is 700)
GC_GEN0_THRESHOLD = 20_000


def quiet_gc() -> None:
    """Keep cyclic garbage collection off the latency path.

    Events are short-lived dicts freed by reference counting; the cyclic
    collector only adds pauses.  A full collection walks every tracked object —
    imported modules, profiles, caches — and was measured at tens of
    milliseconds on a busy 2-core machine, which shows up as a late token in
    every stream.  Freezing what exists at startup takes it out of every later
    collection, and a higher young-generation threshold makes collections rare.
    """
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)
