"""Process-level settings that keep the server's own pauses out of what it measures."""

from __future__ import annotations

from harness.wire import quiet_gc as _gc


def quiet_gc() -> None:
    """Keep cyclic garbage collection off the latency path.

    Events are short-lived dicts freed by reference counting; the cyclic
    collector only adds pauses.  A full collection walks every tracked object —
    imported modules, profiles, caches — and was measured at tens of
    milliseconds on a busy 2-core machine, which shows up as a late token in
    every stream.  Freezing what exists at startup takes it out of every later
    collection, and the long-lived process's young-generation threshold
    (harness/wire/quiet_gc.py, as the recorder's) makes collections rare.  For
    the life of the process: nothing restores it.
    """
    _gc.begin()
